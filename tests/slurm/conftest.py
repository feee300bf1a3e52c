"""The real local Slurm cluster for tests/slurm: one per test session, shared by all pytest-xdist workers
(tests/support/slurm_session.py). If the cluster cannot be started the tests are skipped, except under CI=true where
that is a failure: CI must not go green without having run them.

A module that takes the whole cluster (it stops slurmctld) sets ``EXCLUSIVE_CLUSTER = True``: it waits until no other
module uses the cluster, and the others wait while it runs (a shared/exclusive file lock per module).
"""

from __future__ import annotations

import fcntl
import os

import pytest

from tests.support.local_slurm import SlurmClusterError
from tests.support.slurm_session import cluster_for_session, cluster_workdir


@pytest.fixture(scope="session")
def slurm_cluster():
    try:
        cluster = cluster_for_session()
    except (SlurmClusterError, OSError) as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Slurm test cluster unavailable under CI: {exc}", pytrace=False)
        pytest.skip(f"Slurm test cluster unavailable: {exc}")
    return cluster  # stopped at the end of the session by tests/conftest.py (pytest_sessionfinish)


@pytest.fixture(scope="module", autouse=True)
def cluster_share(request):
    """Shared for every module here, exclusive for one with EXCLUSIVE_CLUSTER (held for the module's tests)."""
    workdir = cluster_workdir()
    workdir.parent.mkdir(parents=True, exist_ok=True)
    exclusive = getattr(request.module, "EXCLUSIVE_CLUSTER", False)
    with open(workdir.parent / f".{workdir.name}.share", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
