"""Slurm administration the tests need on their own cluster (a node taken down and back, what runs on it).

Not part of ptflow: ptflow never changes a cluster's nodes. Built on ``ptflow.cluster.slurm``'s runner and parser.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
from collections.abc import Iterator

from ptflow.cluster.slurm import SlurmUnavailable, _fields, _run

LOG = logging.getLogger("tests.slurm_admin")


def update_node(node: str, state: str, reason: str | None = None) -> None:
    """``scontrol update nodename=<node> state=<state> [reason=...]`` (tests restoring the shared cluster)."""
    argv = ["scontrol", "update", f"nodename={node}", f"state={state}"]
    if reason:
        argv.append(f"reason={reason}")
    LOG.info("run: %s", argv)
    _run(argv)


def node_state(node: str) -> str:
    """The node's State as ``scontrol show node`` gives it (``IDLE``, ``DOWN*+NOT_RESPONDING`` ...)."""
    for line in _run(["scontrol", "show", "node", "-o", node]).splitlines():
        f = _fields(line)
        if f.get("NodeName") == node:
            return f.get("State", "")
    raise SlurmUnavailable(f"scontrol show node {node} printed no such node")


def node_running_jobs(node: str) -> list[str]:
    """Ids of jobs running on ``node`` (squeue -w)."""
    return _run(["squeue", "-h", "-a", "-t", "running", "-w", node, "-o", "%i"]).split()


@contextlib.contextmanager
def spare_node_held() -> Iterator[None]:
    """Hold the cluster's spare node (``tests.support.local_slurm.SPARE_NODE``) for a test that takes it down: a file
    lock beside the cluster's workdir, so two such tests (each in its own pytest-xdist worker) never down it at once."""
    from tests.support.slurm_session import cluster_workdir

    workdir = cluster_workdir()
    with open(workdir.parent / f".{workdir.name}.spare-node", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
