"""Repeats and evaluation seeds through snakemake-executor-plugin-slurm on the real test cluster (issue 48): one
agent (sft) run twice, each run's cell evaluated with two seeds, one of which fails every try. Each cell is scored
from the seed that succeeded, with its count; deleting one seed's file evaluates that seed again, alone, as one Slurm
job.

The eval is a STAND-IN task (tests/support/ladder_tasks.py ``out_of_memory_for_seed``) on the default's add data:
sft trains on its train split, and every evaluation attempt of seed 22 fails with torch's OutOfMemoryError, as a real
GPU can; the tiny model answers the others."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.e2e.smk import REPO, default_agents
from tests.slurm.test_workflow_on_slurm import WORK_ROOT, rule_of, run_id, scontrol_jobs, slurm_run

pytestmark = pytest.mark.timeout(2400)

MODEL = "ptflow--tiny-llama-h64"
SEEDS = [11, 22]
TASK = f"{REPO / 'tests' / 'support' / 'ladder_tasks.py'}@out_of_memory_for_seed"


def overlay(work: Path) -> Path:
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    add = next(e for e in default["evals"] if e["id"] == "add")
    seedy = {**add, "id": "seedy", "task": TASK, "task_args": {"failing_seed": 22}, "max_new_tokens": 8,
             "sampling": {"temperature": 0.7}, "seeds": SEEDS}  # fmt: skip
    agents = [{**a, "repeats": 2} if a["id"] == "sft" else a for a in default_agents(sft_steps=10)]
    path = work / "seeds.yaml"
    path.write_text(yaml.safe_dump({
        "agents": agents,
        "evals": [seedy],
        "matrix": {"models": [default["models"][0]["id"]], "evals": ["seedy"], "agents": ["sft"]},
        # the base model's score on the eval, as a reference table: the matrix needs no baseline cell
        "scoring": {"reference": {"zeroshot": {"tiny-llama-h64": {"seedy": 0.0}}}},
    }))  # fmt: skip
    return path


@pytest.fixture(scope="module")
def done(slurm_cluster):
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    work = WORK_ROOT / f"seeds-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    config = overlay(work)
    out = slurm_run(work, slurm_cluster, "--configfile", str(config))
    yield work, config, out.stdout + out.stderr
    shutil.rmtree(work, ignore_errors=True)


def cell(work: Path, slot: str) -> Path:
    return work / "results" / "cells" / MODEL / "seedy" / slot


def test_each_run_is_scored_from_the_seed_that_succeeded_with_its_count(slurm_cluster, done):
    work, _, out = done
    for slot in ("sft", "sft@run2"):
        data = json.loads((cell(work, slot) / "eval.json").read_text())
        first = json.loads((cell(work, slot) / "seeds" / "11" / "eval.json").read_text())
        failed = json.loads((cell(work, slot) / "seeds" / "22" / "eval.json").read_text())
        assert failed["status"] == "eval_failed" and len(failed["attempts"]) == 4  # the first seed's stage, 4 tries
        assert data["status"] == "scored" and data["metrics"]["value"] == first["metrics"]["value"]
        assert (data["seeds"]["num_seeds"], data["seeds"]["num_seeds_succeeded"]) == (2, 1)
    agents = pd.read_csv(work / "results" / "agents.csv").set_index("agent")
    assert agents.loc["sft", "runs"] == 2
    # every evaluation seed was a Slurm job of the evaluate request: 2 runs x 2 seeds
    jobs = [j for j in scontrol_jobs(slurm_cluster) if j.get("JobName") == run_id(out)]
    seeds = [j for j in jobs if rule_of(j) == "evaluate_seed"]
    assert len(seeds) == 4 and "evaluate" not in {rule_of(j) for j in jobs}


def test_deleting_one_seeds_file_evaluates_that_seed_alone(slurm_cluster, done):
    work, config, _ = done
    (cell(work, "sft@run2") / "seeds" / "22" / "eval.json").unlink()
    out = slurm_run(work, slurm_cluster, "--configfile", str(config))
    text = out.stdout + out.stderr
    jobs = [j for j in scontrol_jobs(slurm_cluster) if j.get("JobName") == run_id(text)]
    assert sorted(rule_of(j) for j in jobs) == ["aggregate", "evaluate_seed"], [j["Comment"] for j in jobs]
    (seed_job,) = [j for j in jobs if rule_of(j) == "evaluate_seed"]
    assert "sft@run2" in seed_job["Comment"] and "22" in seed_job["Comment"].split("_wildcards_")[1]
    assert json.loads((cell(work, "sft@run2") / "seeds" / "22" / "eval.json").read_text())["status"] == "eval_failed"
