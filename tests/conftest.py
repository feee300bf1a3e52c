from pathlib import Path

import pytest

from ptflow.config.load import merged_config

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).parent


@pytest.fixture
def default_raw() -> dict:
    """The embedded default config as a fresh dict, to mutate in a test."""
    return merged_config(REPO)


def pytest_itemcollected(item: pytest.Item) -> None:
    if item.path.relative_to(TESTS).parts[0] == "slurm":
        item.add_marker(pytest.mark.slurm)


def suite_scope(nodeid: str) -> str:
    """What must run on one pytest-xdist worker: every test of the real Slurm cluster (they share the cluster the
    session starts), each other module that runs the workflow (its module-scoped run is made once); a unit test is
    a scope of its own."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/slurm/"):
        return "tests/slurm"
    if path.startswith("tests/unit/"):
        return nodeid
    return path


def pytest_xdist_make_scheduler(config, log):
    """`make test` runs the suite on several workers (-n). pytest-xdist 3.8's --dist loadgroup does not group under
    pytest 9 (it rewrites a node id attribute pytest 9 no longer reads), so scopes are given by the documented
    LoadScopeScheduling._split_scope hook instead."""
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return suite_scope(nodeid)

    return SuiteScheduling(config, log)
