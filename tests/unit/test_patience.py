"""The patient Slurm clients' decisions and the driver's watch over them (the waits themselves run on the real test
cluster: tests/slurm/test_controller_outage_on_slurm.py, test_cluster_limits_on_slurm.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptflow.cluster import patience
from ptflow.ops import driver

# What sbatch 22.05 printed on the test cluster for a submission past QOS MaxSubmitJobsPerUser=4 (exit 1).
REFUSED = (
    b"sbatch: error: QOSMaxSubmitJobPerUserLimit\n"
    b"sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's size "
    b"and/or time limits)\n"
)
INVALID_PARTITION = (
    b"sbatch: error: invalid partition specified: nosuchpart\n"
    b"sbatch: error: Batch job submission failed: Invalid partition name specified\n"
)


def test_submit_limit_reason_is_one_of_slurms_names():
    assert patience.submit_limit_reason(REFUSED) == "QOSMaxSubmitJobPerUserLimit"
    assert patience.submit_limit_reason(INVALID_PARTITION) is None
    # a job too big for the QOS is an accounting-policy refusal too, but no slot will ever take it
    assert patience.submit_limit_reason(b"sbatch: error: QOSMaxGRESPerJob\n") is None


def test_option_reads_the_three_spellings():
    args = ["--parsable", "--job-name", "run-1", "--comment=rule_train", "-A", "acct"]
    assert patience.option(args, "--job-name", "-J") == "run-1"
    assert patience.option(args, "--comment") == "rule_train"
    assert patience.option(["-J", "x"], "--job-name", "-J") == "x"
    assert patience.option(args, "--qos") is None


def test_install_links_a_shim_first_for_each_command_the_machine_has(tmp_path):
    """A command the cluster lacks (no sacct without accounting) gets no shim: the plugin's shutil.which checks must
    still see the cluster as it is."""
    for name in ("sbatch", "squeue", "scontrol", "srun"):  # no sacct
        fake_command(tmp_path / "slurm", name, "echo real")
    state = tmp_path / "state"
    env = {"PATH": f"{tmp_path / 'slurm'}:{patience.SHIM_DIR}:/nonexistent"}
    patience.install(90, state, environ=env)
    patience.install(90, state, environ=env)  # again: the same PATH, the links made again
    assert env["PATH"].split(os.pathsep) == [str(state / "bin"), str(tmp_path / "slurm"), "/nonexistent"]
    assert sorted(p.name for p in (state / "bin").iterdir()) == ["sbatch", "scontrol", "squeue", "srun"]
    assert patience.is_shim(state / "bin" / "squeue")
    assert patience.real_binary("squeue", env) == str(tmp_path / "slurm" / "squeue")
    assert patience.real_binary("sacct", env) is None
    assert env[patience.WAIT_ENV] == "90" and env[patience.STATE_ENV] == str(state)
    for name in patience.SHIMMED:
        assert os.access(patience.SHIM_DIR / name, os.X_OK), name


def fake_command(directory: Path, name: str, body: str) -> Path:
    """A stand-in for a Slurm client where this test has none: prints what it was called with."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_real_binary_skips_the_shims(tmp_path):
    fake = fake_command(tmp_path / "bin", "squeue", "echo real")
    env = {"PATH": f"{patience.SHIM_DIR}:{tmp_path / 'bin'}"}
    assert patience.real_binary("squeue", env) == str(fake)
    assert patience.real_binary("nosuchcommand", env) is None


