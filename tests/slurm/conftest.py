"""The real local Slurm cluster for tests/slurm: one per test session, shared by all pytest-xdist workers
(tests/support/slurm_session.py). A cluster that cannot be started or does not answer fails the module's tests, with
or without CI: this kind of machine runs one (the cluster installs its packages and starts itself), so a cluster
missing here is a fault to see, not a test to skip.

A module that takes the whole cluster (it stops slurmctld) sets ``EXCLUSIVE_CLUSTER = True``: it waits until no other
module uses the cluster, and the others wait while it runs (a shared/exclusive file lock per module, ``cluster_share``).
``slurm_cluster`` asks for the cluster only once the module holds it, whichever fixture a test names first: a worker
whose first Slurm test comes while an exclusive module has slurmctld stopped waits, and then finds it up.
"""

from __future__ import annotations

import pytest

from tests.support import slurm_session
from tests.support.local_slurm import SlurmClusterError


@pytest.fixture(scope="module", autouse=True)
def cluster_share(request):
    """Shared for every module here, exclusive for one with EXCLUSIVE_CLUSTER (held for the module's tests)."""
    with slurm_session.cluster_share(getattr(request.module, "EXCLUSIVE_CLUSTER", False)):
        yield


@pytest.fixture(scope="module")
def slurm_cluster(cluster_share):
    """The session's cluster, for this module (after ``cluster_share``: the module holds the cluster). Stopped at the
    end of the session by tests/conftest.py (pytest_sessionfinish)."""
    try:
        return slurm_session.cluster_for_module()
    except (SlurmClusterError, OSError) as exc:
        reason = str(exc)
    pytest.fail(f"Slurm test cluster unavailable: {reason}", pytrace=False)  # once, not below the error it says
