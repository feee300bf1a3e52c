"""One local Slurm cluster per test session, shared by every pytest-xdist worker.

The first worker that needs the cluster starts it under a file lock and writes the session's id into the workdir's
``owner`` file; workers after it attach. The controller stops it when the session ends (tests/conftest.py), and only
if this session started it. PTFLOW_SLURM_EXISTING=1 attaches to whatever cluster the machine has configured
(SLURM_CONF or /etc/slurm) and never starts or stops one.

Every module of tests/slurm holds the cluster while it runs (``cluster_share``: shared, or exclusive for a module that
stops slurmctld), and only under that hold asks for the cluster (``cluster_for_module``): a worker never looks at the
cluster while an exclusive module has it stopped, and it keeps only a cluster that answered, never a failure.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.local_slurm import DEFAULT_WORKDIR, LocalSlurmCluster, SlurmClusterError

SESSION_ENV = "PTFLOW_TEST_SESSION"  # set in the controller (tests/conftest.py), inherited by every worker
EXISTING_ENV = "PTFLOW_SLURM_EXISTING"


def cluster_workdir() -> Path:
    return Path(os.environ.get("PTFLOW_SLURM_WORKDIR", DEFAULT_WORKDIR))


def _attach(cluster: LocalSlurmCluster) -> LocalSlurmCluster:
    cluster.start()  # only checks it answers and reads nodes/partitions
    return cluster


def cluster_for_session() -> LocalSlurmCluster:
    """This session's cluster: attached if it runs already, else started. Raises SlurmClusterError/OSError."""
    if os.environ.get(EXISTING_ENV) == "1":
        return _attach(LocalSlurmCluster.existing())
    workdir = cluster_workdir()
    session = os.environ.get(SESSION_ENV, "")
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir.parent / f".{workdir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter; the others wait here, then attach
        owner = workdir / "owner"
        if session and owner.is_file() and owner.read_text() == session:
            # this session's cluster, started by another worker: its own config path, not the /etc/slurm link
            cluster = _attach(LocalSlurmCluster.running(workdir))
            cluster.session_owned = True  # stopped by the session's controller, but this session's to restart
            return cluster
        cluster = LocalSlurmCluster(workdir)
        try:
            cluster.start()
        except BaseException:
            cluster.stop()
            raise
        owner.write_text(session)
        return cluster


@contextlib.contextmanager
def cluster_share(exclusive: bool) -> Iterator[None]:
    """Hold the cluster for a module: shared (any number of modules at once), or exclusive (no other module; taken
    only when every shared holder has let go, and every other module waits until it lets go). A file lock beside the
    workdir, so every worker of the session (every process) sees it."""
    workdir = cluster_workdir()
    workdir.parent.mkdir(parents=True, exist_ok=True)
    with open(workdir.parent / f".{workdir.name}.share", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield


_answered: LocalSlurmCluster | None = None  # this process's cluster once it answered: never a failure


def cluster_for_module() -> LocalSlurmCluster:
    """The cluster for a module, asked for under ``cluster_share``: started or attached (``cluster_for_session``) the
    first time, then the same object, checked again that it answers. Nothing is decided before the hold: an exclusive
    module that stopped slurmctld has started it again before it lets go. A failure is raised each time, not kept:
    the next module asks again. Raises SlurmClusterError/OSError."""
    global _answered
    if _answered is None:
        _answered = cluster_for_session()
        return _answered
    try:
        ping = _answered.run(["scontrol", "ping"], timeout=30)
        said = f"{ping.stdout.strip()} {ping.stderr.strip()}".strip() if ping.returncode != 0 else None
    except subprocess.TimeoutExpired:
        said = "scontrol ping took over 30 s"
    if said is not None:
        raise SlurmClusterError(f"the session's cluster ({_answered.conf_path}) does not answer: {said}")
    return _answered


def stop_if_ours(session: str) -> None:
    """The end of the session: stop the cluster this session started (never an existing one)."""
    workdir = cluster_workdir()
    owner = workdir / "owner"
    if os.environ.get(EXISTING_ENV) == "1" or not session or not owner.is_file() or owner.read_text() != session:
        return
    LocalSlurmCluster(workdir).stop()
    owner.unlink(missing_ok=True)
