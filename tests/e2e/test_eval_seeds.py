"""Evaluation seeds through `make demo`'s profile (profiles/local): a seeded eval evaluates each cell once per seed,
each seed its own file; a seed that fails every stage is left out of the cell's mean, which keeps its count; a later
seed starts at the first seed's stage; deleting one seed's file plans that seed again, alone (issue 48; the same
through the Slurm plugin, with repeats: tests/slurm/test_repeats_and_seeds_on_slurm.py).

The eval is a STAND-IN task (tests/support/ladder_tasks.py ``out_of_memory_for_seed``): the tiny model answers two
questions, and every attempt of seed 22 fails with torch's OutOfMemoryError, as a real GPU can."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.e2e.smk import REPO, plan, snakemake

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

MODEL = "ptflow--tiny-llama-h64"
SEEDS = [11, 22]
TASK = f"{REPO / 'tests' / 'support' / 'ladder_tasks.py'}@out_of_memory_for_seed"


def seeded_config(tmp: Path) -> Path:
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    seedy = {"id": "seedy", "task": TASK, "task_args": {"failing_seed": 22}, "max_new_tokens": 8,
             "sampling": {"temperature": 0.7}, "seeds": SEEDS,
             "rescore": ["exact_numeric"]}  # fmt: skip
    matrix = {"models": [default["models"][0]["id"]], "evals": ["seedy"], "agents": ["baseline"]}
    override = tmp / "seeds.yaml"
    override.write_text(yaml.safe_dump({"evals": [*default["evals"], seedy], "matrix": matrix}))
    return override


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    work = tmp_path_factory.mktemp("seeds")
    config = seeded_config(work)
    snakemake(work, "--configfile", str(config))
    return work, config


def cell(work: Path) -> Path:
    return work / "results" / "cells" / MODEL / "seedy" / "baseline"


def test_each_seed_is_its_own_evaluation_and_the_cell_their_mean(done):
    work, _ = done
    per_seed = {s: json.loads((cell(work) / "seeds" / str(s) / "eval.json").read_text()) for s in SEEDS}
    assert {s: d["status"] for s, d in per_seed.items()} == {11: "scored", 22: "eval_failed"}
    # the first seed decided the stage and the decoding the later seeds follow (the stage's arithmetic:
    # test_evals_units.py::test_budget_ladder_is_posttrainbench_s)
    assert per_seed[11]["stage"] == 0 and per_seed[11]["decoding"] == "sampling"
    # seed 22 went through the ladder from the first seed's stage: its 4 tries at 8 tokens
    assert [a["max_new_tokens"] for a in per_seed[22]["attempts"]] == [8] * 4
    data = json.loads((cell(work) / "eval.json").read_text())
    assert data["status"] == "scored"
    assert data["seeds"]["num_seeds"] == 2 and data["seeds"]["num_seeds_succeeded"] == 1
    mean = per_seed[11]["metrics"]["value"]  # the mean over the seeds that succeeded
    assert data["metrics"]["value"] == pytest.approx(mean)
    assert data["seeds"]["per_seed"]["22"]["status"] == "eval_failed"
    summary = pd.read_csv(work / "results" / "summary.csv")
    assert float(summary[summary["eval"] == "seedy"]["value"].iloc[0]) == pytest.approx(mean)


def test_each_sample_was_generated_with_its_own_seed(done):
    """The kit seeds every generate() call of a seeded evaluation from the seed, the sample and the call."""
    from inspect_ai.log import read_eval_log

    from ptflow.stages.evaluate.kit.evaluate import sample_seed

    work, _ = done
    data = json.loads((cell(work) / "seeds" / "11" / "eval.json").read_text())
    log = read_eval_log(str(cell(work) / "seeds" / "11" / data["inspect_log"]))
    seeds = [e.config.seed for s in log.samples for e in s.events if e.event == "model"]
    assert seeds == [sample_seed(11, s.id, s.epoch, 0) for s in log.samples] and len(set(seeds)) == len(seeds)


def test_deleting_one_seeds_file_evaluates_that_seed_alone(done, tmp_path):
    work, config = done
    (cell(work) / "seeds" / "22" / "eval.json").unlink()
    planned = plan(work, "--configfile", str(config))
    seeds = {p.split("/")[6] for p in planned.get("evaluate_seed", set()) if p.endswith("eval.json")}
    assert seeds == {"22"} and "evaluate" not in planned, planned.text[-3000:]
    assert planned["seed_mean"] == {str(Path("results/cells") / MODEL / "seedy" / "baseline" / "eval.json")}


def test_a_seeded_cell_is_rescored_seed_by_seed(done):
    work, _ = done
    rescored = json.loads((cell(work) / "rescore" / "exact_numeric.json").read_text())
    assert set(rescored["per_seed"]) == {"11"}  # the seeds that succeeded, each log rescored
    assert rescored["metrics"]["value"] == pytest.approx(rescored["per_seed"]["11"])
