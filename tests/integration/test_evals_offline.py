"""The seven PostTrainBench evals through their REAL task definitions (inspect_evals' gsm8k, aime2025, humaneval, bfcl,
healthbench; ptflow's gpqamain and arenahardwriting), offline, against a tiny CPU model, each producing an inspect
log whose headline metric is read back.

The Hub datasets are FIXTURES fetched once through ptflow's real fetch code from the stand-in hub
(tests/support/hubstandin.py), then every evaluation runs with HF_HUB_OFFLINE=1 / HF_DATASETS_OFFLINE=1 and an
unreachable HF_ENDPOINT. A tiny model is the STAND-IN for the grading LLM of HealthBench and Arena-Hard. Two samples
per eval, 16 new tokens: the pipeline is under test, not the model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ptflow.config.model import eval_from_entry
from ptflow.stages.evaluate.kit import evaluate as kit
from ptflow.stages.evaluate.run import evaluate, write_agent_kit
from ptflow.stages.evaluate.settings import Provider, build_call
from ptflow.stages.evaluate.sources import data_env
from tests.support.evalfixtures import STANDIN_GRADER, build_world

# warm_kit (tests/conftest.py): the evaluations' kit runs start warm; the agent's own copy of the kit runs cold
pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("warm_kit")]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("evals-world"))


@pytest.fixture(scope="module")
def env(world):
    """The parent's environment minus any HF settings, with the Hub unreachable and inspect's caches in tmp."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE", "INSPECT_"))}
    out["HF_ENDPOINT"] = "http://127.0.0.1:9"  # discard port: any network attempt fails at once
    out["XDG_CACHE_HOME"] = str(world.hf_home.parent / "xdg")
    return out


# STAND-IN grader, loaded from the Hub cache offline; batch size 1 (max_connections): the judge's calls are
# sequential, and inspect's hf provider otherwise waits 2 s for a batch to fill before each one.
STANDIN = {"model": f"hf/{STANDIN_GRADER}", "model_args": {"device": "cpu", "do_sample": False},
           "config": {"max_connections": 1}}  # fmt: skip

# task -> (entry beyond the common part, scorer that carries the headline metric)
CASES = {
    "inspect_evals/gsm8k": ({"task_args": {"fewshot": 2}}, "match"),
    "inspect_evals/aime2025": ({}, "aime_scorer"),
    "inspect_evals/humaneval": ({"task_args": {"sandbox": "local"}}, "verify"),
    "ptflow/gpqamain": ({}, "choice"),
    "inspect_evals/bfcl": ({"task_args": {"categories": ["simple_python", "irrelevance"]}}, "bfcl_scorer"),
    "inspect_evals/healthbench": ({"task_args": {"judge_max_tokens": 8}, "grader": STANDIN}, "_scorer"),
    "ptflow/arenahardwriting": (
        {"task_args": {"judge_max_tokens": 8, "judge_reasoning_effort": None}, "grader": STANDIN},
        "pairwise_judge",
    ),
}


def call_for(task: str) -> dict:
    entry = {"id": task.split("/")[1], "task": task, "limit": 2, "max_new_tokens": 16, "sampling": "greedy",
             "max_connections": 2, **CASES[task][0]}  # fmt: skip
    return build_call(eval_from_entry(entry), Provider())


@pytest.fixture(scope="module")
def outcomes(world, env, tmp_path_factory):
    """Each eval's outcome, evaluated once and shared (the agent-kit test compares against one)."""
    done: dict = {}

    def get(task: str):
        if task not in done:
            log_dir = tmp_path_factory.mktemp(f"logs-{task.split('/')[1]}")
            done[task] = evaluate(call_for(task), world.model, log_dir, hf_home=world.hf_home,
                                  evals_cache=world.evals_cache, env=env, log=lambda *_: None)  # fmt: skip
        return done[task]

    return get


@pytest.mark.parametrize("task", sorted(CASES))
def test_real_task_offline_headline_read_back(outcomes, task):
    out = outcomes(task)
    h = out.headline
    assert h["name"] == out.call["headline"]["metric"]
    assert h["scorer"] == CASES[task][1]
    assert 0.0 <= h["value"] <= 1.0 and h["stderr"] is not None and h["stderr"] >= 0.0
    # Arena-Hard counts only questions the judge gave a verdict in both orders (the stand-in's are mostly noise).
    assert h["n"] == 2 if task != "ptflow/arenahardwriting" else 0 <= h["n"] <= 2
    log = Path(out.log_path)
    assert log.name == f"{out.eval_id}.eval" and log.is_file()
    assert kit.headline_metric(log, out.call["headline"]) == h
    assert [a["ok"] for a in out.attempts] == [True] and out.max_new_tokens == 16


def test_logs_record_the_pinned_inputs(world, outcomes):
    """The Hub datasets came through ptflow's fetch (at their pinned commits); the log records the inputs."""
    from inspect_ai.log import read_eval_log

    assert len(world.fetched) == 4 and all("@" in line and "unpinned" not in line for line in world.fetched)
    log = read_eval_log(outcomes("inspect_evals/gsm8k").log_path, header_only=True)
    assert log.eval.task == "inspect_evals/gsm8k" and log.eval.task_args["fewshot"] == 2
    assert log.eval.model.startswith("hf/") and log.eval.model_args["do_sample"] is False
    assert log.plan.config.max_tokens == 16


def test_agent_kit_measures_what_is_scored(world, env, outcomes, tmp_path):
    """The agent's copy of evaluate.py, run with PostTrainBench's interface on the same call, reports the same
    headline metric as the final evaluation (greedy decoding: the same numbers)."""
    final = outcomes("ptflow/gpqamain")
    script = write_agent_kit(tmp_path / "task", call_for("ptflow/gpqamain"))
    assert sorted(p.name for p in (tmp_path / "task").iterdir()) == [
        "evaluate.py", "evaluate_settings.json", "ptflow_tasks.py", "templates",
    ]  # fmt: skip
    agent_env = {**env, **data_env(world.hf_home, world.evals_cache)}
    proc = subprocess.run(
        [sys.executable, str(script), "--model-path", str(world.model), "--limit", "2", "--max-tokens", "16",
         "--max-connections", "2", "--json-output-file", "metrics.json"],
        cwd=tmp_path / "task", env=agent_env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "task" / "metrics.json").read_text())
    h = final.headline
    assert metrics == {"accuracy": h["value"], "stderr": h["stderr"], "n": h["n"], "metric": h["name"],
                       "scorer": h["scorer"]}  # fmt: skip
