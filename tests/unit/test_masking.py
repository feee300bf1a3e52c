"""ptflow.keys' masker: every key value ptflow hands to a child is replaced by *** in what ptflow keeps of the
child's output, however the output is chunked, whatever bytes surround it."""

import json
import os
import secrets
import subprocess
import sys

import pytest

from ptflow.keys import MASK, MIN_MASKED_LENGTH, Masker, Pump, looks_like_secret, run_masked
from tests.support.agent_cells import agent_job

KEY = "sk-oai-" + secrets.token_hex(16)
OTHER = "hf_" + secrets.token_hex(12)


def stream_all(masker: Masker, chunks: list[bytes]) -> bytes:
    s = masker.stream()
    return b"".join(s.feed(c) for c in chunks) + s.flush()


def test_text_and_bytes_are_masked():
    m = Masker([KEY, OTHER])
    assert m.mask(f"key={KEY} token={OTHER}\n{KEY}") == "key=*** token=***\n***"
    assert m.mask_bytes(f"[{KEY}]".encode()) == b"[***]"
    assert m.mask("nothing secret here") == "nothing secret here"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_a_value_split_across_chunks_is_masked_at_every_split(size):
    m = Masker([KEY, OTHER])
    data = f"echo {KEY}\nthen {OTHER}{KEY} end {OTHER[:-1]}".encode()
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    out = stream_all(m, chunks)
    assert out == f"echo ***\nthen ****** end {OTHER[:-1]}".encode()
    assert KEY.encode() not in out and OTHER.encode() not in out


def test_every_two_way_split_gives_the_unsplit_result():
    m = Masker([KEY])
    data = f"a{KEY}{KEY}b {KEY[:10]}".encode()
    whole = m.mask_bytes(data)
    for cut in range(len(data) + 1):
        assert stream_all(m, [data[:cut], data[cut:]]) == whole, cut


def test_the_longest_value_wins_where_one_contains_another():
    inner = KEY[:12]
    m = Masker([inner, KEY])
    assert m.mask(f"{KEY} {inner}") == f"{MASK} {MASK}"
    assert stream_all(m, [f"{KEY} ".encode(), inner.encode()]) == b"*** ***"


def test_binary_output_is_masked_byte_for_byte():
    m = Masker([KEY])
    data = b"\x00\xff\xfe" + KEY.encode() + b"\x80\x00" + bytes(range(256))
    out = stream_all(m, [data[i : i + 5] for i in range(0, len(data), 5)])
    assert out == b"\x00\xff\xfe***\x80\x00" + bytes(range(256))


def test_a_value_that_is_not_utf8_is_masked(tmp_path):
    raw = b"sk-\xff\xfe-" + secrets.token_hex(8).encode()
    m = Masker([os.fsdecode(raw)])  # how os.environ holds it
    assert m.mask_bytes(b"x" + raw + b"y") == b"x***y"


def test_short_values_are_not_masked_and_named():
    env = {"OPENAI_API_KEY": "abc", "HF_TOKEN": OTHER, "PATH": "/usr/bin"}
    m = Masker.for_env(env)
    assert m.unmasked == ["OPENAI_API_KEY"]
    assert "OPENAI_API_KEY" in m.notice() and "abc" not in m.notice() and str(MIN_MASKED_LENGTH) in m.notice()
    assert m.mask("abc and " + OTHER) == "abc and ***"
    assert Masker(["        "]).values == []  # whitespace is no secret


def test_for_env_takes_named_and_secret_looking_variables_but_ptflows_names_and_paths():
    env = {
        "MY_CRED": "cred-" + secrets.token_hex(8),  # named by the agent's keys: masked although no secret word
        "CODEX_API_KEY": KEY,  # the CLI's own variable, derived from OPENAI_API_KEY
        "PTFLOW_AGENT_KEYS": "OPENAI_API_KEY,MY_CRED",  # names only
        "PTFLOW_FAKE_KEY": OTHER,  # a user's variable that merely starts like ptflow's
        "HOME": "/home/agent/somewhere",
    }
    m = Masker.for_env(env, ["MY_CRED", "UNSET_KEY"])
    text = f"{env['MY_CRED']} {KEY} {OTHER} OPENAI_API_KEY,MY_CRED /home/agent/somewhere"
    assert m.mask(text) == "*** *** *** OPENAI_API_KEY,MY_CRED /home/agent/somewhere"


