"""ptflow.ops.run_hooks without Snakemake's run: what the driver does at parse, start and end, per site."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from ptflow.cluster.limits import Cap, Limits
from ptflow.cluster.preflight import PreflightError
from ptflow.config.load import load
from ptflow.jobs.build import Jobs
from ptflow.ops.run_hooks import RunHooks
from tests.conftest import REPO


def hooks_for(site: str, tmp_path, **workflow) -> RunHooks:
    loaded = load(REPO, [], [f"site={site}"], workdir=tmp_path)
    said = []
    hooks = RunHooks(Jobs(loaded.cfg, loaded.site, loaded.layout), SimpleNamespace(**workflow), log=said.append)
    hooks.said = said
    return hooks


def test_a_local_site_gets_no_slurm_clients_and_no_limits(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = os.environ["PATH"]
    hooks = hooks_for("local", tmp_path, is_main_process=True, nodes=4)
    hooks.patient_slurm_clients()
    assert os.environ["PATH"] == path and not (tmp_path / ".snakemake").exists()
    assert hooks.keep_under_limits() is None
    assert hooks.limits_problems(hooks.cfg, hooks.site, hooks.layout) == []


def test_a_job_steps_snakemake_installs_no_clients(tmp_path, monkeypatch):
    """The plugin's job step parses the workflow too (is_main_process False): only the driver puts shims first."""
    monkeypatch.chdir(tmp_path)
    path = os.environ["PATH"]
    hooks_for("generic", tmp_path, is_main_process=False, nodes=1).patient_slurm_clients()
    assert os.environ["PATH"] == path


def test_a_job_that_could_never_start_under_the_caps_is_a_preflight_problem(tmp_path):
    hooks = hooks_for("generic", tmp_path, is_main_process=True, nodes=250)
    hooks.limits = Limits(max_cpus=Cap(1, "QOS test MaxTRESPU cpu"))
    problems = hooks.limits_problems(hooks.cfg, hooks.site, hooks.layout)
    assert problems and all("QOS test MaxTRESPU cpu" in p for p in problems), problems


def test_the_preflight_refuses_with_its_problems(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hooks = hooks_for("local", tmp_path, is_main_process=True, nodes=1)
    monkeypatch.setattr(hooks, "limits_problems", lambda *a: ["a job needs more GPUs than the user may hold"])
    with pytest.raises(PreflightError, match="more GPUs than the user may hold"):
        hooks.preflight()


def test_a_warm_start_only_where_two_heavy_jobs_run():
    from ptflow.ops.run_hooks import warm_start_pays

    assert warm_start_pays(["cache_dataset", "train", "evaluate", "aggregate", "all"])
    # a rerun of one cell: its evaluation (and the report) start cold
    assert not warm_start_pays(["evaluate", "aggregate", "all"])
    assert not warm_start_pays(["cache_dataset", "preprocess", "hf_cache"])
    assert not warm_start_pays([])
