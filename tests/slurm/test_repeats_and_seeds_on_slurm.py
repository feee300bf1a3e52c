"""Repeats and evaluation seeds through snakemake-executor-plugin-slurm on the real test cluster (issue 48): one
agent (sft) run twice, each run's cell evaluated with two seeds as its own Slurm jobs; in run 2 one seed fails every
try. Run 2's cell is scored from the seed that succeeded, with its count; run 1's is the mean of both; every sample
was generated with its own seed; each seed's log is rescored; deleting one seed's file evaluates that seed again,
alone, as one Slurm job.

The eval is a STAND-IN task (tests/support/ladder_tasks.py ``out_of_memory_for_seed``) on the default's add data:
sft trains on its train split, and every evaluation attempt of seed 22 of run 2's model fails with torch's
OutOfMemoryError, as a real GPU can; the tiny model answers the others. The same rules through the local profile
(repeats, rescoring): tests/e2e/test_repeats.py."""

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
    seedy = {**add, "id": "seedy", "task": TASK, "task_args": {"failing_seed": 22, "failing_model": "sft@run2"},
             "max_new_tokens": 8, "sampling": {"temperature": 0.7}, "seeds": SEEDS,
             "rescore": ["exact_numeric"]}  # fmt: skip
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


def seed_file(work: Path, slot: str, seed: int) -> dict:
    return json.loads((cell(work, slot) / "seeds" / str(seed) / "eval.json").read_text())


def test_each_run_is_scored_from_the_seeds_that_succeeded_with_their_count(slurm_cluster, done):
    work, _, out = done
    first, second = seed_file(work, "sft", 11), seed_file(work, "sft", 22)
    both = json.loads((cell(work, "sft") / "eval.json").read_text())
    assert (both["seeds"]["num_seeds"], both["seeds"]["num_seeds_succeeded"]) == (2, 2)
    assert both["metrics"]["value"] == pytest.approx((first["metrics"]["value"] + second["metrics"]["value"]) / 2)
    # the first seed decided the ladder stage and the decoding the later seed followed
    assert (first["stage"], first["decoding"], second["stage"]) == (0, "sampling", 0)

    failed = seed_file(work, "sft@run2", 22)
    assert failed["status"] == "eval_failed" and len(failed["attempts"]) == 4  # the first seed's stage: 4 tries
    one = json.loads((cell(work, "sft@run2") / "eval.json").read_text())
    assert one["status"] == "scored" and one["metrics"]["value"] == seed_file(work, "sft@run2", 11)["metrics"]["value"]
    assert (one["seeds"]["num_seeds"], one["seeds"]["num_seeds_succeeded"]) == (2, 1)
    assert one["seeds"]["per_seed"]["22"]["status"] == "eval_failed"

    agents = pd.read_csv(work / "results" / "agents.csv").set_index("agent")
    assert agents.loc["sft", "runs"] == 2
    # every evaluation seed was a Slurm job of the evaluate request: 2 runs x 2 seeds, and no evaluate job
    jobs = [j for j in scontrol_jobs(slurm_cluster) if j.get("JobName") == run_id(out)]
    assert len([j for j in jobs if rule_of(j) == "evaluate_seed"]) == 4 and "evaluate" not in map(rule_of, jobs)


def test_each_sample_was_generated_with_its_own_seed(done):
    """The kit seeds every generate() call of a seeded evaluation from the seed, the sample and the call."""
    from inspect_ai.log import read_eval_log

    from ptflow.stages.evaluate.kit.evaluate import sample_seed

    work, _, _ = done
    log = read_eval_log(str(cell(work, "sft") / "seeds" / "11" / seed_file(work, "sft", 11)["inspect_log"]))
    seeds = [e.config.seed for s in log.samples for e in s.events if e.event == "model"]
    assert seeds == [sample_seed(11, s.id, s.epoch, 0) for s in log.samples] and len(set(seeds)) == len(seeds)


def test_a_seeded_cell_is_rescored_seed_by_seed(done):
    work, _, _ = done
    rescored = json.loads((cell(work, "sft@run2") / "rescore" / "exact_numeric.json").read_text())
    assert set(rescored["per_seed"]) == {"11"}  # the seeds that succeeded, each log rescored
    assert rescored["metrics"]["value"] == pytest.approx(rescored["per_seed"]["11"])


def test_deleting_one_seeds_file_evaluates_that_seed_alone(slurm_cluster, done):
    work, config, _ = done
    (cell(work, "sft") / "seeds" / "22" / "eval.json").unlink()
    out = slurm_run(work, slurm_cluster, "--configfile", str(config))
    jobs = [j for j in scontrol_jobs(slurm_cluster) if j.get("JobName") == run_id(out.stdout + out.stderr)]
    # the seed's evaluation, the cell's rescoring (its eval.json is made again by seed_mean, on the login node), and
    # the aggregate
    assert sorted(map(rule_of, jobs)) == ["aggregate", "evaluate_seed", "rescore"], [j["Comment"] for j in jobs]
    (seed_job,) = [j for j in jobs if rule_of(j) == "evaluate_seed"]
    assert seed_job["Comment"].split("_wildcards_")[1].split("_") == [MODEL, "seedy", "sft", "22"]
    assert seed_file(work, "sft", 22)["status"] == "scored"
