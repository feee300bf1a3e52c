"""Three PostTrainBench protocols side by side: one matrix (gsm8k, one model, the baseline and a codex agent, the judge
on) planned by ``ptflow plan`` (Snakemake's dry-run) over each of the three FIXTURE checkouts, 9082063
(``make_fixture_checkout``), d27a95e (``judge="v1.1"``) and main (``commit_main`` over it): each plans its own
protocol's jobs and none of another's.

- 9082063: one-shot ``evaluate`` per cell, and the agent cell judged by the single v1.0 judge (the config's judge, one
  vote: run_task.sh's one judge);
- d27a95e: one-shot ``evaluate`` per cell, and the agent cell judged by run_judge.sh's panel (gpt, kimi, api: one vote
  each);
- main: ``evaluate_seed`` per cell and seed of run_final_eval.sh's ``--default-seeds`` (the plan does not know the
  model yet: every seed), ``seed_mean`` per cell, no ``evaluate``; the agent cell judged by judge_lib.sh's four
  judges (one vote each).

The three plans run at once (each ~10 s of Snakemake parsing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from ptflow.stages.posttrainbench import judge_main, judge_v11
from tests.conftest import REPO
from tests.support.ptb_checkout import make_fixture_checkout
from tests.support.ptb_main import FINAL_EVAL_SEEDS, commit_main

PTFLOW = str(Path(sys.executable).with_name("ptflow"))
SITE = REPO / "tests" / "slurm" / "localtest.yaml"
NO_CLUSTER = str(REPO / "tests" / "unit" / "data" / "no-cluster-slurm.conf")  # a plan needs no cluster
MODEL = "Qwen--Qwen3-1.7B-Base"
CONFIG_JUDGE = "codex"  # the config's judge (its id: its agent), which judges a 9082063 checkout's cells
CELLS = {(MODEL, "gsm8k", "baseline"), (MODEL, "gsm8k", "codex")}
AGENT_CELL = (MODEL, "gsm8k", "codex")


def _checkouts(root: Path) -> dict[str, tuple[Path, str]]:
    out = {"9082063": root / "ptb-9082063", "d27a95e": root / "ptb-d27a95e", "main": root / "ptb-main"}
    commits = {
        "9082063": make_fixture_checkout(out["9082063"], evals=("gsm8k",), agents=("codex",)),
        "d27a95e": make_fixture_checkout(out["d27a95e"], evals=("gsm8k",), agents=("codex",), judge="v1.1"),
    }
    make_fixture_checkout(out["main"], evals=("gsm8k",), agents=("codex",), judge="v1.1")
    commits["main"] = commit_main(out["main"], evals=("gsm8k",), agents=("codex",))
    return {name: (path, commits[name]) for name, path in out.items()}


def _overlay(checkout: Path, commit: str) -> dict:
    return {
        "posttrainbench": {"path": str(checkout), "commit": commit},
        "models": [{"id": "Qwen/Qwen3-1.7B-Base", "source": "hub", "revision": "main"}],
        "evals": [{"id": "gsm8k", "task": "posttrainbench/gsm8k"}],
        "agents": [{"id": "baseline", "kind": "baseline"},
                   {"id": "codex", "kind": "cli-agent", "cli": "codex", "model": "gpt-5.1-codex-max", "hours": 1,
                    "keys": ["OPENAI_API_KEY"]}],
        "judge": {"agent": CONFIG_JUDGE, "model": "gpt-5.1-codex", "keys": ["OPENAI_API_KEY"]},
        "scoring": {"weights": {"gsm8k": 1.0}},
        "matrix": {"models": "all", "evals": "all", "agents": "all"},
    }  # fmt: skip


def _plans(root: Path) -> dict[str, dict]:
    """``ptflow plan --json`` of the matrix over each checkout, the three at once."""
    running = {}
    for name, (checkout, commit) in _checkouts(root).items():
        work = root / f"work-{name}"
        work.mkdir()
        (work / "overlay.yaml").write_text(yaml.safe_dump(_overlay(checkout, commit)))
        argv = [PTFLOW, "plan", "--json", "-s", str(REPO / "Snakefile"), "--directory", str(work), "--profile",
                str(REPO / "profiles" / "local"), "--config", f"site={SITE}", "--configfile",
                str(work / "overlay.yaml")]  # fmt: skip
        running[name] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         env={**os.environ, "SLURM_CONF": NO_CLUSTER})  # fmt: skip
    out = {}
    for name, proc in running.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, (name, stderr[-3000:])
        out[name] = json.loads(stdout)
    return out


def _cells(plan: dict, rule: str) -> list[tuple]:
    """The planned jobs of ``rule``: (model, eval, agent[, judge, run | seed]) each."""
    keys = ("model", "eval", "agent", "judge", "run", "seed")
    return sorted(tuple(j["wildcards"][k] for k in keys if k in j["wildcards"]) for j in plan["jobs"]
                  if j["rule"] == rule)  # fmt: skip


def test_each_checkout_plans_its_own_protocol_s_evaluation_and_judges(tmp_path):
    plans = _plans(tmp_path)
    one_shot = sorted(CELLS)
    votes = {
        "9082063": [(*AGENT_CELL, CONFIG_JUDGE, "1")],
        "d27a95e": sorted((*AGENT_CELL, j.id, "1") for j in judge_v11.PANEL),
        "main": sorted((*AGENT_CELL, j.id, "1") for j in judge_main.PANEL),
    }
    assert sorted(j.id for j in judge_v11.PANEL) == ["api", "gpt", "kimi"]
    assert sorted(j.id for j in judge_main.PANEL) == ["api-usage", "data-contamination", "general", "ptb-lookup"]
    for name in ("9082063", "d27a95e"):  # one-shot evaluation; no seed
        plan = plans[name]
        assert _cells(plan, "evaluate") == one_shot, name
        assert _cells(plan, "evaluate_seed") == [] and _cells(plan, "seed_mean") == [], name
    main = plans["main"]
    assert _cells(main, "evaluate") == []
    assert _cells(main, "evaluate_seed") == sorted((*c, str(s)) for c in CELLS for s in FINAL_EVAL_SEEDS)
    assert _cells(main, "seed_mean") == one_shot
    for name, plan in plans.items():  # its own judges' votes, exactly: none of another protocol's
        assert _cells(plan, "judge_run") == votes[name], name
        assert _cells(plan, "judge") == [AGENT_CELL], name
        assert plan["jobs_per_rule"] == plan["dry_run_job_stats"], name
    judged = {name: {v[3] for v in _cells(plan, "judge_run")} for name, plan in plans.items()}
    assert not (judged["9082063"] & judged["d27a95e"] or judged["9082063"] & judged["main"]
                or judged["d27a95e"] & judged["main"])  # fmt: skip
