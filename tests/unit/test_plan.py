"""ptflow plan: its figures come from Snakemake's own dry-run, job for job, and equal the site's requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ptflow.config.model import build_config
from ptflow.config.sites import load_site
from ptflow.ops import plan as planning
from tests.e2e.smk import REPO
from tests.e2e.smk import plan as e2e_plan

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
PTFLOW = str(Path(sys.executable).with_name("ptflow"))
RULE_STAGE = {
    "cache_dataset": "cache",
    "cache_model": "cache",
    "hf_cache": "cache",
    "preprocess": "preprocess",
    "train": "train",
    "evaluate": "evaluate",
    "aggregate": "aggregate",
}


def run_plan(work: Path, *args: str) -> dict:
    argv = [PTFLOW, "plan", "--json", "-s", str(REPO / "Snakefile"), "--directory", str(work)]
    argv += ["--profile", str(REPO / "profiles" / "local"), "--config", f"site={SITE}", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "SLURM_CONF": "/nonexistent"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    work = tmp_path_factory.mktemp("plan")
    return work, run_plan(work)


def test_jobs_equal_the_dry_run_job_for_job(fresh):
    work, out = fresh
    assert out["jobs_per_rule"] == out["dry_run_job_stats"]
    dry = e2e_plan(work, "--config", f"site={SITE}")  # the test suite's own dry-run parser
    assert set(out["jobs_per_rule"]) == set(dry)
    for rule in dry:
        planned = {o for j in out["jobs"] if j["rule"] == rule for o in j["outputs"]}
        assert planned == dry[rule], rule


def test_figures_equal_site_requests(fresh):
    _, out = fresh
    site = load_site(str(SITE), REPO)
    cfg = build_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    expect: dict[str, dict[str, float]] = {}
    for j in out["jobs"]:
        if j["rule"] == "all":
            continue
        agent = cfg.agents[j["wildcards"]["agent"]] if j["rule"] == "train" else None
        req = site.request(RULE_STAGE[j["rule"]], agent)
        hours = req["runtime"] / 60
        e = expect.setdefault(req["partition"], {"jobs": 0, "gpu_hours": 0.0, "node_hours": 0.0, "cpu_hours": 0.0})
        e["jobs"] += 1
        e["gpu_hours"] += req.get("gpus", 0) * req.get("nodes", 1) * hours
        e["node_hours"] += req.get("nodes", 1) * hours
        e["cpu_hours"] += req["threads"] * hours
    got = {r["partition"]: r for r in out["requests"]}
    assert set(got) == set(expect)
    for part, e in expect.items():
        assert got[part]["account"] == "ptflow"
        for key, value in e.items():
            assert got[part][key] == pytest.approx(value, abs=1e-3), (part, key)
    # 4 GRPO trainings x 2 GPUs x 40 min + 4 SFT x 1 x 30 + 12 evaluations x 1 x 30 = 800 GPU-minutes
    assert out["totals"]["gpu_hours"] == pytest.approx(800 / 60, abs=1e-3)
    chain = [j["rule"] for j in out["longest_chain"]["jobs"]]
    assert chain == ["cache_dataset", "cache_model", "train", "train", "evaluate", "aggregate"]
    assert out["longest_chain"]["minutes"] == 30 + 30 + 30 + 40 + 30 + 10
    assert out["cell_counts"] == {"done": 0, "to run": 12, "failed before": 0, "stale": 0}


def test_multinode_gres_is_per_node():
    text = """
rule train:
    input: a
    output: b
    jobid: 7
    reason: Missing output files: b
    wildcards: model=m, eval=e, agent=a
    threads: 4
    resources: RESOURCES
""".replace(
        "RESOURCES",
        "tmpdir=/tmp, gres=gpu:h100:4, nodes=2, tasks=2, mpi=srun, runtime=60, slurm_partition=gpu, "
        "slurm_extra=--tmp=10M --signal=USR2@90",
    )
    jobs, _ = planning.parse_dry_run(text)
    (j,) = jobs
    assert (j.gpus, j.nodes, j.cpus, j.runtime_min) == (8, 2, 8, 60)
    assert j.resources["slurm_extra"] == "--tmp=10M --signal=USR2@90"
    (r,) = planning.requests(jobs)
    assert (r.gpu_hours, r.node_hours, r.cpu_hours) == (8, 2, 8)


def _touch_done(work: Path, cell_key: str) -> None:
    from ptflow.config.model import Cell
    from tests.unit.test_status import eval_json

    model, ev, agent = cell_key.split("/")
    p = work / "results" / "cells" / model / ev / agent / "eval.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(eval_json(Cell(model, ev, agent))))


def test_failed_before_and_stale(tmp_path):
    """A cell whose training log ends FAILED is 'failed before'; a cell with eval.json planned again is 'stale'."""
    failed = tmp_path / "results" / "logs" / "train" / "ptflow--tiny-llama-h64" / "add" / "sft.log"
    failed.parent.mkdir(parents=True)
    failed.write_text("[t] FAILED: ValueError: boom\n")
    _touch_done(tmp_path, "ptflow--tiny-llama-h96/sub/baseline")  # exists, but its inputs will be (re)made
    out = run_plan(tmp_path)
    assert out["cells"]["ptflow--tiny-llama-h64/add/sft"]["state"] == "failed before"
    assert out["cells"]["ptflow--tiny-llama-h96/sub/baseline"]["state"] == "stale"
    assert out["cell_counts"]["to run"] == 10