def test_a_stream_holds_back_only_a_tail_that_could_start_a_value():
    """A line the agent prints reaches its log at once (the agent may then sleep for hours); only the start of a
    value waits for the next chunk, and a longer value that contains a shorter one is still masked whole."""
    stream = Masker([KEY]).stream()
    assert stream.feed(b"notes: \n") == b"notes: \n"
    assert stream.feed(b"x " + KEY[:5].encode()) == b"x "
    assert stream.feed(KEY[5:].encode() + b" y") == b"*** y" and stream.flush() == b""
    short, long = "abcdefgh", "abcdefghij"
    stream = Masker([short, long]).stream()
    assert stream.feed(b"..abcdefghi") == b".." and stream.feed(b"j!") == b"***!"
    stream = Masker([short, long]).stream()
    assert stream.feed(b"..abcdefghi") == b".." and stream.feed(b"Z!") + stream.flush() == b"***iZ!"


def test_run_task_shs_public_vllm_placeholder_is_not_masked_but_a_users_value_under_its_name_is():
    assert Masker.for_env({"VLLM_API_KEY": "inspectai"}).mask("key inspectai") == "key inspectai"
    assert Masker.for_env({"VLLM_API_KEY": KEY}).mask(f"key {KEY}") == "key ***"


def test_a_value_with_a_trailing_newline_is_masked_stripped_too():
    m = Masker([KEY + "\n"])
    assert m.mask(f"{KEY} end") == "*** end"


def test_copy_file_masks_across_chunk_boundaries(tmp_path):
    src, dst = tmp_path / "a", tmp_path / "b"
    src.write_bytes((b"x" * 5 + KEY.encode()) * 1000)
    Masker([KEY]).copy_file(src, dst, chunk=7)
    assert dst.read_bytes() == b"xxxxx***" * 1000


def test_an_empty_masker_changes_nothing():
    m = Masker()
    assert not m and m.mask(KEY) == KEY and stream_all(m, [b"ab", b"cd"]) == b"abcd"


CHILD = """
import os, sys
key = os.environ["THE_KEY"].encode()
os.write(1, b"start " + key[:5]); os.write(1, key[5:] + b" end\\n")   # split across two writes
os.write(2, b"err:" + key + b"\\n")
"""


def test_run_masked_masks_a_childs_stdout_and_stderr(tmp_path):
    with open(tmp_path / "o", "wb") as so, open(tmp_path / "e", "wb") as se:
        rc = run_masked([sys.executable, "-c", CHILD], Masker([KEY]), so, se, env={**os.environ, "THE_KEY": KEY})
    assert rc == 0
    assert (tmp_path / "o").read_bytes() == b"start *** end\n"
    assert (tmp_path / "e").read_bytes() == b"err:***\n"


def test_run_masked_kills_on_timeout_and_keeps_what_was_printed(tmp_path):
    child = f"import sys, time; print({KEY!r}, flush=True); time.sleep(600)"
    with open(tmp_path / "o", "wb") as so, open(tmp_path / "e", "wb") as se:
        with pytest.raises(subprocess.TimeoutExpired):
            run_masked([sys.executable, "-c", child], Masker([KEY]), so, se, timeout=3)
    assert (tmp_path / "o").read_bytes() == b"***\n"


def test_a_pipe_held_open_by_a_leftover_process_does_not_hang_the_pump(tmp_path):
    # the child exits at once, its background grandchild keeps stdout open: finish() stops reading after the
    # grace and still writes what came, masked
    child = (
        f"import subprocess, sys; print({KEY!r}, flush=True); "
        "print(subprocess.Popen(['sleep', '600']).pid, file=sys.stderr, flush=True)"
    )
    with open(tmp_path / "o", "wb") as so, open(tmp_path / "e", "wb") as se:
        proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        pump = Pump(Masker([KEY]), [(proc.stdout, so), (proc.stderr, se)]).start()
        assert proc.wait() == 0
        assert pump.finish(timeout=1) is False
    os.kill(int((tmp_path / "e").read_text()), 15)
    assert (tmp_path / "o").read_bytes() == b"***\n"


ECHO_AGENT = """
import os, sys
for name in ("MY_CRED", "OPENAI_API_KEY"):
    value = os.environ[name].encode()
    os.write(1, value[:4]); os.write(1, value[4:] + b"\\n")  # echo $NAME, in two writes
    os.write(2, b"warning: " + value + b"\\n")
"""


def files_holding(root, value: str) -> list:
    return [p for p in root.rglob("*") if p.is_file() and value.encode() in p.read_bytes()]


