"""A PostTrainBench checkout's agent cell, run for real on the local (venv) path with the FIXTURE checkout: the task
dir holds run_task.sh's files only (ptflow's beside the home), the home holds run_task.sh's copies, solve.sh gets
run_task.sh's variables and prompt (no trailing newline, no HF_HUB_OFFLINE), the keys as run_task.sh arranges them;
the container command lines (apptainer, pyxis) put the home at /home/ben; a solve.sh writing there is refused where
the home cannot be there (in the cell, and at preflight when the checkout is here)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ptflow.cluster.runtime import AGENT_HOME, runtime_argv
from ptflow.config.sites import RuntimeSpec
from ptflow.specs import StageRuntime
from ptflow.stages.posttrainbench import agent as ptb_agent
from ptflow.stages.posttrainbench import judge_v10
from ptflow.stages.train.agent.cell import train_agent_cell
from tests.support.agent_cells import agent_job
from tests.support.ptb_checkout import commit_change, make_fixture_checkout, run_task_listing

KEY = "sk-FAKE-ptb-cell-5e1c"
# Our probe in the place of a solve.sh: what the agent would see (never a key's value)
PROBE = """#!/bin/bash
echo "pwd=$PWD"
echo "task=$(ls -A | tr '\\n' ' ')"
echo "home=$(ls -A "$HOME" | tr '\\n' ' ')"
echo "offline=${HF_HUB_OFFLINE:-unset}"
echo "codex_key=${CODEX_API_KEY:+set}"
echo "openai_key=${OPENAI_API_KEY:+set}"
echo "num_gpus=$NUM_GPUS"
echo "agent_config=$AGENT_CONFIG"
echo "vllm=$VLLM_API_KEY"
echo "nousersite=$PYTHONNOUSERSITE"
echo "path_head=${PATH%%:*}"
printf 'prompt_tail=%q\\n' "${PROMPT: -4}"
"""


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    dest = tmp_path_factory.mktemp("ptb") / "PostTrainBench"
    make_fixture_checkout(dest, evals=("gsm8k",), agents=("codex", "codexhigh"))
    commit = commit_change(dest, "agents/probe/solve.sh", PROBE, "a probe in the place of a solve.sh")
    return dest, commit


def _cell(tmp_path, checkout, solve="probe", grader_keys=(), runtime=None, log=None, path=None):
    dest, commit = checkout
    agent = {"id": solve, "cli": "codex", "model": "gpt-5.1-codex-max", "hours": 1, "grace_minutes": 0.5,
             "keys": ["OPENAI_API_KEY"], "grader_keys": list(grader_keys), "trace_dir": str(tmp_path / "trace"),
             "posttrainbench": {"eval_dir": "gsm8k", "solve": solve, "num_gpus": 1},
             "checkout": {"path": str(dest), "commit": commit}}  # fmt: skip
    path = path or f"{Path(sys.executable).parent}:/usr/bin:/bin"
    env = {"PATH": path, "OPENAI_API_KEY": KEY, "HOME": str(tmp_path)}
    result = train_agent_cell(agent_job(str(tmp_path / "base"), None, tmp_path / "out", agent=agent, env=env,
                              cell={"model": "Qwen/Qwen3-1.7B-Base", "eval": "gsm8k"}, runtime=runtime,
                              log=log or (lambda *_: None)))  # fmt: skip
    out = (tmp_path / "trace" / "stdout.log").read_text()
    return result, dict(line.split("=", 1) for line in out.splitlines() if "=" in line and not line.startswith("="))


def test_task_dir_home_prompt_and_environment_are_run_task_shs(tmp_path, checkout):
    result, seen = _cell(tmp_path, checkout)
    assert result["agent_run"]["exit_code"] == 0
    assert sorted(seen["task"].split()) == run_task_listing(checkout[0], "gsm8k")  # nothing of ptflow's
    cell_dir = Path(seen["pwd"]).parent.parent
    assert Path(seen["pwd"]).name == "task" and Path(seen["pwd"]).parent.name == "home"
    assert {".codex", "agent_solve.sh", "task"} <= set(seen["home"].split())
    assert not {"prompt.md", "task.json", "deadline"} & set(seen["home"].split())
    assert cell_dir.name.startswith("ptflow-agent-probe-") and not cell_dir.exists()  # removed after the cell
    assert seen["offline"] == "unset"  # the prompt says the internet is there; agents download data
    assert (seen["codex_key"], seen["openai_key"]) == ("set", "")  # CODEX_API_KEY only, outside the graded evals
    assert seen["num_gpus"] == "1" and seen["agent_config"] == "gpt-5.1-codex-max"
    assert seen["vllm"] == "inspectai" and seen["nousersite"] == "1"
    assert seen["path_head"] == "/root/.local/bin"
    # get_prompt.py's output as PROMPT=$(...) keeps it: its `date -u` line last, no trailing newline
    prompt = (tmp_path / "trace" / "prompt.md").read_text()
    assert not prompt.endswith("\n") and seen["prompt_tail"] == prompt[-4:]
    bash = subprocess.run(["bash", "-c", 'p=$(python3 src/eval/general/get_prompt.py --agent codex '
                           '--model-to-train Qwen/Qwen3-1.7B-Base --benchmark-id gsm8k --num-hours 1); printf %s "$p"'],
                          cwd=checkout[0], capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert prompt.split("Started:")[0] == bash.split("Started:")[0]  # (the clock line differs by the seconds)


def test_graded_evals_keep_openai_api_key_as_run_task_sh(tmp_path, checkout):
    _, seen = _cell(tmp_path, checkout, grader_keys=["OPENAI_API_KEY"])  # arenahardwriting, healthbench
    assert (seen["codex_key"], seen["openai_key"]) == ("set", "set")


def test_checkouts_codex_config_is_kept_with_ptflows_joined(tmp_path, checkout):
    config = tomllib.loads((checkout[0] / "containers/other_home_data/.codex/config.toml").read_text())
    from ptflow.stages.train.agent.clis.codex import merged_config_toml

    merged = tomllib.loads(merged_config_toml(config, "m", "/home/ben/task"))
    assert merged["approval_policy"] == config["approval_policy"]
    assert merged["shell_environment_policy"]["set"] == config["shell_environment_policy"]["set"]
    assert merged["shell_environment_policy"]["exclude"] == ["CODEX_API_KEY"]
    assert merged["projects"]["/home/ben/task"] == {"trust_level": "trusted"}
    assert "model_reasoning_summary" not in merged  # solve.sh's command line says it, or leaves it out
    # codexhigh's prepended line keeps it valid TOML
    assert tomllib.loads('model_reasoning_effort = "high"\n\n' + merged_config_toml(config, "m", "/t"))


def test_judge_prompt_is_what_bash_passes(checkout):
    dest, _ = checkout
    text = judge_v10.judge_prompt({"path": str(dest), "eval_dir": "gsm8k"}, "Qwen/Qwen3-1.7B-Base")
    raw = subprocess.run([sys.executable, "src/disallowed_usage_judge/get_judge_prompt.py", "--benchmark",
                          (dest / "src/eval/tasks/gsm8k/benchmark.txt").read_text().strip(), "--model",
                          "Qwen/Qwen3-1.7B-Base"], cwd=dest, capture_output=True, text=True).stdout  # fmt: skip
    assert raw.endswith("\n") and text == raw.rstrip("\n")


def test_container_command_lines_put_the_home_at_home_ben(tmp_path, checkout):
    """apptainer and pyxis as text (neither runs here): the cell's job dir is the home at /home/ben, the task dir
    /home/ben/task the working directory, not bound on its own."""
    rt = RuntimeSpec(site="s", kind="pyxis", mounts=("/lustre",))
    runtime = StageRuntime(rt, image="/lustre/i.sqsh", gpus=1, agent_cell=True)
    bin_dir, argv_file = tmp_path / "bin", tmp_path / "srun.argv"  # a srun that writes down its argv (no pyxis here)
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {argv_file}\n")
    (bin_dir / "srun").chmod(0o755)
    _cell(tmp_path, checkout, runtime=runtime, path=f"{bin_dir}:/usr/bin:/bin")
    flags = argv_file.read_text().splitlines()
    mounts = next(f for f in flags if f.startswith("--container-mounts=")).split("=", 1)[1].split(",")
    home = next(m for m in mounts if m.endswith(f":{AGENT_HOME}")).split(":")[0]
    assert Path(home).name == "home" and "--no-container-mount-home" in flags and "/lustre" in mounts
    assert f"--container-workdir={AGENT_HOME}/task" in flags and not any(m.startswith(f"{home}/task") for m in mounts)
    assert flags[flags.index("--container-workdir=/home/ben/task") + 1 :] == ["bash", "/home/ben/agent_solve.sh"]
    argv = runtime_argv(RuntimeSpec(site="s", kind="apptainer"), ["bash", f"{AGENT_HOME}/agent_solve.sh"],
                        image="/i.sif", job_dir="/tmp/cell/home", agent_cell=True, gpus=1, workdir=f"{AGENT_HOME}/task",
                        binds=["/tmp/view"])  # fmt: skip
    assert argv[:9] == ["apptainer", "exec", "--nv", "-c", "--writable-tmpfs", "--home", "/tmp/cell/home:/home/ben",
                        "--pwd", "/home/ben/task"]  # fmt: skip


def test_a_solve_sh_writing_under_home_ben_is_refused_off_container(tmp_path, checkout):
    with pytest.raises(ptb_agent.CheckoutAgentError) as err:
        _cell(tmp_path, checkout, solve="codexhigh")
    assert "\n" not in str(err.value) and "solve: codexhigh" in str(err.value) and "runtime.kind venv" in str(err.value)
    assert (
        not (tmp_path / "trace" / "stdout.log").exists() or "codex" not in (tmp_path / "trace/stdout.log").read_text()
    )
    text = (checkout[0] / "agents/codexhigh/solve.sh").read_text()
    for kind in ("apptainer", "pyxis"):
        assert ptb_agent.home_problem("a", "codexhigh", text, kind) is None
    for kind in ("venv", "enroot-edf"):
        assert "/home/ben" in ptb_agent.home_problem("a", "codexhigh", text, kind)
    assert ptb_agent.home_problem("a", "codex", (checkout[0] / "agents/codex/solve.sh").read_text(), "venv") is None


def test_preflight_refuses_it_when_the_checkout_is_here(default_raw, checkout):
    from ptflow.cluster.preflight import check_solve_homes
    from ptflow.config.layout import Layout
    from ptflow.config.matrix import build_config
    from ptflow.config.sites import load_site
    from tests.conftest import REPO

    dest, commit = checkout
    default_raw["posttrainbench"] = {"commit": commit, "path": str(dest)}
    default_raw["evals"] = [{"id": "gsm8k", "task": "posttrainbench/gsm8k", "retry_max_new_tokens": [3000, 2000]}]
    default_raw["agents"] = [
        {"id": "baseline", "kind": "baseline"},
        {"id": "high", "kind": "cli-agent", "cli": "codex", "model": "gpt-5.1-codex-max", "hours": 1,
         "keys": ["OPENAI_API_KEY"], "solve": "codexhigh"},
        {"id": "codex", "kind": "cli-agent", "cli": "codex", "model": "gpt-5.1-codex-max", "hours": 1,
         "keys": ["OPENAI_API_KEY"]},
    ]  # fmt: skip
    default_raw.pop("scoring", None)
    cfg = build_config(default_raw)
    layout = Layout(results="/r", scratch="/s", hf_home="/h")
    local = load_site("local", REPO / "config" / "sites")
    problems = check_solve_homes(cfg, local, layout)
    assert len(problems) == 1 and "agent high: solve: codexhigh" in problems[0] and "\n" not in problems[0]
    assert check_solve_homes(cfg, load_site("generic", REPO / "config" / "sites"), layout) == []  # apptainer
    json.dumps(problems)


# A solve.sh of ours that keeps notes in its task dir: the first session saves a final_model and works until stopped;
# one that finds the notes (the synced workspace, restored) lists what it sees and ends.
RESUMER = """#!/bin/bash
mkdir -p work
echo "notes: $(cat work/notes.txt 2>/dev/null)"
echo "session" >> work/notes.txt
if [ "$(wc -l < work/notes.txt)" -gt 1 ]; then
    echo "task=$(ls -A | tr '\\n' ' ')"
    echo "timer=$(bash timer.sh | tr '\\n' ' ')"
    exit 0
