"""The real local Slurm cluster for tests/slurm (started once per session, stopped at the end).

PTFLOW_SLURM_EXISTING=1 uses the cluster already configured on the machine (SLURM_CONF or /etc/slurm) and
neither starts nor stops anything. If the cluster cannot be started the tests are skipped, except under
CI=true where that is a failure: CI must not go green without having run them.
"""

from __future__ import annotations

import os

import pytest

from tests.support.local_slurm import DEFAULT_WORKDIR, LocalSlurmCluster, SlurmClusterError


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Slurm test cluster unavailable under CI: {reason}", pytrace=False)
    pytest.skip(f"Slurm test cluster unavailable: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster():
    if os.environ.get("PTFLOW_SLURM_EXISTING") == "1":
        cluster = LocalSlurmCluster.existing()
        try:
            cluster.start()  # only checks it answers and reads nodes/partitions
        except (SlurmClusterError, OSError) as exc:
            _unavailable(str(exc))
        yield cluster
        return
    cluster = LocalSlurmCluster(os.environ.get("PTFLOW_SLURM_WORKDIR", DEFAULT_WORKDIR))
    try:
        cluster.start()
    except (SlurmClusterError, OSError) as exc:
        cluster.stop()
        _unavailable(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()
