"""The workflow through snakemake-executor-plugin-slurm on the real two-node test cluster."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ptflow.cluster import ownership, slurm
from ptflow.config.load import merged_config
from ptflow.config.matrix import build_config
from ptflow.config.sites import load_site
from ptflow.ops.driver import PREFLIGHT_REFUSED
from ptflow.results.tables import SUMMARY_COLUMNS
from tests.e2e.smk import REPO, command, default_agents, job_env, plan, snakemake
from tests.e2e.test_default_matrix import MODELS, corrupt_checkpoint_config

# The module's fixture runs one cell of the default matrix (every rule once) through Slurm: minutes on 2 cores.
pytestmark = pytest.mark.timeout(2400)

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
# Not under /tmp: preflight refuses node-local paths for Slurm sites, as it should on a real cluster.
WORK_ROOT = Path("/var/lib/ptflow-tests")
# The rules the plugin submits (hf_cache, the whole cache's marker, runs on the login node: LOGIN_NODE_RULES)
RULE_STAGE = {
    "cache_dataset": "cache",
    "cache_model": "cache",
    "preprocess": "preprocess",
    "train": "train",
    "evaluate": "evaluate",
    "aggregate": "aggregate",
}


# The module's agents: the default's, SFT at 10 steps. Submission, requests and reruns are under test here, not what
# SFT learns: tests/e2e/test_default_matrix.py::test_leaderboard_shows_learning proves that sft beats the baseline (on
# the default itself). Nothing here reads a score, and with one eval the aggregate needs no gap between the baseline and
# sft (one eval weighs 1, ptflow.results.scoring._weights), so the 110 steps it once had bought nothing (8 CPU-s).
AGENTS = default_agents(sft_steps=10)
# The base model's zero-shot score on `add` (measured: the baseline cell of h64/add scores 0), as a reference table:
# the aggregate takes a model's base score from its baseline cell, else from this table, so the matrix needs no
# baseline cell. Evaluating a base model on Slurm is proved by test_cluster_limits_on_slurm and
# test_posttrainbench_checkout_on_slurm (their baseline cells); this module's evaluation is of a trained checkpoint.
BASE_SCORES = {"zeroshot": {"tiny-llama-h64": {"add": 0.0}}}


def write_matrix_overlay(work: Path) -> None:
    """The module's matrix: one cell, the default's first model, its first eval (`add`) and `sft`. Every rule but
    hf_cache (login node) is a Slurm job, each once (6 jobs): a baseline cell (an evaluation, 20 CPU-s) or a grpo cell
    (a training and an evaluation, 35 CPU-s) would only add more of the same jobs; the failed-cell run trains grpo
    agents, and its test checks their request (agent_resources). The eval list itself is cut to `add`, not only the
    matrix's selection: corrupt_checkpoint_config's overlay selects `evals: all`."""
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    evals = [e for e in default["evals"] if e["id"] == "add"]
    overlay = {
        "agents": AGENTS,
        "evals": evals,
        "matrix": {"models": [default["models"][0]["id"]], "evals": "all", "agents": ["sft"]},
        "scoring": {"reference": BASE_SCORES},
    }
    (work / "matrix.yaml").write_text(yaml.safe_dump(overlay))


def configfiles(work: Path, *extra: Path) -> list[str]:
    """One --configfile option for the module's overlay and any more (a second option would replace the first)."""
    return ["--configfile", str(work / "matrix.yaml"), *map(str, extra)]


def slurm_run(work: Path, cluster, *args: str, check: bool = True, site: Path = SITE):
    return snakemake(work, "--config", f"site={site}", *args, check=check, env=cluster.env, profile="profiles/slurm")


def slurm_plan(work: Path, cluster, *args: str):
    return plan(work, "--config", f"site={SITE}", *args, env=cluster.env, profile="profiles/slurm")


def scontrol_jobs(cluster) -> list[dict]:
    """Every job slurmctld still holds (MinJobAge keeps finished ones), as Key=Value dicts."""
    out = cluster.run(["scontrol", "show", "job", "-o"], check=True).stdout
    jobs = []
    for line in out.splitlines():
        fields = dict(m.groups() for m in re.finditer(r"(\w[\w:/]*)=(\S*)", line))
        if fields.get("JobId"):
            jobs.append(fields)
    return jobs


