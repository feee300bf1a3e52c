"""The sandbox keys of PostTrainBench main's checkout (the key allowlist, ``ptflow.config.ptb_keys``), run for real on
the local (venv) path with the FIXTURE main checkout (tests/support/ptb_main.py): an agent cell's environment holds
exactly the union of ``agents/<agent>/api_keys.json`` and the task's ``info.json`` ``required_api_keys`` that is set
(run_task.sh's values: CODEX_API_KEY from OPENAI_API_KEY, OPENAI_API_KEY for the graded tasks, OPENROUTER_API_KEY
under the OpenRouter backend), no other provider key even where ptflow's environment has it; a required key that is
not set is refused in one line before the agent starts (in the cell, and at preflight where the checkout is here);
a fixed-list checkout (d27a95e) keeps ptflow's key scoping."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ptflow.config import ptb_keys
from ptflow.stages.train.agent.cell import train_agent_cell
from tests.support.agent_cells import agent_job
from tests.support.ptb_checkout import commit_change, make_fixture_checkout
from tests.support.ptb_main import commit_main, sandbox_api_keys

OPENAI = "sk-FAKE-openai-ptb-keys-7c2d"
EXTRA = "sk-ant-FAKE-not-in-the-union-41f0"  # set in ptflow's environment, allowed by no file of the probe's
ROUTER = "sk-or-FAKE-openrouter-9b3e"
PROVIDERS = ("CODEX_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY",
             "ZAI_API_KEY")  # fmt: skip
# Our probe in the place of a solve.sh: the names of the secret-looking variables it sees, and one key's value
PROBE = """#!/bin/bash
echo "secrets=$(env | cut -d= -f1 | grep -E 'TOKEN|KEY|SECRET|PASSWORD' | sort | tr '\\n' ' ')"
echo "codex_value=$CODEX_API_KEY"
echo "evaluate=$(head -n 1 evaluate.py)"
"""
ROUTER_EVAL = "# FIXTURE evaluate_openrouter.py: the OpenRouter grader's\n"  # our text (06b716e's file name)
PROBE_KEYS = {"allowed_api_keys": ["CODEX_API_KEY", "ZAI_API_KEY"]}  # ZAI_API_KEY: allowed, never set here
EVALS = ("gsm8k", "arenahardwriting")


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    dest = tmp_path_factory.mktemp("ptb") / "PostTrainBench"
    make_fixture_checkout(dest, evals=EVALS, agents=("codex",), judge="v1.1")
    commit_main(dest, evals=EVALS, agents=("codex", "claude"))
    commit_change(dest, "agents/probe/solve.sh", PROBE, "a probe in the place of a solve.sh")
    commit_change(dest, "src/eval/tasks/arenahardwriting/evaluate_openrouter.py", ROUTER_EVAL, "its OpenRouter grader")
    commit = commit_change(dest, "agents/probe/api_keys.json", json.dumps(PROBE_KEYS), "the probe's allowlist")
    return dest, commit


def _cell(tmp_path, checkout, eval_dir: str, env: dict, keys=("OPENAI_API_KEY",)):
    dest, commit = checkout
    agent = {"id": "probe", "cli": "codex", "model": "gpt-5.1-codex-max", "hours": 1, "grace_minutes": 0.5,
             "keys": list(keys), "grader_keys": ["OPENAI_API_KEY"], "trace_dir": str(tmp_path / "trace"),
             "posttrainbench": {"eval_dir": eval_dir, "solve": "probe", "num_gpus": 1},
             "checkout": {"path": str(dest), "commit": commit}}  # fmt: skip
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path), **env}
    cell = {"model": "Qwen/Qwen3-1.7B-Base", "eval": eval_dir}
    job = agent_job(
        str(tmp_path / "base"), None, tmp_path / "out", agent=agent, env=env, cell=cell, log=lambda *_: None
    )
    result = train_agent_cell(job)
    out = (tmp_path / "trace" / "stdout.log").read_text()
    seen = dict(line.split("=", 1) for line in out.splitlines() if "=" in line and not line.startswith("="))
    return result, set(seen["secrets"].split()) - {"PTFLOW_AGENT_KEYS", "VLLM_API_KEY"}, seen


def files_holding(root: Path, value: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and value.encode() in p.read_bytes()]


def test_the_union_is_read_from_the_checkouts_files_as_run_task_sh_builds_it(checkout):
    dest, commit = checkout
    read = ptb_keys.commit_reader(dest, commit)
    for agent in ("codex", "claude", "probe"):
        for eval_dir in EVALS:
            keys = ptb_keys.sandbox_keys(read, agent, eval_dir, {"OPENAI_API_KEY": OPENAI})
            assert list(keys.names) == sandbox_api_keys(dest, agent, eval_dir)  # the fixture's run_task.sh rule
    router = ptb_keys.sandbox_keys(read, "probe", "arenahardwriting", {"OPENROUTER_API_KEY": ROUTER})
    assert router.openrouter and list(router.names) == sandbox_api_keys(dest, "probe", "arenahardwriting", "openrouter")
    assert ptb_keys.tree_reader(dest)("agents/probe/api_keys.json") == read("agents/probe/api_keys.json")
    # run_task.sh's values: CODEX_API_KEY is OPENAI_API_KEY's (not its own), OPENAI_API_KEY only for graded tasks
    env = {"OPENAI_API_KEY": OPENAI, "CODEX_API_KEY": "sk-own-codex-value-0000", "ANTHROPIC_API_KEY": EXTRA}
    assert ptb_keys.sandbox_keys(read, "probe", "gsm8k", env).values(env) == {"CODEX_API_KEY": OPENAI}
    with pytest.raises(ptb_keys.SandboxKeysError, match=r"has no agents/nobody/api_keys.json: .*agent nobody"):
        ptb_keys.sandbox_keys(read, "nobody", "gsm8k", env)


def test_a_cells_sandbox_holds_exactly_the_union(tmp_path, checkout):
    env = {"OPENAI_API_KEY": OPENAI, "ANTHROPIC_API_KEY": EXTRA, "GEMINI_API_KEY": EXTRA + "-gemini"}
    result, secrets, seen = _cell(tmp_path / "gsm8k", checkout, "gsm8k", env)
    assert result["agent_run"]["exit_code"] == 0
    # the probe's allowlist (CODEX_API_KEY; ZAI_API_KEY not set) and gsm8k's none: not OPENAI_API_KEY (ptflow's
    # grader_keys name it), not ANTHROPIC_API_KEY or GEMINI_API_KEY though ptflow's environment has them
    assert secrets == {"CODEX_API_KEY"} and seen["codex_value"] == "***"
    # arenahardwriting's info.json requires OPENAI_API_KEY: it is there beside CODEX_API_KEY, and nothing more
    result, secrets, seen = _cell(tmp_path / "arena", checkout, "arenahardwriting", env)
    assert result["agent_run"]["exit_code"] == 0 and secrets == {"CODEX_API_KEY", "OPENAI_API_KEY"}
    assert seen["evaluate"] != ROUTER_EVAL.strip()
    # the OpenRouter backend (no OPENAI_API_KEY): OPENROUTER_API_KEY added, CODEX_API_KEY empty hence absent, and
    # the task's evaluate.py is its evaluate_openrouter.py (run_task.sh's EVAL_SCRIPT)
    env = {"OPENROUTER_API_KEY": ROUTER, "ANTHROPIC_API_KEY": EXTRA}
    result, secrets, seen = _cell(tmp_path / "router", checkout, "arenahardwriting", env, keys=())
    assert result["agent_run"]["exit_code"] == 0 and secrets == {"OPENROUTER_API_KEY"}
    assert seen["evaluate"] == ROUTER_EVAL.strip()
    for value in (OPENAI, EXTRA, ROUTER):  # no value in anything the cells wrote
        assert files_holding(tmp_path, value) == []


def test_a_required_key_that_is_not_set_is_refused_in_one_line_before_the_agent_starts(tmp_path, checkout):
    with pytest.raises(RuntimeError) as caught:
        _cell(tmp_path, checkout, "arenahardwriting", {"ANTHROPIC_API_KEY": EXTRA}, keys=())
    line = str(caught.value)
    assert "\n" not in line and line.startswith("environment variable OPENAI_API_KEY is not set but the PostTrainBench")
    assert "src/eval/tasks/arenahardwriting/info.json requires it in agent probe's sandbox" in line
    assert "export OPENAI_API_KEY (or OPENROUTER_API_KEY alone, for its OpenRouter grader)" in line
    assert "agents/probe/api_keys.json" in line and EXTRA not in line
    assert not (tmp_path / "trace" / "stdout.log").exists() or "secrets=" not in (
        tmp_path / "trace" / "stdout.log").read_text()  # fmt: skip


def test_a_fixed_list_checkout_keeps_ptflows_key_scoping(tmp_path):
    """d27a95e's checkout (no agents/*/api_keys.json): codex's key as CODEX_API_KEY, and the grader's
    OPENAI_API_KEY where ptflow's eval names it, as before; no allowlist is read."""
    dest = tmp_path / "PostTrainBench"
    make_fixture_checkout(dest, evals=("gsm8k",), agents=("codex",), judge="v1.1")
    commit = commit_change(dest, "agents/probe/solve.sh", PROBE, "a probe in the place of a solve.sh")
    assert not ptb_keys.allowlist_checkout(dest)
    env = {"OPENAI_API_KEY": OPENAI, "ANTHROPIC_API_KEY": EXTRA}
    result, secrets, seen = _cell(tmp_path / "cell", (dest, commit), "gsm8k", env)
    assert result["agent_run"]["exit_code"] == 0 and secrets == {"CODEX_API_KEY", "OPENAI_API_KEY"}


