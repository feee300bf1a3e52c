"""The fixtures of tests/slurm/conftest.py against a stand-in controller (issue 46): real pytest sessions, real file
locks, the real ``slurm_cluster``/``cluster_share`` fixtures and ``cluster_for_session``'s attach path, with a fake
``scontrol`` on PATH that answers UP or DOWN from a state file, so no Slurm cluster is needed.

The race: a worker whose first Slurm test starts while an exclusive module (the controller outage) holds the cluster
with slurmctld stopped. Before the fix, its session-scoped ``slurm_cluster`` pinged before taking the module's shared
lock, found the controller DOWN and skipped that test and every later Slurm test of the worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO

SESSION = "issue46-session"
FAKE_SCONTROL = """#!/bin/sh
# scontrol's stand-in: slurmctld is up or down as the file $FAKE_SLURMCTLD says; every call is logged with the state
state=$(cat "$FAKE_SLURMCTLD")
echo "$state $*" >> "$FAKE_SLURMCTLD.calls"
if [ "$state" != up ]; then echo "Slurmctld(primary) at vm is DOWN"; exit 1; fi
case "$1 $2" in
  "ping "*) echo "Slurmctld(primary) at vm is UP" ;;
  "show node") echo "NodeName=vm NodeAddr=127.0.0.1 State=IDLE" ;;
  "show partition") echo "PartitionName=cpu MaxTime=UNLIMITED Default=YES" ;;
  "show config") echo "AccountingStorageType   = accounting_storage/slurmdbd" ;;
esac
"""
# The inner sessions use the real fixtures of tests/slurm, and the session's cluster is "running" (its owner file says
# this session started it), so the fixtures attach to it: the path whose ping found the controller DOWN.
CONFTEST = 'pytest_plugins = ["tests.slurm.conftest"]\n'
STAND_IN = """
import os
import time
from pathlib import Path

STATE = Path(os.environ["FAKE_SLURMCTLD"])


def stamp(name):
    (STATE.parent / name).write_text(repr(time.time()))


def set_controller(state):
    STATE.write_text(state)
"""
# The exclusive module: it has the cluster, stops slurmctld, and waits until another session's module waits on the
# share lock (a blocked flock in /proc/locks on the lock file) before it starts slurmctld again and lets go.
OUTAGE = """
import os
import time
from pathlib import Path

from stand_in import set_controller, stamp

EXCLUSIVE_CLUSTER = True


def waiting_on(path):
    inode = f":{os.stat(path).st_ino} "
    return any("->" in line and "FLOCK" in line and inode in line for line in open("/proc/locks"))


def test_outage(slurm_cluster):
    set_controller("down")  # stop_controller
    stamp("stopped")
    share = Path(os.environ["PTFLOW_SLURM_WORKDIR"]).parent / ".work.share"
    deadline = time.monotonic() + 60
    while not waiting_on(share):
        assert time.monotonic() < deadline, "no other module came to wait on the cluster"
        time.sleep(0.05)
    time.sleep(0.3)  # the other session waits: nothing it does now may look at the cluster
    set_controller("up")  # start_controller
    stamp("restarted")
"""
# The other worker's first Slurm test.
FIRST = """
from stand_in import stamp


def test_first_slurm_test(slurm_cluster):
    stamp("ran")
    assert "vm" in slurm_cluster.all_nodes and slurm_cluster.accounting and slurm_cluster.session_owned
"""


def _setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    workdir = tmp_path / "slurm" / "work"
    workdir.mkdir(parents=True)
    (workdir / "owner").write_text(SESSION)
    (tmp_path / "ctld").write_text("up")
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "conftest.py").write_text(CONFTEST)
    (inner / "stand_in.py").write_text(STAND_IN)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PTFLOW_SLURM_", "SLURM_"))}
    env.update(PATH=f"{bin_dir}:{env.get('PATH', '')}", PYTHONPATH=str(REPO), PTFLOW_TEST_SESSION=SESSION,
               PTFLOW_SLURM_WORKDIR=str(workdir), FAKE_SLURMCTLD=str(tmp_path / "ctld"))  # fmt: skip
    return inner, env


def _pytest(inner: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", *args]
    return subprocess.Popen(argv, cwd=inner, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_first_slurm_test_waits_for_the_exclusive_module_then_runs(tmp_path):
    inner, env = _setup(tmp_path)
    (inner / "test_outage.py").write_text(OUTAGE)
    (inner / "test_first.py").write_text(FIRST)
    outage = _pytest(inner, env, "test_outage.py")
    deadline = time.monotonic() + 60
    while not (tmp_path / "stopped").exists():  # the exclusive module holds the cluster, slurmctld stopped
        assert outage.poll() is None and time.monotonic() < deadline, outage.communicate()[0]
        time.sleep(0.05)
    first = _pytest(inner, env, "test_first.py")
    out_first = first.communicate(timeout=120)[0]
    if first.returncode != 0 or "1 passed" not in out_first:
        outage.kill()  # it did not wait: the exclusive module would wait for it in vain
    out_outage = outage.communicate(timeout=120)[0]
    # it waited (the exclusive module saw it blocked on the lock), then ran, and passed: no skip, no failure
    assert first.returncode == 0 and "1 passed" in out_first and "skipped" not in out_first, out_first
    assert outage.returncode == 0 and "1 passed" in out_outage, out_outage
    stopped, restarted, ran = (float((tmp_path / n).read_text()) for n in ("stopped", "restarted", "ran"))
    assert stopped < restarted < ran
    # nothing looked at the controller while it was down: every scontrol call found it up
    calls = (tmp_path / "ctld.calls").read_text().splitlines()
    assert calls and all(c.startswith("up ") for c in calls), calls
    assert sum(c == "up ping" for c in calls) == 2  # the outage module's attach, then the first test's


def test_an_unreachable_cluster_fails_each_module_and_is_never_kept(tmp_path):
    """No CI variable: a controller that does not answer is a failure (an error of the module's tests), not a skip;
    and neither a failure nor a cluster that answered once is kept as the state of the cluster: each module asks."""
    inner, env = _setup(tmp_path)
    env.pop("CI", None)
    (tmp_path / "ctld").write_text("down")
    uses = "from stand_in import set_controller\n\n\ndef test_uses_the_cluster(slurm_cluster):\n    pass\n"
    flip = "from stand_in import set_controller\n\n\ndef test_controller():\n    set_controller({!r})\n"
    for name, text in [("a_down", uses), ("b", flip.format("up")), ("c_up", uses), ("d", flip.format("down")),
                       ("e_down", uses), ("f", flip.format("up")), ("g_up", uses)]:  # fmt: skip
        (inner / f"test_{name}.py").write_text(text)
    run = _pytest(inner, env)
    out = run.communicate(timeout=120)[0]
    assert run.returncode == 1 and "5 passed, 2 errors" in out and "skipped" not in out, out
    # the first attach failed, then attached once up; the cluster that answered did not answer later, then did again
    assert "Slurm test cluster unavailable: existing cluster" in out and "not reachable" in out
    assert "Slurm test cluster unavailable: the session's cluster" in out and "does not answer" in out
    assert out.count("Slurmctld(primary) at vm is DOWN") == 2, out
