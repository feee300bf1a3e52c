"""The evaluate stage: one cell through inspect-ai, then eval.json derived from inspect's log.

Inspect's ``.eval`` log stays beside eval.json (``inspect view --log-dir <cell>/inspect`` shows it). eval.json is
validated against ``schemas/eval.schema.json`` and written atomically, last.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from ptflow.config.model import SCHEMA_DIR
from ptflow.files import write_json_atomic

EVAL_SCHEMA = SCHEMA_DIR / "eval.schema.json"
SOFTWARE = ("ptflow", "torch", "transformers", "trl", "inspect-ai", "snakemake", "huggingface-hub")


def software_versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in SOFTWARE:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def validate_eval_json(data: dict) -> None:
    import jsonschema

    schema = json.loads(EVAL_SCHEMA.read_text())
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise ValueError(f"eval.json invalid at {where}: {exc.message}") from None


def token_schedule(max_new_tokens: int, lower: tuple[int, ...]) -> list[int]:
    """PostTrainBench's retries: 4 tries at the default, then 3 and 2 at each lower value."""
    tries = [max_new_tokens] * 4
    for value, count in zip(lower, (3, 2), strict=False):
        tries += [value] * count
    return tries


def no_model_eval(*, cell: dict, task: str, manifest: dict, eval_json: str, inspect_dir: str, log=print) -> dict:
    """eval.json for a cli-agent cell whose agent left no final_model: status no_model, no metrics."""
    Path(inspect_dir).mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    run = manifest.get("agent_run") or {}
    data = {
        "schema_version": 1,
        **cell,
        "status": "no_model",
        **({"agent_run": run} if run else {}),
        "metrics": None,
        "scorer": None,
        "task": task,
        "checkpoint": {"path": manifest["checkpoint"], "kind": "none", "commit_or_hash": manifest["config_hash"]},
        "inspect_log": None,
        "max_new_tokens": None,
        "attempts": [],
        "timings": {"started": now, "finished": now, "eval_seconds": 0, "train_seconds": manifest.get("train_seconds")},
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "software": software_versions(),
    }
    validate_eval_json(data)
    write_json_atomic(eval_json, data)
    why = "its budget ran out" if run.get("budget_exhausted") else f"it exited {run.get('exit_code')}"
    log(f"{cell}: no final model ({why}); eval.json says status no_model")
    return data


def evaluate_cell(
    *,
    cell: dict,
    task: str,
    model_path: str,
    test_parquet: str | None,
    checkpoint: dict,
    max_new_tokens: int,
    retry_max_new_tokens: tuple[int, ...],
    inspect_dir: str,
    eval_json: str,
    train_seconds: float | None = None,
    threads: int = 1,
    log=print,
    agent_run: dict | None = None,
) -> dict:
    if threads:
        import torch

        torch.set_num_threads(threads)
    from ptflow.stages.evaluate.inspect_eval import metrics_from_log, run_inspect_eval

    if task != "ptflow":
        raise NotImplementedError(
            f"task {task!r}: evaluating inspect_evals tasks needs the GPU/vLLM path of a site; on this machine "
            "only task 'ptflow' runs"
        )
    out_dir = Path(inspect_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    started = datetime.now(UTC)
    t0 = time.time()
    attempts: list[dict] = []
    log_path = None
    for tokens in token_schedule(max_new_tokens, retry_max_new_tokens):
        try:
            log_path = run_inspect_eval(model_path, test_parquet, out_dir, task_name=cell["eval"], max_tokens=tokens)
            attempts.append({"max_new_tokens": tokens, "ok": True})
            break
        except Exception as exc:  # each failure is recorded, then the next (lower) budget is tried
            attempts.append({"max_new_tokens": tokens, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
            log(f"inspect eval failed with max_new_tokens={tokens}: {exc}")
            shutil.rmtree(out_dir, ignore_errors=True)
    if log_path is None:
        raise RuntimeError(f"evaluation of {cell} failed after {len(attempts)} tries; last: {attempts[-1]['error']}")
    metrics = metrics_from_log(log_path)
    data = {
        "schema_version": 1,
        **cell,
        "status": "scored",
        **({"agent_run": agent_run} if agent_run else {}),
        "metrics": {"accuracy": metrics["accuracy"], "stderr": metrics["stderr"], "n": metrics["n"]},
        "scorer": metrics["scorer"],
        "task": task,
        "checkpoint": checkpoint,
        "inspect_log": os.path.relpath(log_path, Path(eval_json).parent),
        "max_new_tokens": attempts[-1]["max_new_tokens"],
        "attempts": attempts,
        "timings": {
            "started": started.isoformat(timespec="seconds"),
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "eval_seconds": round(time.time() - t0, 3),
            "train_seconds": train_seconds,
        },
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "software": software_versions(),
    }
    validate_eval_json(data)
    write_json_atomic(eval_json, data)
    log(f"{cell}: accuracy {metrics['accuracy']:.3f} ± {metrics['stderr']:.3f} (n={metrics['n']})")
    return data