def job_ids(cluster, work: Path) -> set[str]:
    """Ids of the jobs submitted from ``work`` (the plugin submits with -D <workdir>; the cluster may be shared)."""
    return {j["JobId"] for j in scontrol_jobs(cluster) if j.get("WorkDir") == str(work)}


@pytest.fixture(scope="module")
def work():
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    path = WORK_ROOT / f"run-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_id(text: str) -> str:
    """The plugin names every job of one Snakemake run after the run's UUID, and logs it."""
    m = re.search(r"SLURM run ID: (\S+)", text)
    assert m, "snakemake did not report its SLURM run ID"
    return m.group(1)


def rule_of(job: dict) -> str:
    return job["Comment"].split("_wildcards_")[0].removeprefix("rule_")


def cancel_first_job(cluster, work: Path, proc: subprocess.Popen, timeout: float = 180) -> dict | None:
    """scancel the first job submitted from ``work`` (the run's cache_dataset job, its only root) while it is pending
    or running; the job as it was seen then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        for j in scontrol_jobs(cluster):
            if j.get("WorkDir") == str(work) and j["JobState"] in ("RUNNING", "PENDING"):
                cluster.run(["scancel", j["JobId"]], check=True)
                return j
        time.sleep(0.5)
    return None


@dataclass
class MatrixRun:
    work: Path
    jobs: list[dict]  # every job of the run, the cancelled one included, as scontrol showed them at its end
    out: str
    cancelled: str | None  # the job scancelled while the run went on (test_scancelled_job_is_retried_and_completes)


@pytest.fixture(scope="module")
def matrix_done(slurm_cluster, work):
    """The module's matrix run, during which its first job is scancelled: the plugin must resubmit it (the profile's
    retries) and the run still complete. The cancellation rides on this run instead of a run of its own, which cost
    an evaluation cancelled and one redone (25 CPU-s); a cache job is as much a job of the plugin as an evaluation."""
    write_matrix_overlay(work)
    args = ("--config", f"site={SITE}", *configfiles(work))
    # the run's output to a file, not a pipe: nobody reads a pipe while the watcher polls, and a full one blocks
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            command(work, *args, profile="profiles/slurm"),
            cwd=work,
            env=job_env(slurm_cluster.env),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            seen = cancel_first_job(slurm_cluster, work, proc)
            proc.wait(timeout=1800)
        finally:
            if proc.poll() is None:
                proc.kill()
        log.seek(0)
        out = log.read()
    assert proc.returncode == 0, out[-6000:]
    # Only this run's jobs: the cluster may be shared with other tests' jobs.
    ours = [j for j in scontrol_jobs(slurm_cluster) if j.get("JobName") == run_id(out)]
    return MatrixRun(work, ours, out, seen and seen["JobId"])


def test_every_rule_is_a_slurm_job_and_results_match_local_shape(matrix_done):
    work, jobs, cancelled = matrix_done.work, matrix_done.jobs, matrix_done.cancelled
    done = [j for j in jobs if j["JobId"] != cancelled]
    assert sorted(rule_of(j) for j in done) == sorted(RULE_STAGE), "every rule once, each a Slurm job"
    # 1 dataset (and its cancelled first job), 1 model, 1 preprocess, 1 train, 1 evaluate, 1 aggregate
    assert len(jobs) == 7, [(rule_of(j), j["JobState"]) for j in jobs]
    # the whole cache's marker: made by the driver on the login node, no Slurm job
    assert re.search(r"localrule hf_cache:", matrix_done.out), matrix_done.out[-3000:]
    assert json.loads((work / "results" / "cache" / "hf_cache.json").read_text())["repos"]
    assert all(j["JobState"] == "COMPLETED" for j in done), [(j["JobId"], j["JobState"]) for j in done]
    df = pd.read_csv(work / "results" / "summary.csv")
    assert list(df.columns) == SUMMARY_COLUMNS and len(df) == 1
    # the jobs' GPU-hours came from Slurm's accounting (the test cluster keeps one)
    assert set(df["gpu_hours_source"]) == {"Slurm accounting"}
    ids = {j["JobId"] for j in done}
    evals = list((work / "results" / "cells").rglob("eval.json"))
    assert len(evals) == 1
    for p in evals:
        assert json.loads(p.read_text())["slurm_job_id"] in ids


def assert_requests_equal_site(jobs: list[dict], cfg, retried: set[str] = frozenset()) -> None:
    """Each job's request as Slurm recorded it is the site's request for its rule (and agent); jobs in ``retried`` are
    second attempts: the site's request grown by retry_growth (Request.scaled)."""
    site = load_site(str(SITE), REPO)
    for job in jobs:
        rule, _, wc = job["Comment"].removeprefix("rule_").partition("_wildcards_")
        agent = cfg.agents[wc.rsplit("_", 1)[1]] if rule == "train" else None
        req = site.request(RULE_STAGE[rule], agent).scaled(2 if job["JobId"] in retried else 1)
        where = f"job {job['JobId']} ({rule} {wc})"
        assert job["Partition"] == req["partition"], where
        assert job["Account"] == "ptflow", where
        assert slurm.parse_minutes(job["TimeLimit"]) == req["runtime"], where
        assert job["MinMemoryNode"] == f"{req['mem_mb']}M", where
        assert int(job["NumNodes"].split("-")[0]) == req.get("nodes", 1), where
        assert int(job["CPUs/Task"]) == req["threads"], where
        gres = job.get("TresPerNode", "")
        if req.get("gpus"):
            assert gres == f"gres:gpu:{req['gpu_type']}:{req['gpus']}", where
        else:
            assert "gpu" not in gres, where
        if "tmp_mb" in req:
            assert job["MinTmpDiskNode"] in (f"{req['tmp_mb']}M", f"{req['tmp_mb'] // 1024}G"), where


