"""Faults of the provider API, met by the REAL agent CLIs in a ptflow agent cell (``train_agent_cell``, the code a
train job runs), against the provider STAND-IN of ``tests/support/providers``:

- the API stalls past the budget: timeout ends the agent (exit 124) and the ``final_model/`` it saved earlier is
  the cell's model;
- 401: the cell fails within a minute with one line naming the key (no hours of retries);
- 429/529, then success: the CLI's own retries carry it and the agent ends normally;
- a requeue mid-run (Slurm's warning): the agent is stopped, its workspace synced, and the real CLI starts again
  there with the remaining budget.
"""

from __future__ import annotations

import os
import time

import pytest

from ptflow.cluster.preempt import ResumeDir, StoppedToResume
from ptflow.stages.train.agent.cell import train_agent_cell
from ptflow.stages.train.agent.context import AgentCellError
from tests.support.agent_cells import agent_job
from tests.support.agent_clis import cli_bin_dir
from tests.support.providers import Faults, ProviderStandIn, Step

pytestmark = pytest.mark.timeout(600)

AGENTS = {  # cli -> (model, key name, fake value, protocol, the error statuses it retries, in the order served)
    "claude": ("claude-sonnet-4-5", "ANTHROPIC_API_KEY", "sk-ant-FAKE-f1", "anthropic", [529, 529]),
    "codex": ("gpt-5.1-codex-max", "OPENAI_API_KEY", "sk-oai-FAKE-f2", "openai", [429, 429]),
    # gemini meets a 429 then a 503: this run also holds test_real_cli_gemini's former retry test (one start of the
    # CPU-heavy gemini CLI fewer), its pace and turns asserted below
    "gemini": ("gemini-3-pro-preview", "GEMINI_API_KEY", "AIza-FAKE-f3", "gemini", [429, 503]),
}
SAVE = Step(
    shell="mkdir -p final_model && printf w > final_model/model.safetensors && echo '{}' > final_model/config.json"
)
QUICK = [Step(shell="echo hello > hello.txt && cat hello.txt"), SAVE, Step(text="Done.")]


@pytest.fixture
def cell_env(monkeypatch, tmp_path):
    """The job's environment: the pinned CLIs first on PATH, node-local tmp in the test's dir, the fake keys."""
    bins = [str(cli_bin_dir(name)) for name in AGENTS]
    monkeypatch.setenv("PATH", ":".join([*bins, os.environ["PATH"]]))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "node-tmp"))
    (tmp_path / "node-tmp").mkdir()
    for _, key, value, _, _ in AGENTS.values():
        monkeypatch.setenv(key, value)
    return tmp_path


def run_cell(tmp_path, cli, api, *, hours=0.05, resume=None, attempt=None, log=None):
    model, key, _, _, _ = AGENTS[cli]
    spec = {"id": f"{cli}-cell", "cli": cli, "model": model, "hours": hours, "grace_minutes": 0.05, "keys": [key],
            "trace_dir": str(tmp_path / "trace"), "base_url": api.url, "sync_minutes": 0.05}  # fmt: skip
    return train_agent_cell(agent_job("/nonexistent-base", None, tmp_path / f"out-{attempt or 1}", agent=spec,
                            cell={"model": "org/base", "eval": "add"}, resume=resume, attempt=attempt,
                            log=log or (lambda _: None)))  # fmt: skip


def expected(cli):
    return {AGENTS[cli][3]: AGENTS[cli][2]}


# gemini's 401 is met by tests/integration/test_real_cli_gemini.py::test_unauthorized_fails_fast: the same real CLI
# set up as a cell sets it up, and the cell's own decision (refused_key, what train_agent_cell raises) applied to
# its output, one line naming the key; here the two other CLIs carry that decision through train_agent_cell itself.
@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_unauthorized_fails_the_cell_at_once_naming_the_key(cell_env, cli):
    with ProviderStandIn(trajectory=QUICK, faults=Faults(unauthorized=True)) as api:
        t0 = time.monotonic()
        with pytest.raises(AgentCellError) as info:
            run_cell(cell_env, cli, api)
        took = time.monotonic() - t0
    msg = str(info.value)
    assert AGENTS[cli][1] in msg and "401" in msg and "\n" not in msg, msg
    assert took < 60, f"{cli} took {took:.0f} s to give up on a 401"
    assert any(r.get("status") == 401 for r in api.records)