def test_shim_without_ptflows_python_runs_the_real_command(tmp_path):
    """On a node that cannot see the driver's interpreter, the shim is the real command, arguments intact."""
    fake_command(tmp_path / "bin", "sbatch", 'printf "%s|" "$@"')
    env = {"PATH": f"{patience.SHIM_DIR}:{tmp_path / 'bin'}:/usr/bin:/bin", patience.PYTHON_ENV: "/nonexistent/python"}
    out = subprocess.run(
        [str(patience.SHIM_DIR / "sbatch"), "--wrap", "echo a b", "-J", "x"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert out.stdout == "--wrap|echo a b|-J|x|"


def test_query_passes_a_real_error_through_when_the_controller_answers(tmp_path, monkeypatch):
    fake_command(tmp_path / "bin", "scontrol", 'test "$1" = ping && exit 0; exit 3')
    squeue = fake_command(tmp_path / "bin", "squeue", "echo 'Invalid job id specified' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    waits = patience.Waits("squeue")
    t0 = time.monotonic()
    assert patience.run_query([str(squeue), "-j", "1"], time.monotonic() + 60, waits) == 1
    assert time.monotonic() - t0 < 10, "an error with the controller up must not be waited on"


def test_waits_are_recorded_and_described(tmp_path, monkeypatch):
    monkeypatch.setenv(patience.STATE_ENV, str(tmp_path))
    waits = patience.Waits("sbatch")
    waits.begin("submit cap", "QOSMaxSubmitJobPerUserLimit")
    recorded = driver.read_waits(tmp_path)
    assert [w["command"] for w in recorded] == ["sbatch"]
    line = driver.describe_waits(recorded, recorded[0]["since"] + 42)
    assert line.startswith("ptflow: waiting on Slurm: the submit cap is full for 42 s")
    assert "QOSMaxSubmitJobPerUserLimit" in line and "sbatch x1" in line
    waits.end()
    assert driver.read_waits(tmp_path) == []


def test_watch_says_when_slurm_keeps_the_run_waiting_and_when_it_answers(tmp_path):
    said: list[str] = []
    watch = driver.SlurmWatch(tmp_path, said.append, every=0.05, repeat=60).start()
    try:
        (tmp_path / "1.json").write_text(json.dumps({"command": "squeue", "why": "controller", "since": time.time()}))
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            time.sleep(0.05)
        (tmp_path / "1.json").unlink()
        while len(said) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        watch.stop()
    assert said[0].startswith("ptflow: waiting on Slurm: slurmctld does not answer")
    assert said[1].startswith("ptflow: Slurm answers again")
    assert len(said) == 2, said


def test_sigterm_is_ctrl_c():
    previous = signal.getsignal(signal.SIGTERM)
    said: list[str] = []
    try:
        driver.stop_on_sigterm(said.append)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises in the main thread before this ends
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert said == ["ptflow: SIGTERM: stopping as on Ctrl-C (the run's Slurm jobs are cancelled)"]


def test_a_killed_commands_wait_is_dropped(tmp_path, monkeypatch):
    """A caller's timeout SIGKILLs a waiting command: its record must not keep the driver saying it waits."""
    monkeypatch.setenv(patience.STATE_ENV, str(tmp_path))
    child = subprocess.Popen(["sleep", "60"])
    child.kill()
    child.wait()
    record = {"command": "scontrol", "why": "controller", "since": time.time(), "host": os.uname().nodename}
    (tmp_path / "dead.json").write_text(json.dumps({**record, "pid": child.pid}))
    (tmp_path / "live.json").write_text(json.dumps({**record, "pid": os.getpid()}))
    assert [w["pid"] for w in driver.read_waits(tmp_path)] == [os.getpid()]
    assert not (tmp_path / "dead.json").exists()


def test_show_config_answers_from_its_last_answer_while_the_controller_is_away(tmp_path, monkeypatch):
    """The plugin reads MinJobAge before every status check with a 10 s timeout; without an answer it switches to
    sacct. Up: the real answer, kept; away: the kept one at once."""
    bin_dir = tmp_path / "bin"
    fake_command(bin_dir, "scontrol", 'test "$1" = ping && exit 0; echo "MinJobAge = 300 sec"')
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv(patience.STATE_ENV, str(tmp_path / "state"))
    scontrol = str(bin_dir / "scontrol")
    args = [scontrol, "show", "config"]
    assert patience.run_query(args, time.monotonic() + 60, patience.Waits("scontrol")) == 0
    assert patience.config_cache(args).read_text() == "MinJobAge = 300 sec\n"
    fake_command(bin_dir, "scontrol", "exit 1")  # the controller is away: ping fails, show config fails
    out = subprocess.run(
        [sys.executable, "-m", "ptflow.cluster.patience", "scontrol", "show", "config"],
        capture_output=True, text=True, timeout=20,
    )  # fmt: skip
    assert (out.returncode, out.stdout) == (0, "MinJobAge = 300 sec\n")


def test_the_shims_are_never_taken_for_the_real_command_however_path_reaches_them(tmp_path):
    """A PATH entry like src/ptflow/../ptflow/cluster/shims (a Snakefile that put src/.. on sys.path), or a link to a
    shim, is still the shim: taken for the real command, every shim ran itself forever (3,333 processes in 2
    minutes, seen in a bench)."""
    spelt = patience.SHIM_DIR.parent / ".." / "cluster" / "shims"
    links = tmp_path / "links"
    links.mkdir()
    (links / "squeue").symlink_to(patience.SHIM_DIR / "squeue")
    fake = fake_command(tmp_path / "bin", "squeue", "echo real")
    env = {"PATH": f"{spelt}:{links}:{tmp_path / 'bin'}"}
    assert patience.real_binary("squeue", env) == str(fake)
    # the shell fallback (no ptflow Python on the node) skips them the same way
    env = {"PATH": f"{links}:{spelt}:{tmp_path / 'bin'}:/usr/bin:/bin"}
    out = subprocess.run([str(links / "squeue")], capture_output=True, text=True, env=env, timeout=20)
    assert (out.returncode, out.stdout) == (0, "real\n")


def test_sbatch_keeps_stdin_only_where_sbatch_reads_its_script_there(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\ntrue\n")
    with open(os.devnull) as pipe_like:  # not a terminal
        assert patience.script_from_stdin(["--parsable", "/dev/stdin"], pipe_like)
        assert patience.script_from_stdin(["-p", "debug"], pipe_like)
        assert not patience.script_from_stdin(["--wrap", "echo hi"], pipe_like)
        assert not patience.script_from_stdin(["--wrap=echo hi"], pipe_like)
        assert not patience.script_from_stdin(["-p", "debug", str(script), "arg"], pipe_like)