def test_recorded_request_equals_site(matrix_done):
    jobs, cancelled = matrix_done.jobs, matrix_done.cancelled
    cfg = build_config(merged_config(REPO, [matrix_done.work / "matrix.yaml"]))
    # the cancelled job's resubmission is its rule's second attempt: runtime and memory grown by the site's growth
    comment = next((j["Comment"] for j in jobs if j["JobId"] == cancelled), None)
    retried = {j["JobId"] for j in jobs if j["Comment"] == comment and j["JobId"] != cancelled}
    assert_requests_equal_site(jobs, cfg, retried)
    # the train job trained on what it asked the site for (trl_common.device_args): 1 GPU, a placeholder GPU here
    # that CUDA does not see, so its CPUs, and its log says why
    (log,) = (matrix_done.work / "results" / "logs" / "train").rglob("*.log")
    text = log.read_text()
    assert "asked the site for 1 GPU(s) (resources.train)" in text and "training on cpu (fp32)" in text, text[-3000:]


def test_scancelled_job_is_retried_and_completes(slurm_cluster, matrix_done):
    """Needs the profile's squeue status command: with sacct, plugin 2.8.0 never matches "CANCELLED by <uid>" and
    waits on the cancelled job forever (this test's earlier timeout). The fixture cancelled the run's first job while
    the run went on, and the run ended with exit status 0 (asserted there)."""
    jobs, cancelled = matrix_done.jobs, matrix_done.cancelled
    assert cancelled, "never saw the run's first job to cancel"
    assert slurm_cluster.wait_job(cancelled, timeout=60) == "CANCELLED"
    (job,) = [j for j in jobs if j["JobId"] == cancelled]
    assert rule_of(job) == "cache_dataset", job["Comment"]
    retried = [j for j in jobs if j["Comment"] == job["Comment"] and j["JobId"] != cancelled]
    assert [j["JobState"] for j in retried] == ["COMPLETED"]
    dataset = job["Comment"].partition("_wildcards_")[2]
    assert (matrix_done.work / "results" / "cache" / "datasets" / f"{dataset}.json").exists()


def with_healthy_twin(cfg: Path) -> Path:
    """corrupt_checkpoint_config's overlay, with the module's matrix (no baseline cell), plus `grpo-twin`: the failing
    agent's twin (same kind and params), started from the base model instead of the damaged sft checkpoint (the module
    has no grpo cell to start from). It stands in for the other eval's grpo-more cell (the module runs one eval): a
    healthy train -> evaluate chain in the same run, whose evaluate job is submitted after the failure (grpo-more fails
    on its checksum before it imports the trainer; the twin trains), so keep-going on Slurm is what lets it finish."""
    crash = yaml.safe_load(cfg.read_text())
    (more,) = [a for a in crash["agents"] if a["id"] == "grpo-more"]
    twin_agent = {"id": "grpo-twin", "kind": more["kind"], "params": dict(more["params"])}  # no "from": the base model
    crash["agents"].append(twin_agent)
    crash["matrix"]["agents"] = [a for a in crash["matrix"]["agents"] if a != "baseline"] + ["grpo-twin"]
    twin = cfg.with_name("crash-twin.yaml")
    twin.write_text(yaml.safe_dump(crash))
    return twin


