"""The REAL codex CLI (@openai/codex at its pin, from the npm registry, cached) against the OpenAI Responses stand-in of
``tests/support/providers`` (``POST /v1/responses`` over SSE), set up as a cli-agent cell sets it up: a fresh
private HOME written by ``CODEX.write_home``, only the key it reads (``CODEX_API_KEY``), the task dir as its working
directory, PostTrainBench's command. A short trajectory (write a file, read it back, answer) must leave the file,
reach the stand-in with the configured model and the shell tool each turn, and leave the key in no file; the faults
(401, 429, a stalled stream under ``timeout``) must end the way a cell expects.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from ptflow.stages.posttrainbench.agent import CheckoutAgentError
from ptflow.stages.train.agent.clis.base import CellHome
from ptflow.stages.train.agent.clis.codex import CODEX, judge_command, trace_lines
from tests.support.agent_cells import agent_job
from tests.support.agent_clis import cli_bin_dir
from tests.support.cli_runs import STALL_TIMEOUT, Run, run_cli
from tests.support.providers import Faults, ProviderStandIn, Step
from tests.support.ptb_checkout import make_fixture_checkout, run_task_listing

pytestmark = pytest.mark.timeout(300)

KEY = "sk-proj-FAKE-codex-4d5e6f"
MODEL = "gpt-5.1-codex-max"
TEXT = "hello from the stand-in"
TRAJECTORY = [
    Step(shell=f"printf '%s\\n' '{TEXT}' > hello.txt"),
    Step(shell="cat hello.txt && ls"),
    Step(shell='test -z "${CODEX_API_KEY:-}" && echo "no key in the shell"'),
    Step(text="hello.txt is written. Done."),
]
PROMPT = "Write hello.txt with a greeting, show it, then stop."


@pytest.fixture(scope="module")
def codex_bin() -> Path:
    return cli_bin_dir("codex")


def run_codex(root, bin_dir, faults=None, timeout=None, trajectory=None, argv=None, suffix="/v1") -> Run:
    """``suffix``: a gateway's URL carries OpenAI's ``/v1``; the stand-in answers without it too."""
    return run_cli("codex", root, bin_dir, key=KEY, model=MODEL, prompt=PROMPT, trajectory=trajectory or TRAJECTORY,
                   faults=faults, timeout=timeout, argv=argv, url_suffix=suffix)  # fmt: skip


def gen_records(run: Run) -> list[dict]:
    return run.api_records("openai")


def events(run: Run) -> list[dict]:
    return run.events()


@pytest.fixture(scope="module")
def happy(codex_bin, tmp_path_factory) -> Run:
    return run_codex(tmp_path_factory.mktemp("codex-ok"), codex_bin)


def test_write_home_points_codex_at_its_own_config(tmp_path):
    env = CODEX.write_home(CellHome(host_home=tmp_path, home="/home/agent", task_dir="/work/task"),
                           {"model": MODEL, "task_dir": "/work/task", "base_url": None, "root": True})  # fmt: skip
    assert env == {"CODEX_HOME": "/home/agent/.codex"}  # as seen inside the container; no base URL, no secret
    config = tomllib.loads((tmp_path / ".codex" / "config.toml").read_text())
    assert config["model"] == MODEL
    assert config["approval_policy"] == "never" and config["sandbox_mode"] == "danger-full-access"
    assert config["projects"]["/work/task"] == {"trust_level": "trusted"}
    assert config["shell_environment_policy"]["inherit"] == "all"
    gateway = CODEX.write_home(CellHome(tmp_path, str(tmp_path), "/t"), {"model": MODEL, "base_url": "https://gw/v1"})
    assert gateway["OPENAI_BASE_URL"] == "https://gw/v1"
    assert "-c" in CODEX.command and "model_reasoning_summary=detailed" in CODEX.command


def test_api_spend_is_read_from_the_real_stream(happy: Run):
    happy.assert_spend_read_back("codex", "openai")


def test_trajectory_runs_to_the_end(happy: Run):
    assert happy.rc == 0, happy.stderr[-3000:]
    assert (happy.task / "hello.txt").read_text() == TEXT + "\n"
    main = [r for r in gen_records(happy) if r["main"]]
    assert len(main) == len(TRAJECTORY)
    assert all(r["status"] == 200 and r["key_ok"] for r in main)
    assert {r["path"] for r in main} == {"/v1/responses"}
    assert {r["model"] for r in main} == {MODEL}  # the configured model each turn
    assert all("shell_command" in r["tools"] for r in main)  # 0.79's shell tool
    assert [r["turns"] for r in main] == list(range(len(TRAJECTORY)))
    assert [r["step"] for r in main] == list(range(len(TRAJECTORY)))
    assert [r for r in happy.records if not r.get("main")] == []  # 0.79 makes no side or start-up request
    assert (happy.home / ".codex" / "sessions").is_dir()  # CODEX_HOME held: codex kept its session log there
    happy.assert_key_nowhere()
    assert [e["type"] for e in events(happy)][-1] == "turn.completed"
    outputs = [e["item"] for e in events(happy) if e["type"] == "item.completed"
               and e["item"]["type"] == "command_execution"]  # fmt: skip
    assert [o["exit_code"] for o in outputs] == [0, 0, 0]
    assert outputs[2]["aggregated_output"] == "no key in the shell\n"  # shell_environment_policy.exclude held
    first = min(r["time"] for r in happy.records)
    print(f"codex: first request {first - happy.started:.2f}s after start, run {happy.seconds:.2f}s")


def test_trace_lines_read_the_real_stream(happy: Run):
    evs = events(happy)
    assert [e["type"] for e in evs][:2] == ["thread.started", "turn.started"]
    shown = [trace_lines(e) for e in evs]
    assert all(lines is not None for lines in shown), "an event of codex's own stream was not recognised"
    text = "\n".join(line for lines in shown for line in lines)
    assert "**codex** thread `" in text
    assert f"printf '%s\\n' '{TEXT}' > hello.txt" in text  # the command as the model gave it, unwrapped
    assert "cat hello.txt && ls" in text
    assert text.count("**command output** (exit 0)") == 3
    assert "**command output** (exit 0): no output" in text  # printf > hello.txt
    assert f"```\n{TEXT}\nhello.txt\nprompt.md\n```" in text  # the output of cat and ls
    assert "**assistant**: hello.txt is written. Done." in text
    assert "**turn completed** (input_tokens" in text
    # other CLIs' events are not codex's
    assert trace_lines({"type": "assistant", "message": {"content": []}}) is None  # claude
    assert trace_lines({"type": "result", "subtype": "success", "result": "x"}) is None  # claude
    assert trace_lines({"type": "init", "timestamp": "t", "session_id": "s", "model": "m"}) is None  # gemini
    assert trace_lines({"type": "error", "timestamp": "t", "severity": "error", "message": "x"}) is None  # gemini
    assert trace_lines({"type": "item.completed", "item": {"id": "i", "type": "file_change", "status": "completed",
                        "changes": [{"path": "a.py", "kind": "add"}]}}) == [
        "**file change** (completed):", "- add `a.py`"]  # fmt: skip
    assert trace_lines({"type": "turn.failed", "error": {"message": "boom"}}) == ["**turn failed**: boom"]


def test_unauthorized_fails_fast(codex_bin, tmp_path):
    run = run_codex(tmp_path, codex_bin, Faults(unauthorized=True))
    assert run.rc != 0
    assert run.seconds < 30, f"a refused key took {run.seconds:.0f}s to end the CLI"
    statuses = [r["status"] for r in gen_records(run)]
    assert set(statuses) == {401} and len(statuses) <= 6  # the first try and stream_max_retries (5)
    last = events(run)[-1]
    assert last["type"] == "turn.failed" and "401" in last["error"]["message"]
    assert not (run.task / "hello.txt").exists()
    run.assert_key_nowhere()
    print(f"codex 401: exit {run.rc} after {run.seconds:.1f}s, {len(statuses)} requests")


def test_retries_carry_it_through_429(codex_bin, tmp_path):
    run = run_codex(tmp_path, codex_bin, Faults(errors=[429, 429]), suffix="")  # a base URL without /v1
    assert run.rc == 0, run.stderr[-3000:]
    assert (run.task / "hello.txt").exists()
    main = [r for r in gen_records(run) if r["main"]]
    assert {r["path"] for r in main} == {"/responses"}
    assert [r["status"] for r in main][:3] == [429, 429, 200]
    assert [r["turns"] for r in main] == [0, 0, *range(len(TRAJECTORY))]
    assert main[2]["time"] - main[0]["time"] < 5.0  # codex's own backoff: 0.2 s, 0.4 s
    assert sum(e["type"] == "error" and "Reconnecting" in e["message"] for e in events(run)) == 2


def test_stalled_stream_ends_by_timeout(codex_bin, tmp_path):
    run = run_codex(tmp_path, codex_bin, Faults(stall_at=1), timeout=STALL_TIMEOUT)
    assert run.rc == 124
    assert STALL_TIMEOUT - 1 < run.seconds < STALL_TIMEOUT + 20
    assert (run.task / "hello.txt").exists()  # step 0 ran before the stall
    assert any(r.get("status") == "stalled" for r in run.records)


def test_judge_command_runs(codex_bin, tmp_path):
    """PostTrainBench's judge argv parses with 0.79 and runs the judge's trajectory (approval given before exec)."""
    argv = judge_command("gpt-5.1-codex")
    assert argv.index("-a") < argv.index("exec")
    verdict = [Step(shell="printf '%s\\n' 'no contamination detected' > verdict.txt"), Step(text="Written.")]
    run = run_codex(tmp_path / "judge", codex_bin, trajectory=verdict, argv=argv)
    assert run.rc == 0, run.stderr[-3000:]
    assert (run.task / "verdict.txt").read_text() == "no contamination detected\n"
    assert {r["model"] for r in gen_records(run)} == {"gpt-5.1-codex"}
    # -a after exec is a usage error: the reason for the order
    misplaced = [a for a in argv if a not in ("-a", "never")]
    misplaced[misplaced.index("exec") + 1 : misplaced.index("exec") + 1] = ["-a", "never"]
    bad = subprocess.run([a.format(prompt="x") for a in misplaced], env=run.env, cwd=run.task, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "unexpected argument '-a'" in bad.stderr


# ---- a PostTrainBench checkout cell in apptainer: its task dir and home as run_task.sh makes them ---------------

STANDIN_BIN = Path(__file__).resolve().parents[1] / "support" / "apptainer_standin"  # FIXTURE `apptainer exec`
LOOK = [Step(shell="ls -A && echo -- && ls -A /home/ben && echo -- && ls -A /home"), Step(text="I looked. Done.")]


def _checkout_cell(root: Path, codex_bin: Path, solve: str, kind: str = "apptainer") -> tuple[dict, list[dict]]:
    """One checkout cell of the FIXTURE checkout running its ``agents/<solve>/solve.sh`` with the real codex, on a
    site whose runtime is ``kind`` (apptainer: through the FIXTURE apptainer, real bind mounts in a private mount
    namespace). Returns the agent's dict and the stand-in's main-loop records."""
    from ptflow.config.sites import RuntimeSpec
    from ptflow.specs import StageRuntime
    from ptflow.stages.train.agent.cell import train_agent_cell

    checkout = root / "PostTrainBench"
    commit = make_fixture_checkout(checkout, evals=("gsm8k",), agents=("codex", "codexhigh"))
    node_dir = str(Path(shutil.which("node") or "/usr/bin/node").parent)
    env = {"PATH": os.pathsep.join([str(STANDIN_BIN), str(codex_bin), node_dir, "/usr/local/bin", "/usr/bin", "/bin"]),
           "LANG": "C.UTF-8", "OPENAI_API_KEY": KEY, "HOME": str(root)}  # fmt: skip
    runtime = None
    if kind != "venv":
        runtime = StageRuntime(RuntimeSpec(site="standin", kind=kind), image="/images/standard.sif", gpus=0,
                             agent_cell=True)  # fmt: skip
    with ProviderStandIn(LOOK, expected_key=KEY) as api:
        agent = {"id": solve, "cli": "codex", "model": MODEL, "hours": 0.05, "grace_minutes": 0.5,
                 "keys": ["OPENAI_API_KEY"], "base_url": api.url + "/v1", "trace_dir": str(root / solve / "trace"),
                 "posttrainbench": {"eval_dir": "gsm8k", "solve": solve, "num_gpus": 1},
                 "checkout": {"path": str(checkout), "commit": commit}}  # fmt: skip
        result = train_agent_cell(agent_job(str(root / "base-model"), None, root / solve / "out", agent=agent,
                                  cell={"model": "Qwen/Qwen3-1.7B-Base", "eval": "gsm8k"}, runtime=runtime, env=env,
                                  log=lambda *_: None))  # fmt: skip
        records = [r for r in api.records if r.get("main") and r.get("status") == 200]
    assert result["agent_run"]["exit_code"] == 0, (root / solve / "trace" / "stderr.log").read_text()[-3000:]
    return agent, records


def test_checkout_cell_in_apptainer_sees_run_task_shs_task_dir_and_home(codex_bin, tmp_path):
    """The agent's task dir, listed by the real codex from inside the (stand-in) container, holds run_task.sh's files
    and nothing of ptflow's; its home is /home/ben with run_task.sh's copies; /home shows nothing else."""
    agent, records = _checkout_cell(tmp_path, codex_bin, "codex")
    lines = (Path(agent["trace_dir"]) / "stdout.log").read_text().splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    out = next(
        ev["item"]["aggregated_output"] for ev in events
        if ev.get("type") == "item.completed" and ev["item"].get("type") == "command_execution"
    )  # fmt: skip
    task, home, top = ([n for n in block.split("\n") if n] for block in out.split("--\n"))
    assert sorted(task) == run_task_listing(Path(agent["checkout"]["path"]), "gsm8k")
    assert {".codex", "agent_solve.sh", "task"} <= set(home) and not {"prompt.md", "task.json", "deadline"} & set(home)
    assert top == ["ben"]
    assert records and all(r["key_ok"] for r in records)


def test_codexhigh_sets_its_reasoning_effort_in_the_bound_home(codex_bin, tmp_path):
    """codexhigh's solve.sh puts ``model_reasoning_effort = "high"`` first in /home/ben/.codex/config.toml: the real
    codex reads it there and asks the provider for high effort; the plain codex cell asks for another."""
    _, high = _checkout_cell(tmp_path / "high", codex_bin, "codexhigh")
    _, plain = _checkout_cell(tmp_path / "plain", codex_bin, "codex")
    assert high and {r["reasoning"]["effort"] for r in high} == {"high"}, high
    assert all((r.get("reasoning") or {}).get("effort") != "high" for r in plain), plain


def test_codexhigh_on_a_venv_site_is_refused_in_one_line(codex_bin, tmp_path):
    with pytest.raises(CheckoutAgentError) as err:
        _checkout_cell(tmp_path, codex_bin, "codexhigh", kind="venv")
    message = str(err.value)
    assert "\n" not in message and "agent codexhigh" in message and "solve: codexhigh" in message
    assert "/home/ben" in message and "runtime.kind venv" in message and "apptainer or pyxis" in message
