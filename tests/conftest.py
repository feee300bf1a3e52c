from pathlib import Path

import pytest

from ptflow.config.load import merged_config

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).parent


@pytest.fixture
def default_raw() -> dict:
    """The embedded default config as a fresh dict, to mutate in a test."""
    return merged_config(REPO)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """How `make test` spreads the suite over pytest-xdist workers (--dist loadgroup): every test of the real Slurm
    cluster on one worker (they share the cluster the session starts), each other module that runs the workflow on
    one worker (its module-scoped run is made once), unit tests wherever a worker is free."""
    for item in items:
        rel = item.path.relative_to(TESTS)
        if rel.parts[0] == "slurm":
            item.add_marker(pytest.mark.slurm)
            item.add_marker(pytest.mark.xdist_group("slurm"))
        elif rel.parts[0] != "unit":
            item.add_marker(pytest.mark.xdist_group(str(rel)))
