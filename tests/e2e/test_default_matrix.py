"""The embedded default, run for real in a temp dir: every artifact, the learning it shows, and the reruns."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ptflow.stages.evaluate.run import validate_eval_json
from tests.e2e.smk import REPO, plan, snakemake

# The fixture runs the whole default matrix: minutes on 2 cores, longer when the machine is shared.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]

MODELS = ["ptflow--tiny-llama-h64", "ptflow--tiny-llama-h96"]
EVALS = ["add", "sub"]
AGENTS = ["baseline", "sft", "grpo"]


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    """A working directory where the default matrix has run to completion."""
    work = tmp_path_factory.mktemp("default")
    snakemake(work)
    return work


def cell(work, m, e, a):
    return work / "results" / "cells" / m / e / a


def test_every_cell_has_a_valid_eval_json(done):
    from inspect_ai.log import read_eval_log

    for m in MODELS:
        for e in EVALS:
            for a in AGENTS:
                data = json.loads((cell(done, m, e, a) / "eval.json").read_text())
                validate_eval_json(data)
                assert (data["model_name"], data["eval"], data["agent"]) == (m, e, a)
                # eval.json is derived from inspect's log, kept beside it
                log = read_eval_log(str(cell(done, m, e, a) / data["inspect_log"]))
                assert log.status == "success"
                assert len(log.samples) == data["metrics"]["n"]
                assert data["checkpoint"]["kind"] == ("base" if a == "baseline" else "trained")


def test_leaderboard_shows_learning(done):
    df = pd.read_csv(done / "results" / "summary.csv")
    assert len(df) == len(MODELS) * len(EVALS) * len(AGENTS)
    assert set(df["metric"]) == {"accuracy"} and not df["fallback"].eq("yes").any()
    acc = df.set_index(["model", "eval", "agent"])["value"]
    for model in df["model"].unique():
        for e in EVALS:
            base, sft, grpo = (acc[(model, e, a)] for a in AGENTS)
            assert sft >= base + 0.3, f"{model}/{e}: sft {sft} vs baseline {base}"
            assert grpo >= sft - 0.05, f"{model}/{e}: grpo {grpo} fell below its sft start {sft}"
    # PostTrainBench's score, with sft's cells as the weights' reference (config: scoring.reference_agent)
    agents = pd.read_csv(done / "results" / "agents.csv").set_index("agent")
    assert agents.loc["sft", "score"] >= agents.loc["baseline", "score"] + 0.3
    weights = df.groupby("eval")["value"].size()  # both evals weigh in
    assert len(weights) == 2
    board = (done / "results" / "leaderboard.md").read_text()
    assert "| add (accuracy) | sub (accuracy) |" in board and "grpo" in board
    assert (done / "results" / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    index = (done / "results" / "report" / "index.html").read_text()
    assert "sft" in index and (done / "results" / "report" / "viewer" / "index.html").is_file()


def test_jobs_started_warm(done):
    """The local site's warm start (ptflow.warmstart): training, evaluation scripts and the evaluation kit ran in
    forked children of two zygotes, one per job environment: the scripts', and the kit's offline data environment,
    forked ahead with the first (a companion whose environment the broker predicted right: no third zygote)."""
    log = (done / "results" / "logs" / "warmstart" / "broker.log").read_text()
    zygotes = [line for line in log.splitlines() if line.startswith("warm start: zygote ")]
    assert len(zygotes) == 2, log
    assert " for a new job environment" in zygotes[0] and " for the evaluation kit (evaluate.py)" in zygotes[1]
    cells = len(MODELS) * len(EVALS)
    assert log.count(".train.py runs warm") == cells * 2  # Snakemake's generated scripts: tmp<id>.<rule script>
    assert log.count(".evaluate.py runs warm") == cells * 3
    assert log.count("warm start: evaluate.py runs warm") == cells * 3  # the evaluation kit itself
    assert "not preloaded" not in log


def test_checkpoints_on_scratch_with_manifest(done):
    from ptflow.stages.checkpoint import verify_checkpoint

    for m in MODELS:
        for e in EVALS:
            sft = json.loads((cell(done, m, e, "sft") / "checkpoint.json").read_text())
            grpo = json.loads((cell(done, m, e, "grpo") / "checkpoint.json").read_text())
            for man in (sft, grpo):
                path = verify_checkpoint(man)
                assert (done / ".scratch" / "checkpoints") in path.parents
                assert man["bytes"] > 0 and man["weights"] and man["step"] >= 1
            # grpo really starts from the sft checkpoint of the same cell
            assert grpo["start_model"] == sft["checkpoint"]
            # and its reward sees the completion text: a reward that did not would be ~0 and leave sft's model as
            # it was, which the leaderboard's margins alone would not notice
            assert grpo["reward_mean"] > 0.5, (m, e, grpo["reward_mean"])
            assert "reward_mean" not in sft
            assert not (cell(done, m, e, "baseline") / "checkpoint.json").exists()


def test_cache_marker_and_parquet(done):
    marker = json.loads((done / "results" / "cache" / "hf_cache.json").read_text())
    repos = {(r["repo"], r["repo_type"]) for r in marker["repos"]}
    assert repos == {
        ("ptflow/tiny-llama-h64", "model"),
        ("ptflow/tiny-llama-h96", "model"),
        ("ptflow/arith-add", "dataset"),
        ("ptflow/arith-sub", "dataset"),
    }
    for r in marker["repos"]:
        assert len(r["commit"]) == 40 and r["files"] and r["bytes"] == sum(f["bytes"] for f in r["files"])
    for e in EVALS:
        train = pd.read_parquet(done / "results" / "data" / e / "train.parquet")
        test = pd.read_parquet(done / "results" / "data" / e / "test.parquet")
        assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        assert not set(train["extra_info"].map(lambda x: x["question"])) & set(
            test["extra_info"].map(lambda x: x["question"])
        ), "a test question is in the train split"


def test_second_run_does_nothing(done):
    assert plan(done) == {}


def test_changing_one_agents_params_reruns_only_its_cells(done, tmp_path):
    override = tmp_path / "override.yaml"
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    agents = default["agents"]
    next(a for a in agents if a["id"] == "sft")["params"]["steps"] += 10
    override.write_text(yaml.safe_dump({"agents": agents}))
    planned = plan(done, "--configfile", str(override))
    trained = {p.split("/")[4] for p in planned["train"]}
    evaluated = {p.split("/")[4] for p in planned["evaluate"] if p.endswith("eval.json")}
    assert trained == {"sft", "grpo"}, "grpo builds on sft, so it is stale too"
    assert evaluated == {"sft", "grpo"}, "baseline cells must stay done"
    assert len(planned["train"]) == 8 and "cache_model" not in planned and "preprocess" not in planned


def corrupt_checkpoint_config(work, tmp_path, agents: list[dict] | None = None):
    """A real failure: the sft checkpoint of (h64, add) is damaged on scratch after training (disk fault, someone
    editing it). A new agent starting from it must fail its checksum check; its (h64, sub) twin must not.
    ``agents``: those the run was made with (the default's unless given), so that no other training reruns."""
    manifest = json.loads((cell(work, MODELS[0], "add", "sft") / "checkpoint.json").read_text())
    weights = Path(manifest["checkpoint"]) / manifest["weights"][0]["path"]
    weights.write_bytes(weights.read_bytes()[:-64] + bytes(64))
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    more = {
        "id": "grpo-more",
        "kind": "trl-grpo",
        "from": "sft",
        "params": {
            "steps": 2,
            "batch_size": 4,
            "num_generations": 2,
            "learning_rate": 1e-5,
            "max_completion_length": 16,
            "seed": 0,
        },
    }
    cfg = tmp_path / "crash.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "agents": (agents or default["agents"]) + [more],
                "matrix": {
                    "models": [default["models"][0]["id"]],
                    "evals": "all",
                    "agents": ["baseline", "sft", "grpo-more"],
                },
            }
        )
    )
    return cfg


