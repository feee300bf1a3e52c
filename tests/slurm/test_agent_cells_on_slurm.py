"""A PostTrainBench agent cell through snakemake-executor-plugin-slurm on the real test cluster: the scripted agent
(our real program standing in for claude/codex/gemini, which need an API this machine cannot reach) post-trains the
tiny model inside a Slurm job, through the same cli-agent machinery as on the local profile; the cell is evaluated
and judged (stand-in judge) by further Slurm jobs, and the API key travels only in the jobs' environment."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from ptflow.stages.evaluate.run import validate_eval_json
from tests.e2e.smk import REPO, snakemake

pytestmark = pytest.mark.timeout(1500)

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
OVERLAY = REPO / "tests" / "e2e" / "agents_scripted.yaml"
FAKE_KEY = "sk-ptflow-FAKE-slurm-40c2e9"
CELLS = Path("results") / "cells" / "ptflow--tiny-llama-h64" / "add"


@pytest.fixture(scope="module")
def done(slurm_cluster):
    root = Path("/var/lib/ptflow-tests")  # shared-path rule of Slurm sites: not /tmp
    root.mkdir(parents=True, exist_ok=True)
    work = root / f"agents-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    targets = [str(CELLS / "baseline" / "eval.json"), str(CELLS / "scripted" / "eval.json")]
    targets.append(str(CELLS / "scripted" / "judge.json"))
    proc = snakemake(
        work,
        "--configfile",
        str(OVERLAY),
        "--config",
        f"site={SITE}",
        "--",
        *targets,
        env={**slurm_cluster.env, "PTFLOW_FAKE_KEY": FAKE_KEY},
        profile="profiles/slurm",
    )
    yield work, proc
    shutil.rmtree(work, ignore_errors=True)


def test_agent_cell_trains_in_a_slurm_job_and_scores_above_baseline(done, slurm_cluster):
    work, _ = done
    base = json.loads((work / CELLS / "baseline" / "eval.json").read_text())
    data = json.loads((work / CELLS / "scripted" / "eval.json").read_text())
    validate_eval_json(data)
    assert data["status"] == "scored" and data["agent_run"]["exit_code"] == 0
    assert data["metrics"]["value"] > base["metrics"]["value"] + 0.3
    manifest = json.loads((work / CELLS / "scripted" / "checkpoint.json").read_text())
    job_id = manifest["slurm_job_id"]
    assert job_id and data["slurm_job_id"] and data["slurm_job_id"] != job_id  # trained and evaluated as jobs
    assert slurm_cluster.wait_job(job_id, timeout=60) == "COMPLETED"
    assert json.loads((work / CELLS / "scripted" / "judge.json").read_text())["flagged"] is False


def test_key_travels_only_in_the_job_environment(done):
    work, proc = done
    trace = (work / CELLS / "scripted" / "agent" / "stdout.log").read_text()
    assert "keys in my environment: PTFLOW_FAKE_KEY" in trace  # it reached the agent inside the Slurm job
    needle = FAKE_KEY.encode()
    leaks = [str(p) for p in work.rglob("*") if p.is_file() and needle in p.read_bytes()]  # incl. slurm_logs
    assert leaks == [] and FAKE_KEY not in proc.stdout + proc.stderr