def test_preflight_refuses_a_required_key_not_set_when_the_checkout_is_here(default_raw, checkout, monkeypatch):
    from ptflow.cluster.preflight import check_checkout_keys
    from ptflow.config.layout import Layout
    from ptflow.config.matrix import build_config

    dest, commit = checkout
    default_raw["posttrainbench"] = {"commit": commit, "path": str(dest)}
    default_raw["evals"] = [{"id": "arenahardwriting", "task": "posttrainbench/arenahardwriting"}]
    default_raw["agents"] = [{"id": "probe", "kind": "cli-agent", "cli": "codex", "model": "gpt-5.1-codex-max",
                              "hours": 1, "keys": ["OPENAI_API_KEY"], "solve": "probe"}]  # fmt: skip
    default_raw.pop("scoring", None)
    default_raw.pop("judge", None)
    cfg = build_config(default_raw)
    layout = Layout(results="/r", scratch="/s", hf_home="/h")
    problems = check_checkout_keys(cfg, layout, env={"ANTHROPIC_API_KEY": EXTRA})
    assert len(problems) == 1 and "\n" not in problems[0], problems
    assert "OPENAI_API_KEY is not set" in problems[0] and "arenahardwriting/info.json" in problems[0]
    assert check_checkout_keys(cfg, layout, env={"OPENAI_API_KEY": OPENAI}) == []
    assert check_checkout_keys(cfg, layout, env={"OPENROUTER_API_KEY": ROUTER}) == []  # its OpenRouter grader
    # ... whose evaluate_openrouter.py run_task.sh copies as the task's evaluate.py: a checkout without it is refused
    read = ptb_keys.commit_reader(dest, commit)
    assert ptb_keys.task_script_problem(read, "arenahardwriting", {"OPENROUTER_API_KEY": ROUTER}) is None
    line = ptb_keys.task_script_problem(read, "healthbench", {"OPENROUTER_API_KEY": ROUTER})
    assert line.startswith("the PostTrainBench checkout has no src/eval/tasks/healthbench/evaluate_openrouter.py")
    assert ptb_keys.task_script_problem(read, "healthbench", {"OPENAI_API_KEY": OPENAI}) is None
