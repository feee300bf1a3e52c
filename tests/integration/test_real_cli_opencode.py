"""The REAL opencode CLI (opencode-ai at its pin, from the npm registry, cached) against the OpenAI Chat Completions
stand-in of ``tests/support/providers`` (``openai_chat.py``: OpenCode Zen's protocol for PostTrainBench's
``opencode/kimi-k2.6``), set up as a cli-agent cell sets it up: a fresh private HOME written by
``OPENCODE.write_home``, the CLI's fixed env, only OPENCODE_API_KEY, the task dir as its working directory.

- ptflow's command (PostTrainBench's solve.sh line): a short trajectory (write a file, read it back, answer) leaves
  the file, reaches the stand-in with the configured model and the bash tool each turn, its spend and trace are
  read from the real stream, and the key is in no file;
- PostTrainBench's solve.sh itself (its ``opencode.json`` with ``{env:OPENCODE_API_KEY}`` in the task dir, merged
  over ptflow's settings: the base URL survives);
- the judge: run_judge.sh's Kimi K2.6 command writes the two verdict files;
- a refused key: exit 0 with a 401 error event, read by the cell as one line naming the key;
- a ptflow agent cell (``train_agent_cell``): the real CLI saves final_model/, the cell's manifest holds its spend.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ptflow.stages.train.agent.clis.opencode import COMMAND, PTB_JUDGE_MODEL, trace_lines
from tests.support.agent_clis import cli_bin_dir
from tests.support.cli_runs import Run, run_cli
from tests.support.providers import Faults, ProviderStandIn, Step
from tests.support.providers.server import judge_trajectory

pytestmark = pytest.mark.timeout(300)

KEY = "sk-oc-FAKE-opencode-4d5e6f"
MODEL = PTB_JUDGE_MODEL  # opencode/kimi-k2.6: newer than the pin's model list, declared by ptflow's settings
TEXT = "hello from the stand-in"
TRAJECTORY = [
    Step(shell=f"printf '%s\\n' '{TEXT}' > hello.txt"),
    Step(shell="cat hello.txt && ls"),
    Step(text="hello.txt is written. Done."),
]
PROMPT = "Write hello.txt with a greeting, show it, then stop."
API = "openai_chat"
BASE = "/v1"  # the base URL as a provider's: opencode appends /chat/completions (and /responses for its small model)
# PostTrainBench's agents/opencode/solve.sh (branches add_opencode, new_judge_v2), its providers cut to Zen's; the
# braces doubled for str.format (the argv template's {model} and {prompt})
SOLVE_SH = """cat > opencode.json << 'EOF'
{{
  "$schema": "https://opencode.ai/config.json",
  "permission": "allow",
  "provider": {{
    "opencode": {{
      "options": {{
        "apiKey": "{{env:OPENCODE_API_KEY}}"
      }}
    }}
  }}
}}
EOF

opencode run --model "{model}" --format json "{prompt}"
"""


@pytest.fixture(scope="module")
def opencode_bin() -> Path:
    return cli_bin_dir("opencode")


def run_opencode(root, bin_dir, faults=None, trajectory=TRAJECTORY, argv=None, prompt=PROMPT) -> Run:
    return run_cli("opencode", root, bin_dir, key=KEY, model=MODEL, prompt=prompt, trajectory=trajectory,
                   faults=faults, argv=argv, url_suffix=BASE)  # fmt: skip


@pytest.fixture(scope="module")
def happy(opencode_bin, tmp_path_factory) -> Run:
    return run_opencode(tmp_path_factory.mktemp("opencode-ok"), opencode_bin)


def test_trajectory_runs_to_the_end(happy: Run):
    assert happy.rc == 0, happy.stderr[-3000:]
    assert (happy.task / "hello.txt").read_text() == TEXT + "\n"
    main = [r for r in happy.api_records(API) if r["main"]]
    assert len(main) == len(TRAJECTORY)
    assert all(r["status"] == 200 and r["key_ok"] for r in main)
    assert {r["model"] for r in main} == {"kimi-k2.6"} and {r["path"] for r in main} == {"/v1/chat/completions"}
    assert all("bash" in r["tools"] for r in main)
    assert [r["step"] for r in main] == list(range(len(TRAJECTORY)))
    # its side requests (the session title, Zen's small model over the Responses API) carry the same key
    assert all(r["key_ok"] for r in happy.records if r.get("api") == "openai")
    assert [r for r in happy.records if r.get("status") == 404] == []
    happy.assert_key_nowhere()
    print(f"opencode: run {happy.seconds:.1f}s")


def test_api_spend_is_read_from_the_real_stream(happy: Run):
    from ptflow.stages.train.agent.clis import CLIS

    happy.assert_spend_read_back("opencode", API)
    assert CLIS["opencode"].usage(happy.events()).cost_usd is None  # kimi-k2.6 has no price in the pin's list


def test_trace_lines_read_the_real_stream(happy: Run):
    events = happy.events()
    assert {e["type"] for e in events} == {"step_start", "text", "tool_use", "step_finish"}
    shown = [trace_lines(e) for e in events]
    assert all(lines is not None for lines in shown), "an event of opencode's own stream was not recognised"
    text = "\n".join(line for lines in shown for line in lines)
    assert "**tool call** `bash`" in text and "cat hello.txt && ls" in text
    assert text.count("**tool result** (completed, exit 0)") == 2
    assert "**tool result** (completed, exit 0): no output" in text  # printf's
    assert TEXT in text and "**assistant**: hello.txt is written. Done." in text
    assert "**step finished**: stop (input 100, output 10)" in text


def test_posttrainbench_solve_sh_keeps_the_base_url(opencode_bin, tmp_path):
    """solve.sh's own opencode.json in the task dir (its key as ``{env:OPENCODE_API_KEY}``) merges over ptflow's
    settings: the stand-in is still the provider, and the key it gets is the environment's."""
    run = run_opencode(tmp_path, opencode_bin, argv=["bash", "-c", SOLVE_SH])
    assert run.rc == 0, run.stderr[-3000:]
    assert (run.task / "hello.txt").read_text() == TEXT + "\n"
    main = [r for r in run.api_records(API) if r["main"]]
    assert len(main) == len(TRAJECTORY) and all(r["key_ok"] and r["status"] == 200 for r in main)
    assert "{env:OPENCODE_API_KEY}" in (run.task / "opencode.json").read_text()
    run.assert_key_nowhere()


