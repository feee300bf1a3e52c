"""Golden params: every job of every shipped config (config/*.yaml) with every site keeps its params byte for byte.

A job whose params change is run again, so a refactor that reshapes a param (a key written where it was left out,
a list become a tuple, a default spelled out) would rerun finished cells - ten GPU-hours each. The record is
tests/unit/data/golden_params/, made by tests/support/job_params.py (its docstring says how and when to regenerate).
"""

from __future__ import annotations

import pytest

from tests.support import job_params


@pytest.fixture(scope="module", autouse=True)
def _imports():
    job_params.warm_imports()


@pytest.mark.parametrize(("config", "site"), job_params.combos(), ids=lambda v: v)
def test_params_of_every_job_are_unchanged(config, site):
    golden = job_params.read_golden(config, site)
    now = job_params.collect(config, site)
    if "refused" in golden or "refused" in now:
        assert now == golden, f"{config} x {site}: how the combination is refused changed"
        return
    old, new = golden["jobs"], now["jobs"]
    assert sorted(new) == sorted(old), (
        f"{config} x {site}: jobs added {sorted(set(new) - set(old))[:5]}, gone {sorted(set(old) - set(new))[:5]}"
    )
    changed = [f"{job}: {line}" for job in sorted(old) for line in job_params.differences(old[job], new[job])]
    assert changed == [], f"{config} x {site}: params changed ({len(changed)}), first ones:\n" + "\n".join(changed[:20])


def test_the_record_covers_every_shipped_config_and_site():
    """A config or site added without its golden record fails here (regenerate: tests/support/job_params.py)."""
    missing = [f"{c} x {s}" for c, s in job_params.combos() if not job_params.golden_path(c, s).exists()]
    assert missing == []
    assert len(job_params.CONFIGS) >= 7 and len(job_params.SITES) >= 7
    # most combinations plan real jobs: a record of refusals only would guard nothing
    planned = sum("jobs" in job_params.read_golden(c, s) for c, s in job_params.combos())
    assert planned >= len(job_params.combos()) - 2