def test_failed_cell_is_the_only_one_rerun(slurm_cluster, matrix_done, tmp_path):
    work = matrix_done.work
    cfg = with_healthy_twin(corrupt_checkpoint_config(work, tmp_path, AGENTS))
    first = slurm_run(work, slurm_cluster, *configfiles(work, cfg), "--retries", "0", check=False)
    assert first.returncode != 0
    cells = work / "results" / "cells" / MODELS[0]
    assert (cells / "add" / "grpo-twin" / "eval.json").exists(), "the healthy cell finished"
    assert not (cells / "add" / "grpo-more" / "checkpoint.json").exists()
    again = slurm_plan(work, slurm_cluster, *configfiles(work, cfg))
    assert {tuple(p.split("/")[2:5]) for p in again["train"]} == {(MODELS[0], "add", "grpo-more")}
    assert {tuple(p.split("/")[2:5]) for p in again["evaluate"] if p.endswith("eval.json")} == {
        (MODELS[0], "add", "grpo-more")
    }
    # The two grpo trainings are the module's only jobs of kind trl-grpo: their request is the site's agent_resources
    # of that kind (2 GPUs, more memory and time), as test_recorded_request_equals_site checks the main run's jobs.
    trains = [j for j in scontrol_jobs(slurm_cluster) if j.get("JobName") == run_id(first.stdout + first.stderr)]
    trains = [j for j in trains if rule_of(j) == "train"]
    assert sorted(j["Comment"].rsplit("_", 1)[1] for j in trains) == ["grpo-more", "grpo-twin"]
    assert_requests_equal_site(trains, build_config(merged_config(REPO, [work / "matrix.yaml", cfg])))


def test_two_node_rule_runs_once_and_reaches_both_nodes(slurm_cluster, work):
    mn = work / "multinode"
    mn.mkdir()
    out = snakemake(
        mn,
        "--config",
        f"site={SITE}",
        env=slurm_cluster.env,
        profile="profiles/slurm",
        snakefile=REPO / "tests" / "slurm" / "multinode.smk",
    )
    body = (mn / "probe" / "body.txt").read_text().splitlines()
    assert len(body) == 1, f"the rule body ran {len(body)} times: {body}"
    reached = set((mn / "probe" / "srun.txt").read_text().split())
    assert reached == set(slurm_cluster.hostnames), out.stdout[-2000:]


# Each (site edit, problem it must raise). The preflight reports every problem at once (run_preflight sums its checks),
# so the edits cost one refused Snakemake run instead of one each; every edit's message must still be a problem of its
# own, and nothing may be submitted. The path checks each take a different paths key (a key gets one path problem):
# node-local scratch, results under $HOME (forbid_home checks results and scratch alike), hf_home a file:// URI.
PREFLIGHT_EDITS = [
    (
        {
            "partitions": {"nonexistent": {"max_runtime": 10}},
            "resources": {"aggregate": {"partition": "nonexistent"}},
        },
        "'nonexistent' does not exist",
    ),
    ({"account": "other"}, "account 'other' is not one of user"),
    (
        {
            # the site does not declare short's limit (a declared one is refused when the site is read): the live
            # cluster's MaxTime is what preflight finds
            "partitions": {"short": {"cpu_only": True}},
            "resources": {"preprocess": {"partition": "short", "runtime": 10}},
        },
        "10 min exceeds partition short's MaxTime of 5 min",
    ),
    ({"resources": {"evaluate": {"gpus": 8}}}, "8 GPUs per node, but partition gpu's nodes have at most 4"),
    ({"paths": {"scratch": "/tmp/ptflow-node-local"}}, "is node-local storage"),
    ({"paths": {"hf_home": "file:///shared/hf"}}, "file:// URI"),
    ({"forbid_home": True, "paths": {"results": "HOME"}}, "is under $HOME"),  # HOME: a new directory there (below)
]


