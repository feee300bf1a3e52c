"""The spend budget through Snakemake on the local profile, with the real opencode (its pin, npm) against the OpenAI
Chat Completions stand-in, which charges 100 prompt and 10 output tokens per call (tests/support/providers; the test's
price table makes each call $0.11). The stand-in runs in the test's process; the jobs reach it through the agents'
``base_url``.

Matrix: the tiny model x eval ``add`` (16 test problems) x {baseline, capped, next}; spend.max_usd $0.20.

1. ``capped`` (max_spend_usd $0.20): its trajectory saves the base model as final_model/, then works on; its watch
   stops it at $0.22 (two calls) while a ``sleep 120`` runs; the model it saved is evaluated in its train job
   (eval.json scored), the manifest says ``stopped_by: spend_cap``.
2. The whole matrix next: when the workflow is parsed the matrix has spent its cap, so ``next`` (no manifest) is
   left out of the run before any allocation, in one line; no train job runs; the leaderboard falls ``next`` back
   with "not started: matrix spend cap reached" and shows the dollar column.
3. ``ptflow status`` (text and --json) and ``ptflow plan``, as a user runs them on that working directory, show the
   spend so far, the caps and the cell left unstarted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ptflow.stages.train.agent.clis.opencode import PTB_JUDGE_MODEL
from tests.e2e.smk import REPO, job_env, snakemake
from tests.support.agent_clis import cli_bin_dir
from tests.support.providers import ProviderStandIn, Step

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PTFLOW = str(Path(sys.executable).with_name("ptflow"))
KEY = "sk-oc-FAKE-spend-e2e-4d5e6f"
MODEL_NAME = "ptflow--tiny-llama-h64"
CAP = 0.2  # the capped cell's and the matrix's: reached by the capped cell's second call ($0.22)
# USD per million tokens: each stand-in call (100 in, 10 out) costs $0.10 + $0.01
PRICES = {
    "source": "tests/e2e/test_spend_budget.py (the stand-in's model, priced for the test)",
    "date": "2026-11-29",
    "models": {PTB_JUDGE_MODEL: {"input": 1000.0, "cached_input": 100.0, "output": 1000.0}},
}
# The base model (task.json's) saved as final_model/: a model the evaluation loads, without training it
SAVE = Step(shell="""python -c "import json, shutil; shutil.copytree(json.load(open('task.json'))['base_model'], """
                  """'final_model')" && ls final_model""")  # fmt: skip
TRAJECTORY = [SAVE, Step(shell="echo second"), Step(shell="sleep 120"), Step(shell="echo never"), Step(text="Done.")]
CELLS = Path("results") / "cells" / MODEL_NAME / "add"


def _overlay(url: str, prices: Path) -> dict:
    (add,) = [e for e in yaml.safe_load((REPO / "config" / "config.yaml").read_text())["evals"] if e["id"] == "add"]
    add["dataset"]["generator"]["n_test"] = 16
    agent = {"kind": "cli-agent", "cli": "opencode", "model": PTB_JUDGE_MODEL, "hours": 0.1, "grace_minutes": 0.05,
             "keys": ["OPENCODE_API_KEY"], "base_url": url + "/v1"}  # fmt: skip
    return {
        "evals": [add],
        "agents": [
            {"id": "baseline", "kind": "baseline"},
            {"id": "capped", **agent, "max_spend_usd": CAP},
            {"id": "next", **agent},
        ],
        "spend": {"prices": str(prices), "max_usd": CAP},
        "matrix": {"models": ["ptflow/tiny-llama-h64"], "evals": ["add"], "agents": "all"},
    }


