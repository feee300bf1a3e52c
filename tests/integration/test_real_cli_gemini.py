"""The REAL gemini CLI (@google/gemini-cli at its pin, from the npm registry, cached) against the Gemini stand-in of
``tests/support/providers`` (``streamGenerateContent`` over SSE), set up as a cli-agent cell sets it up: a fresh
private HOME written by ``GEMINI.write_home``, the CLI's fixed env, only the key it reads, the task dir as its
working directory, PostTrainBench's command. A short trajectory (write a file, read it back, answer) must leave
the file, reach the stand-in with the configured model and the shell tool each turn, and leave the key in no file;
the faults (401, a stalled stream under ``timeout``) must end the way a cell expects (429/503: in a cell, in
test_agent_cli_faults).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptflow.stages.train.agent.clis.gemini import trace_lines
from tests.support.agent_clis import cli_bin_dir
from tests.support.cli_runs import STALL_TIMEOUT, Run, run_cli
from tests.support.providers import Faults, Step

KEY = "AIza-FAKE-gemini-0a1b2c"
MODEL = "gemini-3-pro-preview"
TEXT = "hello from the stand-in"
TRAJECTORY = [
    Step(shell=f"printf '%s\\n' '{TEXT}' > hello.txt"),
    Step(shell="cat hello.txt && ls"),
    Step(text="hello.txt is written. Done."),
]
PROMPT = "Write hello.txt with a greeting, show it, then stop."


@pytest.fixture(scope="module")
def gemini_bin() -> Path:
    return cli_bin_dir("gemini")


def run_gemini(root, bin_dir, faults=None, timeout=None) -> Run:
    return run_cli("gemini", root, bin_dir, key=KEY, model=MODEL, prompt=PROMPT, trajectory=TRAJECTORY,
                   faults=faults, timeout=timeout)  # fmt: skip


def gen_records(run: Run) -> list[dict]:
    return run.api_records("gemini")


@pytest.fixture(scope="module")
def happy(gemini_bin, tmp_path_factory) -> Run:
    return run_gemini(tmp_path_factory.mktemp("gemini-ok"), gemini_bin)


def test_api_spend_is_read_from_the_real_stream(happy: Run):
    happy.assert_spend_read_back("gemini", "gemini")


def test_trajectory_runs_to_the_end(happy: Run):
    assert happy.rc == 0, happy.stderr[-3000:]
    assert (happy.task / "hello.txt").read_text() == TEXT + "\n"
    main = [r for r in gen_records(happy) if r["main"]]
    assert len(main) == len(TRAJECTORY)
    assert all(r["status"] == 200 and r["key_ok"] for r in main)
    assert {r["model"] for r in main} == {MODEL}  # no routing, no fallback: the configured model each turn
    assert all("run_shell_command" in r["tools"] for r in main)
    assert [r["turns"] for r in main] == list(range(len(TRAJECTORY)))
    assert [r["step"] for r in main] == list(range(len(TRAJECTORY)))
    assert [r for r in happy.records if r.get("status") == 404] == []
    # the settings held: --yolo was not overridden, and there was no auth prompt
    assert "overridden" not in happy.stderr and "Invalid auth" not in happy.stderr
    happy.assert_key_nowhere()
    first = min(r["time"] for r in happy.records)
    print(f"gemini: first request {first - happy.started:.1f}s after start, run {happy.seconds:.1f}s")


def test_trace_lines_read_the_real_stream(happy: Run):
    events = [json.loads(line) for line in happy.stdout.splitlines() if line.strip().startswith("{")]
    assert [e["type"] for e in events][:2] == ["init", "message"]
    shown = [trace_lines(e) for e in events]
    assert all(lines is not None for lines in shown), "an event of gemini's own stream was not recognised"
    text = "\n".join(line for lines in shown for line in lines)
    assert f"model `{MODEL}`" in text
    assert "**tool call** `run_shell_command`" in text
    assert "printf '%s\\n' 'hello from the stand-in' > hello.txt" in text
    assert "cat hello.txt && ls" in text
    assert text.count("**tool result** (success") == 2
    assert TEXT in text  # the output of cat, in the second tool result
    assert "**result**: success" in text and "tool_calls 2" in text
    assert "deprecated" not in text  # the CLI's --prompt notice is not the model's text
    # other CLIs' events are not gemini's
    assert trace_lines({"type": "assistant", "message": {"content": []}}) is None  # claude
    assert trace_lines({"type": "result", "subtype": "success", "result": "x"}) is None  # claude
    assert trace_lines({"type": "item.completed", "item": {}}) is None  # codex
    assert trace_lines({"type": "tool_result", "timestamp": "t", "status": "error",
                        "error": {"type": "invalid_tool_params", "message": "no"}}) == [
        "**tool result** (error, invalid_tool_params):", "```", "no", "```"]  # fmt: skip


def test_unauthorized_fails_fast(gemini_bin, tmp_path):
    """Also the cell's part for gemini (test_agent_cli_faults runs claude's and codex's 401 through
    train_agent_cell): the cell's own decision, refused_key, on this real output is one line naming the key."""
    from ptflow.stages.train.agent.launch import refused_key
    from tests.support.agent_cells import agent_spec

    run = run_gemini(tmp_path, gemini_bin, Faults(unauthorized=True))
    assert run.rc != 0
    assert run.seconds < 30, f"a refused key took {run.seconds:.0f}s to end the CLI"
    assert [r["status"] for r in gen_records(run)] == [401]  # no retries on 401
    last = json.loads(run.stdout.strip().splitlines()[-1])
    assert last["type"] == "result" and last["status"] == "error"
    run.assert_key_nowhere()
    stdout = tmp_path / "trace" / "stdout.log"
    stdout.parent.mkdir()
    stdout.write_text(run.stdout)
    spec = agent_spec(id="gemini-cell", cli="gemini", model=MODEL, keys=["GEMINI_API_KEY"])
    msg = refused_key(spec, run.rc, stdout, 0)
    assert msg and "GEMINI_API_KEY" in msg and "401" in msg and "\n" not in msg, (run.rc, msg)
    print(f"gemini 401: exit {run.rc} after {run.seconds:.1f}s")


# gemini through 429 and 503 to the end of its trajectory (the stand-in's retry hints set the pace, the retries stay
# in the first turn): tests/integration/test_agent_cli_faults.py::test_rate_limits_then_success_are_carried_by_the_
# clis_own_retries[gemini], the same real CLI in a ptflow agent cell.


def test_stalled_stream_ends_by_timeout(gemini_bin, tmp_path):
    run = run_gemini(tmp_path, gemini_bin, Faults(stall_at=1), timeout=STALL_TIMEOUT)
    assert run.rc == 124
    assert (run.task / "hello.txt").exists()  # step 0 ran before the stall
    assert any(r.get("status") == "stalled" for r in run.records)
