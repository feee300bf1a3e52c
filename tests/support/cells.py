"""Hand-made cell files for scoring and report tests: eval.json, judge.json and trace.md written the way the evaluate
and judge stages write them (same keys, same layout under results/cells/)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def model_name(model: str) -> str:
    return model.replace("/", "--")


def cell_dir(root: Path, model: str, eval_id: str, agent: str) -> Path:
    """``<root>/cells/<org--name>/<eval>/<agent slot>`` (a repeat's slot is ``<agent>@run<k>``)."""
    return Path(root) / "cells" / model_name(model) / eval_id / agent


def write_cell(
    root: Path,
    model: str,
    eval_id: str,
    agent: str,
    value: float | None = None,
    *,
    stderr: float | None = 0.02,
    n: int = 100,
    shape: str = "accuracy",
    metric: str = "accuracy",
    status: str | None = None,
    attempts: list[dict] | None = None,
    run: int | None = None,
    agent_run: dict | None = None,
    judge: str | dict | None = None,
    judge_reason: str = "",
    trace: str | None = None,
    inspect_log: Path | None = None,
    timings: dict | None = None,
    slurm_job_id: str | None = "4242",
) -> Path:
    """Write one cell; returns its eval.json. ``shape``: "headline" (schema 2: the metric by name) or "accuracy"
    (schema 1's ``{accuracy, stderr, n}``, which the scorer still reads)."""
    d = cell_dir(root, model, eval_id, agent)
    d.mkdir(parents=True, exist_ok=True)
    if value is None:
        metrics = None
    elif shape == "accuracy":
        metrics = {"accuracy": value, "stderr": stderr, "n": n}
    else:
        metrics = {"name": metric, "value": value, "stderr": stderr, "n": n}
    if status is None:
        status = "scored" if value is not None else "no_model"
    log_rel = None
    if inspect_log is not None:
        (d / "inspect").mkdir(exist_ok=True)
        shutil.copyfile(inspect_log, d / "inspect" / f"{eval_id}.eval")
        log_rel = f"inspect/{eval_id}.eval"
    data = {
        "schema_version": 2 if shape == "headline" else 1,
        "model": model,
        "model_name": model_name(model),
        "eval": eval_id,
        "agent": agent,
        "status": status,
        "metrics": metrics,
        "scorer": "gsm8k_strict" if metrics else None,
        "task": "ptflow",
        "checkpoint": {
            "path": f"/scratch/checkpoints/{model_name(model)}/{eval_id}/{agent}",
            "kind": "base" if agent == "baseline" else ("trained" if metrics else "none"),
            "commit_or_hash": "0" * 40,
        },
        "inspect_log": log_rel,
        "max_new_tokens": 20 if metrics else None,
        "attempts": attempts if attempts is not None else ([{"max_new_tokens": 20, "ok": True}] if metrics else []),
        "timings": {
            "started": "2026-11-20T10:00:00+00:00",
            "finished": "2026-11-20T10:05:00+00:00",
            "eval_seconds": 300.0,
            "train_seconds": None if agent == "baseline" else 3600.0,
            **(timings or {}),
        },
        "host": "node001",
        "slurm_job_id": slurm_job_id,
        "software": {"python": "3.11.7", "inspect-ai": "0.3.285"},
    }
    if run is not None:
        data["run"] = run
    if agent_run is not None:
        data["agent_run"] = {"exit_code": 0, "budget_exhausted": False, "final_model": value is not None, **agent_run}
    (d / "eval.json").write_text(json.dumps(data, indent=2))
    if trace is not None:
        (d / "agent").mkdir(exist_ok=True)
        (d / "agent" / "trace.md").write_text(trace)
    if judge is not None:
        verdict = judge if isinstance(judge, dict) else None
        if verdict is None and judge == "skipped":
            verdict = {"status": "skipped", "flagged": None, "reason": "no judge configured (config key judge)"}
        elif verdict is None:
            flagged = judge == "flagged"
            verdict = {
                "status": "judged",
                "judge": {"cli": "codex", "model": "gpt-5.1-codex"},
                "contamination": flagged,
                "disallowed_model": False,
                "reason": judge_reason or ("trained on the test split" if flagged else "only the train split used"),
                "flagged": flagged,
                "judged_at": "2026-11-20T11:00:00+00:00",
            }
        verdict = {"model": model, "eval": eval_id, "agent": agent, "trace": "agent/trace.md", **verdict}
        (d / "judge.json").write_text(json.dumps(verdict, indent=2))
    return d / "eval.json"