def test_judge_command_writes_the_verdict_files(opencode_bin, tmp_path):
    """run_judge.sh's Kimi K2.6 line (``judge_command``) runs the judge's trajectory to its verdict files."""
    verdict = [Step(shell="ls"), *judge_trajectory(answer_only=True)[1:]]
    run = run_opencode(tmp_path, opencode_bin, trajectory=verdict, argv=list(COMMAND), prompt="You are auditing.")
    assert run.rc == 0, run.stderr[-3000:]
    assert (run.task / "contamination_judgement.txt").read_text() == "no contamination detected\n"
    assert (run.task / "disallowed_model_judgement.txt").read_text() == "only allowed use detected\n"
    run.assert_key_nowhere()


def test_unauthorized_is_one_line_naming_the_key(opencode_bin, tmp_path):
    from ptflow.stages.train.agent.launch import refused_key
    from tests.support.agent_cells import agent_spec

    run = run_opencode(tmp_path, opencode_bin, Faults(unauthorized=True))
    assert run.rc == 0 and run.seconds < 30  # opencode's own exit: 0, the 401 not retried
    assert [r["status"] for r in run.api_records(API)] == [401]
    run.assert_key_nowhere()
    stdout = tmp_path / "trace" / "stdout.log"
    stdout.parent.mkdir()
    stdout.write_text(run.stdout)
    spec = agent_spec(id="opencode-cell", cli="opencode", model=MODEL, keys=["OPENCODE_API_KEY"])
    msg = refused_key(spec, run.rc, stdout, 0)
    assert msg and "OPENCODE_API_KEY" in msg and "401" in msg and "\n" not in msg, (run.rc, msg)


def test_an_agent_cell_with_opencode_saves_its_model(opencode_bin, tmp_path, monkeypatch):
    """The real CLI in a ptflow agent cell (``train_agent_cell``, a train job's code): the cell's environment and
    home, the CLI's final_model/ taken as the cell's, its spend in the manifest's record, its key in no file."""
    from ptflow.stages.train.agent.cell import train_agent_cell
    from tests.support.agent_cells import agent_job

    monkeypatch.setenv("PATH", f"{opencode_bin}:{os.environ['PATH']}")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "node-tmp"))
    (tmp_path / "node-tmp").mkdir()
    monkeypatch.setenv("OPENCODE_API_KEY", KEY)
    save = Step(shell="mkdir -p final_model && printf w > final_model/model.safetensors && echo '{}' > "
                "final_model/config.json")  # fmt: skip
    with ProviderStandIn(trajectory=[save, Step(text="Done.")], expected_key=KEY) as api:
        spec = {"id": "opencode-cell", "cli": "opencode", "model": MODEL, "hours": 0.05, "grace_minutes": 0.05,
                "keys": ["OPENCODE_API_KEY"], "trace_dir": str(tmp_path / "trace"), "base_url": api.url + BASE,
                "sync_minutes": 0.05}  # fmt: skip
        result = train_agent_cell(agent_job("/nonexistent-base", None, tmp_path / "out", agent=spec,
                                   cell={"model": "org/base", "eval": "add"}, log=lambda _: None))  # fmt: skip
        records = list(api.records)
    main = [r for r in records if r.get("api") == API and r.get("main")]
    assert [r["status"] for r in main] == [200, 200] and all(r["key_ok"] for r in main)
    run = result["agent_run"]  # the manifest's record
    assert result["final_model"] and run["exit_code"] == 0, run
    assert (run["api_usage"]["input_tokens"], run["api_usage"]["output_tokens"]) == (200, 20), run["api_usage"]
    leaks = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and KEY.encode() in p.read_bytes()]
    assert leaks == []