def test_an_agent_that_prints_its_keys_leaves_them_in_no_file(tmp_path, monkeypatch):
    """Any agent script (here a custom command): the values of its keys reach the trace masked, and trace.md too."""
    from ptflow.stages.judge.ballot import Ballot
    from ptflow.stages.judge.vote import judge_cell
    from ptflow.stages.train.agent.cell import train_agent_cell

    cred = "cred-" + secrets.token_hex(12)
    script = tmp_path / "echo_agent.py"
    script.write_text(ECHO_AGENT)
    spec = {"id": "echo", "cli": "scripted", "model": "m", "hours": 0.05, "grace_minutes": 0.1,
            "keys": ["MY_CRED", "OPENAI_API_KEY"], "command": ["{python}", str(script)],
            "trace_dir": str(tmp_path / "trace")}  # fmt: skip
    env = {**os.environ, "MY_CRED": cred, "OPENAI_API_KEY": KEY}
    lines = []
    job = agent_job("/base", None, tmp_path / "out", agent=spec, cell={"model": "m", "eval": "add"}, env=env,
                    log=lines.append)  # fmt: skip
    result = train_agent_cell(job)
    assert result["agent_run"]["exit_code"] == 0
    stdout = (tmp_path / "trace" / "stdout.log").read_text()
    assert stdout.endswith("***\n***\n") and (tmp_path / "trace" / "stderr.log").read_text().count("warning: ***") == 2
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(result))
    monkeypatch.setenv("MY_CRED", cred)  # the judge job's environment holds the keys as the agent's did
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    judge_cell(cell={"model": "m", "eval": "add"}, manifest=result, ballot=Ballot(None, tmp_path / "judge.json"),
               keys=["MY_CRED"], log=lines.append)  # fmt: skip
    assert (tmp_path / "trace" / "trace.md").read_text().count("***") >= 2
    assert files_holding(tmp_path, cred) == [] and files_holding(tmp_path, KEY) == []
    assert not any(cred in ln or KEY in ln for ln in lines)


def test_a_main_checkout_agent_keeps_its_sandbox_keys_masked_and_sees_no_other(tmp_path):
    """PostTrainBench main's key allowlist (ptflow.config.ptb_keys): the sandbox's key (CODEX_API_KEY, from
    OPENAI_API_KEY) is masked where the agent prints it; a provider key set in the job's environment but in no file
    of the union never reaches the agent, and where its value comes into the agent's output by another way (here
    written into its solve.sh) it is masked too: no file the cell writes holds either value."""
    from ptflow.stages.train.agent.cell import train_agent_cell
    from tests.support.ptb_checkout import commit_change, make_fixture_checkout
    from tests.support.ptb_main import commit_main

    extra = "sk-ant-" + secrets.token_hex(16)
    dest = tmp_path / "ptb" / "PostTrainBench"
    make_fixture_checkout(dest, evals=("gsm8k",), agents=("codex",), judge="v1.1")
    commit_main(dest, evals=("gsm8k",), agents=("codex",))
    solve = f'#!/bin/bash\necho "codex=$CODEX_API_KEY anthropic=${{ANTHROPIC_API_KEY:-unset}}"\necho "guess={extra}"\n'
    commit = commit_change(dest, "agents/codex/solve.sh", solve, "a solve.sh that prints keys")
    agent = {"id": "codex", "cli": "codex", "model": "gpt-5.1-codex-max", "hours": 0.05, "grace_minutes": 0.1,
             "keys": ["OPENAI_API_KEY"], "trace_dir": str(tmp_path / "out" / "trace"),
             "posttrainbench": {"eval_dir": "gsm8k", "solve": "codex", "num_gpus": 1},
             "checkout": {"path": str(dest), "commit": commit}}  # fmt: skip
    env = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin", "HOME": str(tmp_path),
           "OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": extra}  # fmt: skip
    lines = []
    job = agent_job("/base", None, tmp_path / "out" / "model", agent=agent, cell={"model": "m", "eval": "gsm8k"},
                    env=env, log=lines.append)  # fmt: skip
    result = train_agent_cell(job)
    assert result["agent_run"]["exit_code"] == 0
    stdout = (tmp_path / "out" / "trace" / "stdout.log").read_text()
    assert "codex=*** anthropic=unset\nguess=***\n" in stdout
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(result))
    assert files_holding(tmp_path / "out", KEY) == [] and files_holding(tmp_path / "out", extra) == []
    assert not any(KEY in ln or extra in ln for ln in lines)


def test_a_checkout_evaluation_that_prints_its_graders_key_keeps_it_masked(tmp_path):
    """posttrainbench/<eval>: the checkout's evaluate.py gets its grader's key; its output file keeps ***."""
    from ptflow.stages.posttrainbench.checkout_eval import _run

    child = "import os, sys; sys.stdout.write(os.environ['OPENAI_API_KEY']); print(' to stderr', file=sys.stderr)"
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    rc = _run([sys.executable, "-c", child], tmp_path, env, tmp_path / "out.txt", timeout=120)
    assert rc == 0 and (tmp_path / "out.txt").read_text().replace(" to stderr\n", "") == "***"


RULE_SCRIPT = """
import os, subprocess, sys
from ptflow.jobenv import rule_log
with rule_log(sys.argv[1]) as log:
    key = os.environ["OPENAI_API_KEY"]
    log(f"the job logs {key}")
    os.write(1, key[:3].encode()); os.write(2, key[3:].encode() + b"\\n")  # split between fds 1 and 2
    subprocess.run([sys.executable, "-c", "import os; print(os.environ['OPENAI_API_KEY'])"], check=True)
    raise RuntimeError(f"failed with {key}")
"""