def copy_workdir(src, dst):
    """A copy of a finished working directory (results, checkpoints and Snakemake's metadata, times kept)."""
    for name in ("results", ".scratch", ".snakemake"):
        shutil.copytree(src / name, dst / name, symlinks=True, ignore=shutil.ignore_patterns("locks", "incomplete"))
    # manifests name their checkpoint by absolute path: point them at the copy
    for man in (dst / "results" / "cells").rglob("checkpoint.json"):
        man.write_text(man.read_text().replace(str(src), str(dst)))
        os.utime(
            man, ns=((src / man.relative_to(dst)).stat().st_atime_ns, (src / man.relative_to(dst)).stat().st_mtime_ns)
        )


def test_deleted_eval_json_and_crashed_training_are_the_only_reruns(tmp_path, done):
    """Two reruns, proved by one Snakemake run of a copy of the finished matrix: a deleted eval.json is evaluated
    again, alone (no other cell's evaluation is redone), and a training that crashes leaves the others done and is
    the only cell planned again. One run, not one per fact: each run costs a Snakemake, its warm-start zygotes and
    an aggregate (about 25 CPU-s here), and the two reruns touch disjoint cells. The copy keeps ``done`` as it was."""
    work = tmp_path / "crash"
    copy_workdir(done, work)
    # 1. one cell's eval.json deleted: the default plans that cell's evaluation and the aggregate over the cells, no
    # training and no other evaluation
    target = cell(work, MODELS[0], "sub", "sft") / "eval.json"
    target.unlink()
    planned = plan(work)
    assert set(planned) == {"evaluate", "aggregate", "all"}, planned.text[-3000:]
    assert {p for p in planned["evaluate"] if p.endswith("eval.json")} == {str(target.relative_to(work))}
    others = {p: p.stat().st_mtime_ns for p in (work / "results" / "cells").rglob("eval.json")}
    # 2. a real failure in the same run (corrupt_checkpoint_config): a new agent on (h64, add) starts from a damaged
    # sft checkpoint; its (h64, sub) twin is healthy. The run also evaluates the deleted cell (its sft, in this matrix).
    cfg = corrupt_checkpoint_config(work, tmp_path)
    first = snakemake(work, "--configfile", str(cfg), check=False)
    assert first.returncode != 0
    assert target.exists(), "the deleted eval.json was not made again"
    assert {p: p.stat().st_mtime_ns for p in others} == others, "another cell was re-evaluated"
    assert (cell(work, MODELS[0], "sub", "grpo-more") / "eval.json").exists(), "the healthy cell finished"
    assert not (cell(work, MODELS[0], "add", "grpo-more") / "checkpoint.json").exists()
    log = (work / "results" / "logs" / "train" / MODELS[0] / "add" / "grpo-more.log").read_text()
    assert "differs from the manifest's sha256" in log and "FAILED" in log
    again = plan(work, "--configfile", str(cfg))
    assert {tuple(p.split("/")[2:5]) for p in again["train"]} == {(MODELS[0], "add", "grpo-more")}
    assert {tuple(p.split("/")[2:5]) for p in again["evaluate"] if p.endswith("eval.json")} == {
        (MODELS[0], "add", "grpo-more")
    }


def test_dry_run_with_slurm_profile_needs_no_cluster(tmp_path):
    """`snakemake -n --profile profiles/slurm` plans without any Slurm controller to ask."""
    site = REPO / "tests" / "slurm" / "localtest.yaml"
    out = snakemake(
        tmp_path,
        "-n",
        "--config",
        f"site={site}",
        profile="profiles/slurm",
        env={"SLURM_CONF": str(tmp_path / "absent.conf")},
    )
    text = out.stdout + out.stderr
    assert "rule train:" in text and "This was a dry-run" in text