def _ptflow(work: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run([PTFLOW, *args], cwd=work, capture_output=True, text=True, env=job_env(env))
    assert proc.returncode == 0, f"ptflow {args} -> {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    work = tmp_path_factory.mktemp("spend")
    tmp = tmp_path_factory.mktemp("spend_tmp")  # node-local tmp: task dirs, the CLI's own temp files
    prices = work / "prices.yaml"
    prices.write_text(yaml.safe_dump(PRICES))
    env = {"OPENCODE_API_KEY": KEY, "TMPDIR": str(tmp), "PATH": f"{cli_bin_dir('opencode')}:{os.environ['PATH']}"}
    started = time.time()
    with ProviderStandIn(trajectory=TRAJECTORY, expected_key=KEY) as api:
        (work / "overlay.yaml").write_text(yaml.safe_dump(_overlay(api.url, prices)))
        args = ("--configfile", str(work / "overlay.yaml"))
        # the capped cell first (and the baseline): it spends the matrix's cap
        first = [str(CELLS / a / "eval.json") for a in ("capped", "baseline")]
        snakemake(work, *first, *args, env=env)
        served = [r for r in api.records if r.get("api") == "openai_chat" and r.get("main")]
        # then the whole matrix, as a user goes on
        proc = snakemake(work, *args, env=env)
        served_after = [r for r in api.records if r.get("api") == "openai_chat" and r.get("main")]
    runs = time.time() - started
    status_text = _ptflow(work, "status", "-d", str(work), "--no-png", env=env).stdout
    status = json.loads(_ptflow(work, "status", "-d", str(work), "--json", env=env).stdout)
    plan = _ptflow(work, "plan", "--directory", str(work), *args, env=env).stdout
    print(f"two workflow runs: {runs:.1f} s; with status and plan: {time.time() - started:.1f} s")
    return work, proc, served, served_after, status_text, status, plan


def load(work: Path, agent: str, name: str) -> dict:
    return json.loads((work / CELLS / agent / name).read_text())


def test_the_capped_cell_is_stopped_and_its_model_evaluated(done):
    work, _, served, *_ = done
    manifest = load(work, "capped", "checkpoint.json")
    run = manifest["agent_run"]
    assert run["stopped_by"] == "spend_cap" and not run["budget_exhausted"], run
    assert run["spend"]["usd"] == pytest.approx(0.22) and run["spend"]["basis"] == "prices", run["spend"]
    assert run["spend"]["cap_usd"] == CAP
    # stopped during step 3's sleep: the agent never asked for its last steps
    assert len(served) in (2, 3) and max(r["step"] for r in served) < len(TRAJECTORY) - 1, served
    assert manifest["weights"], "the model saved before the cap is kept (copied to scratch, hashed)"
    data = load(work, "capped", "eval.json")
    assert data["status"] == "scored" and data["metrics"]["n"] == 16, data.get("metrics")
    assert data["agent_run"]["stopped_by"] == "spend_cap" and data["agent_run"]["spend"]["usd"] == pytest.approx(0.22)
    train_log = (work / "results" / "logs" / "train" / MODEL_NAME / "add" / "capped.log").read_text()
    assert "spend cap reached: $0.2200 of $0.20" in train_log


def test_the_run_wrote_the_matrix_caps_ledger_that_the_cells_job_read(done):
    """The matrix's agent cells are handed to no job's params: the driver writes them once when the run starts
    (ptflow.config.spend.write_ledger) and each agent cell's train job reads them there before its agent starts (the
    capped cell started: it could read it)."""
    work, *_ = done
    ledger = json.loads((work / "results" / "spend" / "ledger.json").read_text())
    assert ledger["cap_usd"] == CAP
    assert [Path(c["trace_dir"]).parent.name for c in ledger["cells"]] == ["capped", "next"], ledger


def test_the_matrix_cap_leaves_the_next_cell_unstarted_in_one_line(done):
    work, proc, served, served_after, *_ = done
    out = proc.stdout + proc.stderr
    line = "matrix spend cap $0.20 reached ($0.22 spent by 1 cells): 1 agent cells not started; raise spend.max_usd"
    assert out.count(line) == 1, out[-3000:]
    assert "rule train:" not in out and "rule aggregate:" in out, out[-3000:]
    assert served_after == served, "an agent was started after the matrix cap was reached"
    assert not (work / CELLS / "next").exists(), "no job of the unstarted cell ran (no not_started.json either)"


def test_the_leaderboard_shows_the_spend_and_the_unstarted_cell(done):
    work, *_ = done
    df = pd.read_csv(work / "results" / "summary.csv", keep_default_na=False).set_index("agent")
    assert df.loc["next", "fallback"] == "yes"
    assert df.loc["next", "fallback_reason"].startswith("not started: matrix spend cap reached ($0.22 spent of")
    md = (work / "results" / "leaderboard.md").read_text()
    assert "API spend ($)" in md and "$0.22" in md, md
    agents = pd.read_csv(work / "results" / "agents.csv", keep_default_na=False).set_index("agent")
    assert str(agents.loc["capped", "api_usd"]).startswith("0.22"), agents.loc["capped"].to_dict()


def test_status_and_plan_show_spend_and_caps(done):
    *_, status_text, status, plan = done
    assert "spend so far: $0.22 over 1 of 2 agent cells; caps: matrix $0.20 (spend.max_usd); capped $0.20 per cell" \
        in status_text, status_text[-2000:]  # fmt: skip
    assert f"not started: matrix spend cap reached (1 cells: {MODEL_NAME}/add/next)" in status_text
    spend = status["spend"]
    assert spend["spent_usd"] == pytest.approx(0.22) and spend["matrix_cap_usd"] == CAP
    assert spend["caps_usd"] == {"capped": CAP} and spend["not_started"] == [f"{MODEL_NAME}/add/next"]
    assert "Spend\n  caps: matrix $0.20 (spend.max_usd); capped $0.20 per cell" in plan, plan[-2000:]
    assert "most the matrix may spend: $0.20" in plan and "spent so far: $0.22 over 1 of 2 agent cells" in plan
    assert "matrix spend cap $0.20 reached ($0.22 spent by 1 cells): 1 agent cells not started" in plan
