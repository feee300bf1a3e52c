"""The REAL claude CLI (@anthropic-ai/claude-code at its pin, from the npm registry, cached) against the Anthropic
stand-in of ``tests/support/providers`` (``POST /v1/messages`` over SSE), set up as a cli-agent cell sets it up: a
fresh private HOME written by ``CLAUDE.write_home``, the CLI's fixed env, only the key it reads, the task dir as its
working directory, PostTrainBench's command. A short trajectory (write a file, read it back, answer) must leave the
file, reach the stand-in with the configured model and the Bash tool each turn, and leave the key in no file; the
faults (401, 429 then 529, a stalled stream under ``timeout``) must end the way a cell expects.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ptflow.stages.train.agent.clis.base import CellHome
from ptflow.stages.train.agent.clis.claude import MAX_RETRIES, auth_failed, trace_lines, write_home
from tests.support.agent_clis import cli_bin_dir
from tests.support.cli_runs import STALL_TIMEOUT, Run, run_cli
from tests.support.providers import Faults, Step

KEY = "sk-ant-api03-FAKE-claude-7f3e9a"
MODEL = "claude-sonnet-4-5"
TEXT = "hello from the stand-in"
TRAJECTORY = [
    Step(shell=f"printf '%s\\n' '{TEXT}' > hello.txt"),
    Step(shell="cat hello.txt && ls"),
    Step(text="hello.txt is written. Done."),
]
PROMPT = "Write hello.txt with a greeting, show it, then stop."
ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def claude_bin() -> Path:
    return cli_bin_dir("claude")


def run_claude(root, bin_dir, faults=None, timeout=None, as_root=ROOT) -> Run:
    return run_cli("claude", root, bin_dir, key=KEY, model=MODEL, prompt=PROMPT, trajectory=TRAJECTORY,
                   faults=faults, timeout=timeout, as_root=as_root, limit=240)  # fmt: skip


def main_records(run: Run) -> list[dict]:
    return [r for r in run.api_records("anthropic") if r.get("main")]


@pytest.fixture(scope="module")
def happy(claude_bin, tmp_path_factory) -> Run:
    return run_claude(tmp_path_factory.mktemp("claude-ok"), claude_bin)


def test_write_home(tmp_path):
    home = tmp_path / "h"
    cell = CellHome(home, "/home/agent", "/task")
    ctx = {"model": MODEL, "task_dir": "/task", "base_url": None, "root": False}
    env = write_home(cell, ctx)
    assert env["CLAUDE_CONFIG_DIR"] == "/home/agent/.claude"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and env["DISABLE_AUTOUPDATER"] == "1"
    assert env["CLAUDE_CODE_MAX_RETRIES"] == MAX_RETRIES
    assert "IS_SANDBOX" not in env and "ANTHROPIC_BASE_URL" not in env
    assert not any("KEY" in name or "TOKEN" in name for name in env)
    settings = json.loads((home / ".claude" / "settings.json").read_text())
    assert settings["permissions"]["defaultMode"] == "bypassPermissions"
    state = json.loads((home / ".claude" / ".claude.json").read_text())
    assert state["projects"]["/task"]["hasTrustDialogAccepted"] is True
    env = write_home(cell, {**ctx, "base_url": "http://gw:4000", "root": True})
    assert env["IS_SANDBOX"] == "1" and env["ANTHROPIC_BASE_URL"] == "http://gw:4000"


def test_api_spend_is_read_from_the_real_stream(happy: Run):
    happy.assert_spend_read_back("claude", "anthropic")
    # claude prices its calls itself (total_cost_usd, which PostTrainBench's compute_claude_costs.py reads)
    from ptflow.stages.train.agent.clis import CLIS

    assert CLIS["claude"].usage(happy.events()).cost_usd > 0


def test_trajectory_runs_to_the_end(happy: Run):
    assert happy.rc == 0, happy.stderr[-3000:]
    assert (happy.task / "hello.txt").read_text() == TEXT + "\n"
    main = main_records(happy)
    assert len(main) == len(TRAJECTORY)
    assert all(r["status"] == 200 and r["key_ok"] for r in main)
    assert {r["model"] for r in main} == {MODEL}  # the configured model each turn
    assert all("Bash" in r["tools"] for r in main)
    assert [r["turns"] for r in main] == list(range(len(TRAJECTORY)))
    assert [r["step"] for r in main] == list(range(len(TRAJECTORY)))
    assert all(r["key_ok"] for r in happy.records if "key_ok" in r)  # side requests carry the key too
    assert [r for r in happy.records if r.get("status") == 404] == []
    assert [r for r in happy.records if r.get("other")] == []  # no count_tokens: non-essential traffic is off
    init = happy.events()[0]
    assert init["type"] == "system" and init["subtype"] == "init"
    assert init["permissionMode"] == "bypassPermissions" and init["apiKeySource"] == "ANTHROPIC_API_KEY"
    # the CLI kept its state in the pinned config dir, not at the home's top
    assert (happy.home / ".claude" / ".claude.json").exists() and not (happy.home / ".claude.json").exists()
    happy.assert_key_nowhere()
    first = min(r["time"] for r in happy.records)
    print(f"claude: first request {first - happy.started:.1f}s after start, run {happy.seconds:.1f}s")


def test_trace_lines_read_the_real_stream(happy: Run):
    events = happy.events()
    assert [e["type"] for e in events][0] == "system" and events[-1]["type"] == "result"
    shown = [trace_lines(e) for e in events]
    assert all(lines is not None for lines in shown), "an event of claude's own stream was not recognised"
    text = "\n".join(line for lines in shown for line in lines)
    assert f"model `{MODEL}`" in text and "bypassPermissions" in text
    assert text.count("**tool call** `Bash`") == 2
    assert "printf '%s\\n' 'hello from the stand-in' > hello.txt" in text
    assert "cat hello.txt && ls" in text
    assert text.count("**tool result** (ok):") == 2
    assert f"{TEXT}\nhello.txt" in text  # the output of the second command, in its tool result
    assert "**assistant**: hello.txt is written. Done." in text
    assert "**result**: success (turns 3, cost $" in text
    assert not auth_failed(happy.rc, events) and not auth_failed(1, events)
    # other CLIs' events are not claude's
    assert trace_lines({"type": "init", "timestamp": "t", "session_id": "s", "model": "m"}) is None  # gemini
    assert trace_lines({"type": "result", "timestamp": "t", "status": "success", "stats": {}}) is None  # gemini
    assert trace_lines({"type": "item.completed", "item": {}}) is None  # codex
    assert trace_lines({"type": "thread.started", "thread_id": "x"}) is None  # codex


def test_unauthorized_fails_fast(claude_bin, tmp_path):
    run = run_claude(tmp_path, claude_bin, Faults(unauthorized=True))
    assert run.rc != 0
    # write_home's CLAUDE_CODE_MAX_RETRIES: claude retries 401 like any error (default 10 retries: ~3 minutes)
    assert run.seconds < 40, f"a refused key took {run.seconds:.0f}s to end the CLI"
    main = main_records(run)
    assert {r["status"] for r in main} == {401} and len(main) <= 1 + 1 + 5  # a stream, its fallback, 5 retries
    result = run.events()[-1]
    assert result["type"] == "result" and result["is_error"] is True and "Invalid API key" in result["result"]
    text = "\n".join(line for ev in run.events() for line in trace_lines(ev))
    assert "**API error** (authentication_failed): Invalid API key" in text
    assert auth_failed(run.rc, run.events())
    assert not (run.task / "hello.txt").exists()
    run.assert_key_nowhere()
    print(f"claude 401: exit {run.rc} after {run.seconds:.1f}s, {len(main)} main requests")


def test_rate_limit_then_overload_are_retried(claude_bin, tmp_path):
    run = run_claude(tmp_path, claude_bin, Faults(errors=[429, 529]))
    assert run.rc == 0, run.stdout[-3000:]
    assert (run.task / "hello.txt").read_text() == TEXT + "\n"
    main = main_records(run)
    # the failed stream falls back to a non-streaming request, whose retry loop waits the stand-in's retry-after 0
    assert [r["status"] for r in main] == [429, 529, 200, 200, 200]
    assert [r["turns"] for r in main] == [0, 0, 0, 1, 2]
    assert run.events()[-1]["subtype"] == "success" and run.events()[-1]["is_error"] is False
    assert not auth_failed(run.rc, run.events())
    assert run.seconds < 60
    run.assert_key_nowhere()


def test_stalled_stream_ends_by_timeout(claude_bin, tmp_path):
    run = run_claude(tmp_path, claude_bin, Faults(stall_at=1), timeout=STALL_TIMEOUT)
    assert run.rc == 124
    assert run.seconds < STALL_TIMEOUT + 20, "claude did not end on timeout's SIGTERM"
    assert (run.task / "hello.txt").exists()  # step 0 ran before the stall
    assert [r["status"] for r in main_records(run)] == [200, "stalled"]
    run.assert_key_nowhere()


def test_root_needs_the_sandbox_switch(claude_bin, tmp_path):
    """As root, --dangerously-skip-permissions is refused unless IS_SANDBOX is set (write_home sets it for root). The
    suite runs as root (it starts the Slurm cluster, installs packages): not root, this proof fails, never skips."""
    assert ROOT, "the root check applies to uid 0 only: run the suite as root"
    run = run_claude(tmp_path, claude_bin, as_root=False)
    assert run.rc == 1
    assert "cannot be used with root/sudo privileges" in run.stderr
    assert run.records == []
