"""``ptflow remote driver``'s reading of the detached driver (ptflow.ops.remote.Remote.driver): its script, run by a
local bash instead of over SSH (the SSH hop itself: tests/slurm/test_cli_remote.py)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from ptflow.ops.remote import Remote


class LocalBash(Remote):
    """Remote whose scripts run here: a stand-in for the SSH hop, nothing else changed."""

    def ssh(self, script: str, host=None, stdin=None, timeout: float = 60, check=True):
        proc = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=timeout)
        return proc.returncode, proc.stdout, proc.stderr


def remote_with_driver(tmp_path: Path, pid: int, rc: str | None = None) -> Remote:
    state = tmp_path / "run" / ".ptflow"
    state.mkdir(parents=True)
    (state / "driver.pid").write_text(f"{pid}\n")
    if rc is not None:
        (state / "driver.rc").write_text(rc)
    return LocalBash(hosts=["login"], remote_dir=str(tmp_path))


def test_a_running_driver_is_alive(tmp_path):
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert remote_with_driver(tmp_path, proc.pid).driver()["alive"] is True
    finally:
        proc.kill()
        proc.wait()


def test_a_driver_that_ended_is_not_alive_while_it_waits_to_be_reaped(tmp_path):
    # A detached driver's new parent (init, on a login node) reaps it when it gets to it: until then the process is
    # a zombie, which `kill -0` still finds. A suite's run once read a finished driver as alive this way.
    proc = subprocess.Popen(["true"])  # never waited for until the end: a zombie child of this process
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child did not end"
            time.sleep(0.05)
        d = remote_with_driver(tmp_path, proc.pid).driver()
        assert (d["pid"], d["alive"], d["rc"]) == (proc.pid, False, None)
    finally:
        proc.wait()


def test_a_driver_that_wrote_its_exit_code_has_ended(tmp_path):
    proc = subprocess.Popen(["sleep", "30"])  # its shell, between writing driver.rc and exiting
    try:
        d = remote_with_driver(tmp_path, proc.pid, rc="0\n").driver()
        assert (d["alive"], d["rc"]) == (False, 0)
    finally:
        proc.kill()
        proc.wait()