def test_the_rule_log_masks_the_jobs_lines_its_childrens_output_and_its_failure(tmp_path):
    script = tmp_path / "rule.py"
    script.write_text(RULE_SCRIPT)
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "rule.log")], env=env, capture_output=True)
    assert proc.returncode == 1
    text = (tmp_path / "rule.log").read_text()
    assert KEY not in text and "the job logs ***" in text and "FAILED: RuntimeError: failed with ***" in text
    assert text.count("***") == 4, text  # log line, the split write, the child's print, the FAILED line
    # after the log: the traceback on the job's own stderr (Snakemake's, Slurm's log) is masked too
    assert KEY.encode() not in proc.stderr and b"RuntimeError: failed with ***" in proc.stderr


def test_the_rule_log_without_keys_in_the_environment_is_written_directly(tmp_path):
    script = tmp_path / "rule.py"
    script.write_text(RULE_SCRIPT.replace('os.environ["OPENAI_API_KEY"]', '"abc"').replace("check=True", "env={}"))
    env = {k: v for k, v in os.environ.items() if not looks_like_secret(k)}
    subprocess.run([sys.executable, str(script), str(tmp_path / "rule.log")], env=env, capture_output=True)
    assert "the job logs abc" in (tmp_path / "rule.log").read_text()


def test_a_judge_that_prints_its_key_leaves_it_in_no_file(tmp_path, monkeypatch):
    """judge.cli (verdict on stdout): the key it prints in its reason reaches judge.json and the log as ***."""
    from ptflow.stages.judge.ballot import Ballot
    from ptflow.stages.judge.vote import judge_cell

    judge_key = "judge-" + secrets.token_hex(10)
    monkeypatch.setenv("MY_JUDGE_CRED", judge_key)
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "stdout.log").write_text("plain agent output\n")
    (trace / "stderr.log").write_text("")
    script = tmp_path / "judge.py"
    script.write_text(
        "import json, os, sys; sys.stdin.read(); print(json.dumps({'contamination': False, "
        "'disallowed_model': False, 'reason': 'checked with ' + os.environ['MY_JUDGE_CRED']}))"
    )
    lines = []
    data = judge_cell(
        cell={"model": "m", "eval": "add"}, manifest={"agent_run": {"trace_dir": str(trace)}},
        ballot=Ballot({"cli": [sys.executable, str(script)], "keys": ["MY_JUDGE_CRED"]}, tmp_path / "judge.json"),
        log=lines.append,
    )  # fmt: skip
    assert data["reason"] == "checked with ***" and data["flagged"] is False
    assert files_holding(tmp_path, judge_key) == [] and not any(judge_key in ln for ln in lines)


FAKE_CODEX = """#!/bin/bash
echo "$CODEX_API_KEY"
echo "stderr $CODEX_API_KEY" >&2
echo "no contamination detected" > contamination_judgement.txt
printf 'only allowed use detected\\nkey %s\\n' "$CODEX_API_KEY" > disallowed_model_judgement.txt
"""


def test_an_agentic_judge_that_prints_its_key_leaves_it_in_no_file(tmp_path, monkeypatch):
    """judge.agent (the CLI in a copy of the workspace): its captured output, judge_trace.md, the verdict files
    kept beside the trace and judge.json hold *** where it printed its key."""
    from ptflow.stages.judge.ballot import Ballot
    from ptflow.stages.judge.vote import judge_cell

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "codex").write_text(FAKE_CODEX)
    (bin_dir / "codex").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    trace, workspace = tmp_path / "trace", tmp_path / "workspace"
    trace.mkdir()
    workspace.mkdir()
    (trace / "stdout.log").write_text("plain agent output\n")
    (trace / "stderr.log").write_text("")
    run = {"trace_dir": str(trace), "workspace": str(workspace), "cli": "codex"}
    data = judge_cell(
        cell={"model": "m", "eval": "add"}, manifest={"agent_run": run},
        ballot=Ballot({"agent": "codex", "model": "gpt-5.1-codex", "keys": ["OPENAI_API_KEY"]},
                      tmp_path / "judge.json"),
        log=lambda m: None,
    )  # fmt: skip
    assert data["status"] == "judged" and data["flagged"] is False
    assert (trace / "judge_stdout.log").read_text() == "***\n"
    assert (trace / "judge_stderr.log").read_text() == "stderr ***\n"
    assert "key ***" in (trace / "disallowed_model_judgement.txt").read_text() and "key ***" in data["reason"]
    assert files_holding(tmp_path, KEY) == []