fi
mkdir -p final_model && printf w1 > final_model/model.safetensors
sleep 60
"""


def test_a_resumed_checkout_cell_continues_its_task_dir(tmp_path, checkout):
    from ptflow.cluster.preempt import ResumeDir, StoppedToResume
    from tests.unit.test_agent_cell import _stop_when_started

    dest, _ = checkout
    commit = commit_change(dest, "agents/resumer/solve.sh", RESUMER, "a solve.sh that keeps notes")
    resume = ResumeDir(tmp_path / "resume")
    agent = {"id": "resumer", "cli": "codex", "model": "m", "hours": 0.05, "grace_minutes": 0.1, "sync_minutes": 0.01,
             "keys": ["OPENAI_API_KEY"], "trace_dir": str(tmp_path / "trace"),
             "posttrainbench": {"eval_dir": "gsm8k", "solve": "resumer", "num_gpus": 1},
             "checkout": {"path": str(dest), "commit": commit}}  # fmt: skip
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "OPENAI_API_KEY": KEY, "HOME": str(tmp_path)}
    cell = {"model": "Qwen/Qwen3-1.7B-Base", "eval": "gsm8k"}
    resume.record_attempt({"id": "a1", "started": 1.0})
    _stop_when_started(tmp_path)
    with pytest.raises(StoppedToResume):
        train_agent_cell(agent_job("/base", None, tmp_path / "out1", agent=agent, cell=cell, env=env,
                                   resume=resume, attempt="a1", log=lambda _: None))  # fmt: skip
    assert sorted(p.name for p in (resume.root / "workspace").iterdir()) == sorted(
        [*run_task_listing(dest, "gsm8k"), "final_model", "work"]
    )  # the synced workspace is the task dir: nothing of ptflow's
    resume.record_attempt({"id": "a2", "started": 2.0})
    result = train_agent_cell(agent_job("/base", None, tmp_path / "out2", agent=agent, cell=cell, env=env,
                                        resume=resume, attempt="a2", log=lambda _: None))  # fmt: skip
    assert result["agent_run"]["exit_code"] == 0 and (tmp_path / "out2" / "model.safetensors").read_bytes() == b"w1"
    seen = dict(ln.split("=", 1) for ln in (tmp_path / "trace" / "stdout.log").read_text().splitlines() if "=" in ln
                and not ln.startswith("="))  # fmt: skip
    assert sorted(seen["task"].split()) == sorted([*run_task_listing(dest, "gsm8k"), "final_model", "work"])
    hours, minutes = seen["timer"].split()[-1].split(":")  # "Remaining time (hours:minutes): H:MM"
    assert seen["timer"].startswith("Remaining time (hours:minutes):") and int(hours) == 0 and int(minutes) <= 3
    assert "1 earlier session" in (tmp_path / "trace" / "prompt-2.md").read_text()
