"""The real local Slurm cluster for tests/slurm: one per test session, shared by all pytest-xdist workers
(tests/support/slurm_session.py). If the cluster cannot be started the tests are skipped, except under CI=true where
that is a failure: CI must not go green without having run them.
"""

from __future__ import annotations

import os

import pytest

from tests.support.local_slurm import SlurmClusterError
from tests.support.slurm_session import cluster_for_session


@pytest.fixture(scope="session")
def slurm_cluster():
    try:
        cluster = cluster_for_session()
    except (SlurmClusterError, OSError) as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Slurm test cluster unavailable under CI: {exc}", pytrace=False)
        pytest.skip(f"Slurm test cluster unavailable: {exc}")
    return cluster  # stopped at the end of the session by tests/conftest.py (pytest_sessionfinish)