def test_preflight_rejects_with_nothing_submitted(slurm_cluster, tmp_path):
    site = yaml.safe_load(SITE.read_text())
    for edit, _ in PREFLIGHT_EDITS:
        for key, value in edit.items():
            if isinstance(value, dict) and isinstance(site.get(key), dict):
                for k, v in value.items():
                    site[key].setdefault(k, {}).update(v) if isinstance(v, dict) else site[key].__setitem__(k, v)
            else:
                site[key] = value
    # a directory of its own under $HOME, removed below whatever the run leaves there
    home_results = Path(os.path.expanduser("~")) / f"ptflow-preflight-{uuid.uuid4().hex[:8]}"
    site["paths"]["results"] = str(home_results)
    site_file = tmp_path / "site.yaml"
    site_file.write_text(yaml.safe_dump(site))
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    work = WORK_ROOT / f"pre-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    try:
        out = slurm_run(work, slurm_cluster, site=site_file, check=False)
        text = out.stdout + out.stderr
        assert out.returncode == PREFLIGHT_REFUSED, text[-3000:]
        assert 'File "' not in text and "Traceback" not in text, text[-3000:]  # the problems alone
        # the refusal's list (ptflow.cluster.preflight.format_problems), not its notes: each edit is a problem itself
        m = re.search(r"preflight found (\d+) problem\(s\); nothing was submitted:\n((?:  - .*\n?)+)", text)
        assert m, text[-3000:]
        problems = [line.removeprefix("  - ") for line in m.group(2).splitlines()]
        assert int(m.group(1)) == len(problems), text[-3000:]
        found = [next((i for i, p in enumerate(problems) if expect in p), None) for _, expect in PREFLIGHT_EDITS]
        assert None not in found and len(set(found)) == len(found), (found, problems)
        assert job_ids(slurm_cluster, work) == set(), "a job was submitted despite the preflight error"
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(home_results, ignore_errors=True)


def test_supervised_train_is_submitted_by_the_login_node_rule(slurm_cluster, matrix_done, tmp_path):
    """A site with infra_retries (pyxis): `train` runs on the login node as a supervisor that sbatches the GPU job
    with the site's request, waits, and leaves status.json beside the manifest (ptflow.cluster.supervise)."""
    work = matrix_done.work
    site = yaml.safe_load(SITE.read_text())
    site.update(name="supervised", infra_retries=2, internal_timeout_fraction=0.95)
    site["resources"]["train"]["threads"] = 2  # the submitted job's CPUs; the login-node supervisor itself takes 1
    site_file = tmp_path / "supervised.yaml"
    site_file.write_text(yaml.safe_dump(site))
    # The module's SFT at 10 steps (AGENTS): the submission, request and status are under test, not the training (at
    # 110 steps, on 2 threads, this one job cost 89 CPU-s). Only this manifest is the target; no later test reads it.
    cell = work / "results" / "cells" / "ptflow--tiny-llama-h64" / "add" / "sft"
    manifest = cell / "checkpoint.json"
    manifest.unlink()
    target = str(manifest.relative_to(work))
    out = slurm_run(work, slurm_cluster, *configfiles(work), "--", target, site=site_file)
    text = out.stdout + out.stderr
    assert re.search(r"localrule train_supervised:", text), text[-3000:]
    status = json.loads((cell / "status.json").read_text())
    assert status["status"] == "succeeded" and status["attempt"] == 1, status
    job_id = status["job_id"]
    assert json.loads(manifest.read_text())["slurm_job_id"] == job_id
    (job,) = [j for j in scontrol_jobs(slurm_cluster) if j["JobId"] == job_id]
    request = load_site(str(site_file), REPO / "config" / "sites").request("train")
    # named and commented as the rule's job of this directory: ptflow status/cancel and a restarted driver see it
    assert job["JobName"] == ownership.owned_job_name(work)
    assert job["Comment"] == "rule_train_wildcards_ptflow--tiny-llama-h64_add_sft"
    assert job["Partition"] == request["partition"] and job["TimeLimit"] == f"00:{request['runtime']}:00"
    assert job["NumCPUs"] == "2", job
    assert "gres/gpu:h100=1" in job.get("TRES", job.get("ReqTRES", "")) or "gpu:h100:1" in job.get("TresPerNode", "")
    batch = (cell / "slurm" / "train.sbatch").read_text()
    assert f"internal_timeout={int(request['runtime'] * 60 * 0.95)}" in batch
