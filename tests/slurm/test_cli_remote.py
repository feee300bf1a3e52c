"""``ptflow remote`` from "the workstation" to a real sshd "login node" on a loopback address (key-only auth).

The login node is this same machine reached through Debian's openssh-server on 127.0.0.2:2222 (a real SSH
hop, a real detached driver); the remote environment is this test run's .venv (--python). The remote run is the
embedded default cut to one cell (one model x ``add`` x baseline, local profile): the SSH mechanics (stage, detached
driver, status and logs read back) are under test here, not what a cell runs; training and the matrix itself are in
tests/e2e (test_smoke trains a cell of the default, the default's matrix runs whole there).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from ptflow.ops.remote import EXCLUDES, EXCLUDES_ANYWHERE
from tests.e2e.smk import REPO
from tests.support.sshd import LoopbackSshd, SshdError

WORK_ROOT = Path("/var/lib/ptflow-tests")
PTFLOW = str(Path(sys.executable).with_name("ptflow"))
DEAD_HOST = "127.0.0.3:2223"  # nothing listens there: the first host fails, failover picks the next


@pytest.fixture(scope="module")
def sshd():
    try:
        server = LoopbackSshd("127.0.0.2", 2222).start()
    except (SshdError, OSError) as exc:  # installed (openssh-server) and started here: a fault, never a skip
        pytest.fail(f"sshd unavailable: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def remote_dir():
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    path = WORK_ROOT / f"remote-{uuid.uuid4().hex[:8]}"

    # "The workstation": a checkout of the workflow (code and config only), where ptflow remote is typed.
    # as `ptflow remote` stages it: EXCLUDES are the directory's own entries (a package named results, src/ptflow/
    # results, is code, not the run's results), EXCLUDES_ANYWHERE are caches at any depth
    def ignore(directory: str, names: list[str]) -> list[str]:
        return [n for n in names if n in EXCLUDES_ANYWHERE or (Path(directory) == REPO and n in EXCLUDES)]

    shutil.copytree(REPO, path / "workstation", ignore=ignore)
    # The remote mechanics do not need the default matrix, nor a training: one cell, the baseline of one model on
    # one eval (cache, preprocess, one evaluation, the aggregate's summary.csv and status.png). A second cell or an
    # SFT job would only cost CPU (a training and a second evaluation) without touching SSH differently.
    cfg = path / "workstation" / "config" / "config.yaml"
    text = cfg.read_text()
    matrix = "matrix:\n  models: all\n  evals: all\n  agents: all\n"
    assert matrix in text, "the default config's matrix block changed: update this test"
    small = "matrix:\n  models: [ptflow/tiny-llama-h64]\n  evals: [add]\n  agents: [baseline]\n"
    cfg.write_text(text.replace(matrix, small))
    yield path
    pid_file = path / "wf" / "run" / ".ptflow" / "driver.pid"
    if pid_file.is_file():  # a failed test must not leave its detached driver running
        pid = int(pid_file.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
            for _ in range(60):
                os.killpg(pid, 0)
                time.sleep(1)
    shutil.rmtree(path, ignore_errors=True)


def ptflow_remote(sshd, remote_dir: Path, *args: str, check: bool = True, env: dict | None = None):
    argv = [
        PTFLOW,
        "-v",
        "remote",
        "--host",
        f"{DEAD_HOST},{sshd.host}",
        "--user",
        sshd.user,
        "--known-hosts",
        str(sshd.known_hosts),
        "--remote-dir",
        str(remote_dir / "wf"),
        "--python",
        str(Path(sys.executable)),
        "--profile",
        "profiles/local",
        *args,
    ]
    # The key's path comes from the environment, never the command line (nor is the key itself anywhere on it).
    full_env = {**os.environ, "PTFLOW_SSH_KEY": str(sshd.key), **(env or {})}
    proc = subprocess.run(
        argv, cwd=remote_dir / "workstation", capture_output=True, text=True, env=full_env, timeout=900
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv} -> {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def test_preflight_rejects_missing_environment_and_bad_key(sshd, remote_dir, tmp_path):
    bad = ptflow_remote(sshd, remote_dir, "--python", "/nonexistent/bin/python", "preflight", check=False)
    assert bad.returncode == 1 and "python /nonexistent/bin/python is missing" in bad.stdout
    other_key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    denied = ptflow_remote(sshd, remote_dir, "preflight", check=False, env={"PTFLOW_SSH_KEY": str(other_key)})
    assert denied.returncode == 1
    assert "no login host accepts non-interactive SSH" in denied.stdout and "Permission denied" in denied.stdout


@pytest.mark.timeout(3600)
def test_remote_run_completes_default_and_reads_back_over_ssh(sshd, remote_dir):
    """Stage, start detached, SSH ends, the run completes.

    Then status and logs are read back over SSH.
    """
    started = ptflow_remote(sshd, remote_dir, "run")
    assert "started snakemake on 127.0.0.2:2222" in started.stdout, started.stdout
    # staged as code: the package named results (only the workflow directory's own results/ stays behind)
    assert (remote_dir / "wf" / "src" / "ptflow" / "results" / "scoring.py").is_file()
    # failover: the dead host was tried first
    assert DEAD_HOST.split(":")[0] in started.stderr
    # no key material and no secret on any logged command line
    assert "PRIVATE KEY" not in started.stderr
    saved = json.loads((remote_dir / "workstation" / ".ptflow" / "remote.json").read_text())
    pid = saved["driver"]["pid"]
    assert Path(f"/proc/{pid}").exists(), "the detached driver should outlive the SSH session that started it"

    # Waiting: the "login node" is this machine, so the driver's /proc entry is watched here (a `ptflow remote
    # driver` poll every few seconds cost a CLI start, two SSH connections and a remote Python each); the `driver`
    # command itself is asked once it has ended: alive false and its exit code, read back over SSH.
    deadline = time.monotonic() + 1800  # no timing claim: the machine is shared with other runs
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(2)
    d = json.loads(ptflow_remote(sshd, remote_dir, "driver").stdout)
    assert not d["alive"] and d["pid"] == pid, d
    if d["rc"] != 0:  # the driver's log, read over SSH, only to say why
        pytest.fail(f"remote driver failed: {d}\n{ptflow_remote(sshd, remote_dir, 'logs').stdout}")

    status = json.loads(ptflow_remote(sshd, remote_dir, "status", "--json").stdout)
    assert status["host"] == "127.0.0.2:2222"
    assert status["counts"]["Done"] == 1 and len(status["cells"]) == 1, status["counts"]
    assert (remote_dir / "wf" / "run" / "results" / "summary.csv").is_file()
    assert (remote_dir / "wf" / "run" / "results" / "status.png").is_file()

    # a cell's logs over SSH: the baseline cell's evaluate log (`ptflow logs` of a trained cell, its train and Slurm
    # logs: tests/slurm/test_cli_status.py::test_done_and_error_after_a_run; the same cell_logs)
    logs = ptflow_remote(sshd, remote_dir, "logs", "ptflow/tiny-llama-h64/add/baseline", "-n", "3").stdout
    eval_log = (
        remote_dir / "wf" / "run" / "results" / "logs" / "evaluate" / "ptflow--tiny-llama-h64" / "add" / "baseline.log"
    )
    assert f"==> {eval_log} <==" in logs
    assert eval_log.read_text().splitlines()[-1] in logs


def _running(pid: int) -> bool:
    """The process exists here and is not a zombie (state Z, field 3 of /proc/PID/stat)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def tao_env(sshd, **extra) -> dict:
    """TAO's variables only: no PTFLOW_* and no --host/--user/--identity on the command line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PTFLOW_SSH", "PTFLOW_REMOTE", "SSH_AUTH"))}
    env.update(SLURM_USER=sshd.user, SLURM_HOSTNAME=f"{DEAD_HOST},{sshd.host}", SSH_KEY_PATH=str(sshd.key))
    env.update(extra)
    return env


def plain_remote(sshd, remote_dir: Path, cwd: Path, *args: str, env: dict):
    argv = [
        PTFLOW,
        "remote",
        "--known-hosts",
        str(sshd.known_hosts),
        "--remote-dir",
        str(remote_dir / "wf"),
        "--python",
        sys.executable,
        "--profile",
        "profiles/local",
        *args,
    ]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def test_tao_variables_from_env_and_dotenv_and_their_remediation(sshd, remote_dir, tmp_path):
    ok = plain_remote(sshd, remote_dir, tmp_path, "preflight", env=tao_env(sshd))
    assert ok.returncode == 0 and f"ok: {sshd.host} accepts BatchMode SSH" in ok.stdout, ok.stdout + ok.stderr
    # the same from a .env file (python-dotenv), nothing in the environment
    dotenv_dir = tmp_path / "dotenv"
    dotenv_dir.mkdir()
    (dotenv_dir / ".env").write_text(
        f"SLURM_USER={sshd.user}\nSLURM_HOSTNAME={DEAD_HOST},{sshd.host}\nSSH_KEY_PATH={sshd.key}\n"
    )
    bare = {k: v for k, v in tao_env(sshd).items() if k not in ("SLURM_USER", "SLURM_HOSTNAME", "SSH_KEY_PATH")}
    from_file = plain_remote(sshd, remote_dir, dotenv_dir, "preflight", env=bare)
    assert from_file.returncode == 0, from_file.stdout + from_file.stderr
    missing = plain_remote(sshd, remote_dir, tmp_path, "preflight", env=bare)
    assert missing.returncode == 2
    assert "MISSING: set SLURM_USER and SLURM_HOSTNAME (comma-separated for failover)" in missing.stderr
    other_key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    denied = plain_remote(sshd, remote_dir, tmp_path, "preflight", env=tao_env(sshd, SSH_KEY_PATH=str(other_key)))
    assert denied.returncode == 1
    assert f"MISSING: passwordless SSH to {sshd.user}@{DEAD_HOST} not working" in denied.stdout
    assert "set SSH_KEY_PATH=/path/to/private_key" in denied.stdout


def test_required_inputs_are_tested_over_ssh_before_anything_is_staged(sshd, remote_dir, tmp_path):
    # the module's earlier remote run may have left its driver's pid file: "nothing started" = not rewritten
    pid_file = remote_dir / "wf" / "run" / ".ptflow" / "driver.pid"
    before = pid_file.stat().st_mtime_ns if pid_file.exists() else None
    workstation = remote_dir / "workstation"
    site = yaml.safe_load((workstation / "config" / "sites" / "local.yaml").read_text())
    site["name"] = "remote-inputs"
    site["runtime"] = {"kind": "venv", "venv": "lustre:///nonexistent/ptflow/venv"}  # a cluster path, converted
    (workstation / "config" / "sites" / "remote-inputs.yaml").write_text(yaml.safe_dump(site))
    (workstation / "config" / "remote-inputs.yaml").write_text(
        yaml.safe_dump({"paths": {"results": "file:///home/me/results", "scratch": ".scratch", "hf_home": ".hf"}})
    )
    run = plain_remote(
        sshd,
        remote_dir,
        workstation,
        "run",
        "--",
        "--config",
        "site=remote-inputs",
        "--configfile",
        "config/remote-inputs.yaml",
        env=tao_env(sshd),
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "paths.results = 'file:/home/me/results': file:// names this workstation's disk" in run.stderr
    assert f"site remote-inputs runtime.venv = /nonexistent/ptflow/venv does not exist on {sshd.host}" in run.stderr, (
        run.stderr
    )
    assert (pid_file.stat().st_mtime_ns if pid_file.exists() else None) == before  # no driver started
    # enroot credentials: presence only, tested on the login host with its own $ENROOT_CONFIG_PATH
    from ptflow.ops.remote import Remote

    creds_dir = tmp_path / "enroot"
    remote = Remote(
        [sshd.host],
        str(remote_dir / "wf"),
        user=sshd.user,
        identity=str(sshd.key),
        known_hosts=str(sshd.known_hosts),
        extra_env={"ENROOT_CONFIG_PATH": str(creds_dir)},
    )
    check = [("enroot credentials", "${ENROOT_CONFIG_PATH:-$HOME/.config/enroot}/.credentials")]
    assert remote.missing_paths(check) == [f"enroot credentials = {check[0][1]}"]
    creds_dir.mkdir()
    (creds_dir / ".credentials").write_text("machine nvcr.io login $oauthtoken password not-a-real-key\n")
    assert remote.missing_paths(check) == []
