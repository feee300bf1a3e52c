"""The spend cap with a real CLI: opencode (at its pin) against the OpenAI Chat Completions stand-in, which charges
100 prompt and 10 output tokens per call (tests/support/providers), in a ptflow agent cell (``train_agent_cell``, a
train job's code) whose spend settings price the stand-in's model. The cell's watch reads opencode's step_finish
events as they are printed, stops the agent (TERM) once the cap is reached while it is still working, keeps the
final_model/ it saved for evaluation, and the manifest says ``stopped_by: spend_cap`` with the spend and the cap;
the live spend file holds the same. Then a second cell of the same matrix, past the matrix cap, is not started."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace

import pytest

from ptflow.config.spend import MATRIX_CAP_REACHED, NOT_STARTED_FILE, CellSpend
from ptflow.stages.train.agent.clis.opencode import PTB_JUDGE_MODEL
from ptflow.stages.train.agent.context import AgentCellError
from tests.support.agent_clis import cli_bin_dir
from tests.support.providers import ProviderStandIn, Step

pytestmark = pytest.mark.timeout(300)

KEY = "sk-oc-FAKE-spend-7a8b9c"
MODEL = PTB_JUDGE_MODEL  # opencode/kimi-k2.6, priced here by the test's table (opencode prices it at 0)
# USD per million tokens: each stand-in call (100 in, 10 out) costs $0.10 + $0.01
PRICE = {"input": 1000.0, "cached_input": 100.0, "output": 1000.0}
CAP = 0.2  # reached after the second call ($0.22)
SAVE = Step(shell="mkdir -p final_model && printf w > final_model/model.safetensors && echo '{}' > "
           "final_model/config.json")  # fmt: skip
TRAJECTORY = [SAVE, Step(shell="echo second"), Step(shell="sleep 120"), Step(shell="echo never"), Step(text="Done.")]


def _cell(tmp_path, api_url: str, name: str, spend: dict):
    from tests.support.agent_cells import agent_job

    spec = {
        "id": "oc",
        "cli": "opencode",
        "model": MODEL,
        "hours": 0.1,
        "grace_minutes": 0.05,
        "keys": ["OPENCODE_API_KEY"],
        "trace_dir": str(tmp_path / name / "agent"),
        "base_url": api_url + "/v1",
    }
    return agent_job("/nonexistent-base", None, tmp_path / name / "out", agent=spec,
                     cell={"model": "org/base", "eval": "add"}, log=print, spend=spend)  # fmt: skip


def test_a_real_cli_is_stopped_at_its_cap_and_the_matrix_cap_starts_no_more(tmp_path, monkeypatch):
    from ptflow.stages.train.agent.cell import train_agent_cell

    monkeypatch.setenv("PATH", f"{cli_bin_dir('opencode')}:{os.environ['PATH']}")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "node-tmp"))
    (tmp_path / "node-tmp").mkdir()
    monkeypatch.setenv("OPENCODE_API_KEY", KEY)
    first_trace = tmp_path / "first" / "agent"
    spend = CellSpend(cap_usd=CAP, price=PRICE, subscription=False, live=str(first_trace / "spend.json"))
    with ProviderStandIn(trajectory=TRAJECTORY, expected_key=KEY) as api:
        started = time.time()
        result = train_agent_cell(_cell(tmp_path, api.url, "first", spend))
        seconds = time.time() - started
        served = [r for r in api.records if r.get("api") == "openai_chat" and r.get("main")]
    run = result["agent_run"]
    print(f"capped cell: {seconds:.1f} s, {len(served)} calls, {run['spend']}")
    assert run["stopped_by"] == "spend_cap" and not run["budget_exhausted"], run
    assert run["spend"]["basis"] == "prices" and run["spend"]["cap_usd"] == CAP
    # the two calls whose step_finish opencode printed before the cap; a third (step 3, whose sleep was running) is
    # served but its tokens are printed only when its step ends: what the CLI reported is what counts
    assert run["spend"]["usd"] == pytest.approx(0.22) and len(served) in (2, 3), (run["spend"], len(served))
    assert result["final_model"], "the model saved before the cap is kept for evaluation"
    assert (tmp_path / "first" / "out" / "model.safetensors").is_file()
    assert seconds < 90, "stopped while sleep 120 ran, not at its end"  # the watch looks every 2 s; TERM
    assert [r["step"] for r in served][-1] < len(TRAJECTORY) - 1, "the agent never reached its last step"
    assert json.loads((first_trace / "spend.json").read_text())["usd"] == run["spend"]["usd"]

    # the first cell finished (its manifest written as a train job writes it): the matrix has spent its cap
    (tmp_path / "first" / "checkpoint.json").write_text(json.dumps({"agent_run": run}))
    second_trace = tmp_path / "second" / "agent"
    # the run's ledger, as the driver writes it when the run starts (ptflow.config.spend.write_ledger): both cells
    cells = [{"cell": n, "trace_dir": str(tmp_path / n / "agent"), "manifest": str(tmp_path / n / "checkpoint.json")}
             for n in ("first", "second")]  # fmt: skip
    ledger = tmp_path / "ledger.json"
    ledger.write_text(json.dumps({"cap_usd": CAP, "cells": cells}))
    second = replace(spend, live=str(second_trace / "spend.json"), matrix_cap_usd=CAP, ledger=str(ledger))
    with ProviderStandIn(trajectory=TRAJECTORY, expected_key=KEY) as api:
        with pytest.raises(AgentCellError) as err:
            train_agent_cell(_cell(tmp_path, api.url, "second", second))
        assert [r for r in api.records if r.get("main")] == [], "the agent was started"
    assert f"not started: {MATRIX_CAP_REACHED}" in str(err.value) and "\n" not in str(err.value)
    assert json.loads((second_trace / NOT_STARTED_FILE).read_text())["reason"] == MATRIX_CAP_REACHED
