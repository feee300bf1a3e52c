"""Evaluation seeds of an agent cell made in its train job's allocation, as PostTrainBench's final evaluation runs
them in the agent's job (issue 48), through `make demo`'s profile: the train job evaluates each seed in turn after
the agent (a later seed from the first seed's ladder stage), stages each, and each seed's evaluate_seed job adopts
its seed (a CPU job of seconds); the cell's eval.json is the mean over both. Deleting one seed's file plans that
seed's evaluation alone; the agent never runs again.

The agent is the scripted stand-in (``python -m ptflow.standins.scripted_agent``: a real program standing in for an
agent CLI, no LLM API); the eval is the default's ``add`` sampled at temperature 0.7 (so the second seed counts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.e2e.smk import REPO, plan, snakemake

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

MODEL = "ptflow--tiny-llama-h64"
SEEDS = [5, 6]


def overlay(work: Path) -> Path:
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    add = next(e for e in default["evals"] if e["id"] == "add")
    path = work / "seeded-agent.yaml"
    path.write_text(yaml.safe_dump({
        "agents": [{"id": "scripted", "kind": "cli-agent", "cli": "scripted", "model": "scripted-sft",
                    "command": ["{python}", "-m", "ptflow.standins.scripted_agent", "--task-dir", "{task_dir}",
                                "--steps", "20"],
                    "hours": 0.1, "grace_minutes": 0.2}],
        "evals": [{**add, "seeds": SEEDS, "sampling": {"temperature": 0.7}}],
        "matrix": {"models": [default["models"][0]["id"]], "evals": ["add"], "agents": ["scripted"]},
        "scoring": {"reference": {"zeroshot": {"tiny-llama-h64": {"add": 0.0}}}},
    }))  # fmt: skip
    return path


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    work = tmp_path_factory.mktemp("seeded_agent")
    config = overlay(work)
    snakemake(work, "--configfile", str(config), env={"TMPDIR": str(tmp_path_factory.mktemp("seeded_agent_tmp"))})
    return work, config


def cell(work: Path) -> Path:
    return work / "results" / "cells" / MODEL / "add" / "scripted"


def log(work: Path, rule: str, *parts: str) -> str:
    return (work / "results" / "logs" / rule / MODEL / "add" / Path(*parts)).read_text()


def test_the_train_job_evaluates_every_seed_and_their_jobs_adopt_them(done):
    work, _ = done
    first, second = (json.loads((cell(work) / "seeds" / str(s) / "eval.json").read_text()) for s in SEEDS)
    assert first["status"] == second["status"] == "scored"
    assert first["evaluated_in"] == second["evaluated_in"] == "train_job"
    assert (first["seed"], second["seed"], first["decoding"], second["stage"]) == (5, 6, "sampling", first["stage"])
    train = log(work, "train", "scripted.log")
    assert train.count("evaluation in the train job's allocation ended with exit 0") == 2
    for seed in SEEDS:  # each seed's job adopted what the train job made, and nothing is left staged
        assert "adopted the evaluation its train job made" in log(work, "evaluate", "scripted", f"{seed}.log")
        assert not (cell(work) / "seeds" / str(seed) / "evaluation-in-train-job").exists()
    mean = json.loads((cell(work) / "eval.json").read_text())
    assert (mean["seeds"]["num_seeds"], mean["seeds"]["num_seeds_succeeded"]) == (2, 2)
    assert mean["metrics"]["value"] == pytest.approx((first["metrics"]["value"] + second["metrics"]["value"]) / 2)


def test_a_deleted_seed_is_planned_alone_without_the_agent(done):
    """Deleting one seed's file plans that seed's evaluation alone (and the mean, the aggregate): no training. Its job
    then evaluates by itself: the train job's staged evaluation was moved away when it was adopted (asserted above;
    ptflow.stages.evaluate.in_train_job), and a seed evaluated in its own job is proved through the Slurm plugin by
    tests/slurm/test_repeats_and_seeds_on_slurm.py."""
    work, config = done
    (cell(work) / "seeds" / "6" / "eval.json").unlink()
    planned = plan(work, "--configfile", str(config))
    assert set(planned) - {"all"} == {"evaluate_seed", "seed_mean", "aggregate"}, planned.text[-2000:]
    assert {Path(out).parent.name for out in planned["evaluate_seed"]} == {"6"}  # its eval.json and inspect dir
