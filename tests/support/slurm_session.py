"""One local Slurm cluster per test session, shared by every pytest-xdist worker.

The first worker that needs the cluster starts it under a file lock and writes the session's id into the workdir's
``owner`` file; workers after it attach. The controller stops it when the session ends (tests/conftest.py), and only
if this session started it. PTFLOW_SLURM_EXISTING=1 attaches to whatever cluster the machine has configured
(SLURM_CONF or /etc/slurm) and never starts or stops one.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from tests.support.local_slurm import DEFAULT_WORKDIR, LocalSlurmCluster

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


def stop_if_ours(session: str) -> None:
    """The end of the session: stop the cluster this session started (never an existing one)."""
    workdir = cluster_workdir()
    owner = workdir / "owner"
    if os.environ.get(EXISTING_ENV) == "1" or not session or not owner.is_file() or owner.read_text() != session:
        return
    LocalSlurmCluster(workdir).stop()
    owner.unlink(missing_ok=True)
