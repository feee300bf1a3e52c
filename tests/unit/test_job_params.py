"""Golden params: every job of every shipped config (config/*.yaml) with every site keeps its params, as the repr
Snakemake compares to decide a rerun (so key order and list/tuple count too).

A job whose params change is run again, so a refactor that reshapes a param (a key written where it was left out,
a key moved, a list become a tuple, a default spelled out) would rerun finished cells - ten GPU-hours each. The
record is tests/unit/data/golden_params/, made by tests/support/job_params.py (its docstring says how and when to
regenerate).
"""

from __future__ import annotations

import pytest

from tests.support import job_params


@pytest.fixture(scope="module", autouse=True)
def _imports():
    job_params.warm_imports()


@pytest.mark.parametrize(("config", "site"), job_params.combos(), ids=lambda v: v)
def test_params_of_every_job_are_unchanged(config, site):
    changed = job_params.record_differences(job_params.read_golden(config, site), job_params.collect(config, site))
    assert changed == [], f"{config} x {site}: {len(changed)} params changed, first ones:\n" + "\n".join(changed[:20])


def test_the_record_covers_every_shipped_config_and_site():
    """A config or site added without its golden record fails here (regenerate: tests/support/job_params.py)."""
    missing = [f"{c} x {s}" for c, s in job_params.combos() if not job_params.golden_path(c, s).exists()]
    assert missing == []
    assert len(job_params.CONFIGS) >= 7 and len(job_params.SITES) >= 7
    # most combinations plan real jobs: a record of refusals only would guard nothing
    planned = sum("jobs" in job_params.read_golden(c, s) for c, s in job_params.combos())
    assert planned >= len(job_params.combos()) - 2


def test_a_reordered_or_retyped_param_is_a_change():
    """Snakemake reruns on a repr change: the comparison sees key order and list/tuple, and names the key path."""
    old = {"job": repr({"a": 1, "b": [1, 2]})}
    assert job_params.param_differences(old, {"job": repr({"b": [1, 2], "a": 1})})[0].startswith("job: same values")
    assert job_params.param_differences(old, {"job": repr({"a": 1, "b": (1, 2)})})[0].startswith("job.b: list -> tuple")
    assert job_params.param_differences(old, {"job": repr({"a": 2, "b": [1, 2]})}) == ["job.a: 1 -> 2"]