@pytest.mark.parametrize("cli", sorted(AGENTS))
def test_rate_limits_then_success_are_carried_by_the_clis_own_retries(cell_env, cli):
    errors = AGENTS[cli][4]
    with ProviderStandIn(trajectory=QUICK, faults=Faults(errors=errors), expected_key=expected(cli)) as api:
        result = run_cell(cell_env, cli, api)
    run = result["agent_run"]
    assert run["exit_code"] == 0 and result["final_model"], run
    main = api.main_records()
    statuses = [r["status"] for r in main]
    assert statuses[:2] == errors and statuses[2:] and set(statuses[2:]) == {200}, statuses
    assert {r["model"] for r in main} == {AGENTS[cli][0]}
    if cli == "gemini":
        # the stand-in's retry hints (RetryInfo 0.2s; "Please retry in 0.2s"), not the CLI's 5 s backoff, set the
        # pace; the retries stay in the first turn, then one turn per step of the trajectory
        assert main[2]["time"] - main[0]["time"] < 3.0, [r["time"] - main[0]["time"] for r in main]
        assert [r["turns"] for r in main] == [0, 0, 0, 1, 2], main


def test_a_stalled_api_ends_at_the_budget_and_the_saved_final_model_counts(cell_env):
    trajectory = [SAVE, Step(shell="echo never"), Step(text="never")]
    with ProviderStandIn(trajectory=trajectory, faults=Faults(stall_at=1), expected_key=expected("codex")) as api:
        t0 = time.monotonic()
        result = run_cell(cell_env, "codex", api, hours=0.006)  # 21.6 s of budget, 3 s of grace
        took = time.monotonic() - t0
    run = result["agent_run"]
    assert run["exit_code"] == 124 and run["budget_exhausted"] is True and result["final_model"], run
    assert (cell_env / "out-1" / "model.safetensors").read_bytes() == b"w"
    assert 21 < took < 60 and any(r["status"] == "stalled" for r in api.records)


def test_a_requeue_mid_run_restarts_the_real_cli_in_the_synced_workspace(cell_env):
    import signal
    import threading

    resume = ResumeDir(cell_env / "resume")
    trajectory = [SAVE, Step(shell="echo stalled-here"), Step(text="never")]
    with ProviderStandIn(trajectory=trajectory, faults=Faults(stall_at=1), expected_key=expected("claude")) as api:

        def warn_when_stalled():
            for _ in range(600):
                if any(r.get("status") == "stalled" for r in api.records):
                    time.sleep(1.0)  # let a periodic sync happen too
                    os.kill(os.getpid(), signal.SIGUSR1)  # what Slurm sends before a requeue (--signal=USR1@…)
                    return
                time.sleep(0.1)

        threading.Thread(target=warn_when_stalled, daemon=True).start()
        resume.record_attempt({"id": "a1", "started": 1.0})
        with pytest.raises(StoppedToResume):
            run_cell(cell_env, "claude", api, hours=0.05, resume=resume, attempt="a1")
        first = resume.attempts()[0]["agent"]
        assert (resume.root / "workspace" / "final_model" / "model.safetensors").is_file()
        resume.record_attempt({"id": "a2", "started": 2.0})
        lines = []
        result = run_cell(cell_env, "claude", api, hours=0.05, resume=resume, attempt="a2", log=lines.append)
        records = list(api.main_records())
    run = result["agent_run"]
    assert [a["attempt"] for a in run["attempts"]] == ["a1", "a2"] and run["exit_code"] == 0
    assert result["final_model"] and (cell_env / "out-a2" / "model.safetensors").read_bytes() == b"w"
    left = 0.05 * 60 - first["time_taken"] / 60
    assert any(f"{left:.1f} of 3.0 minutes left" in ln for ln in lines), lines
    # the second CLI process began a new conversation, told that an earlier session worked there
    stalled = next(i for i, r in enumerate(records) if r["status"] == "stalled")
    assert records[stalled + 1]["turns"] == 0 and records[-1]["status"] == 200
    assert "An earlier session worked on this task" in (cell_env / "trace" / "prompt-2.md").read_text()
