"""The workflow through snakemake-executor-plugin-slurm on the real two-node test cluster."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ptflow.cluster import ownership, slurm
from ptflow.config.load import merged_config
from ptflow.config.model import build_config
from ptflow.config.sites import load_site
from ptflow.ops.driver import PREFLIGHT_REFUSED
from ptflow.stages.matrix_score import SUMMARY_COLUMNS
from tests.e2e.smk import REPO, command, default_agents, plan, snakemake
from tests.e2e.test_default_matrix import MODELS, corrupt_checkpoint_config

# The module's fixture runs the default matrix on one model and one eval through Slurm: minutes on 2 cores.
pytestmark = pytest.mark.timeout(2400)

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
# Not under /tmp: preflight refuses node-local paths for Slurm sites, as it should on a real cluster.
WORK_ROOT = Path("/var/lib/ptflow-tests")
RULE_STAGE = {
    "cache_dataset": "cache",
    "cache_model": "cache",
    "hf_cache": "cache",
    "preprocess": "preprocess",
    "train": "train",
    "evaluate": "evaluate",
    "aggregate": "aggregate",
}


# The module's agents: the default's, SFT at 110 steps, enough to score clearly above the baseline (the aggregate's
# reference weights need a gap). On h64/add, seed 0: 50 steps 0.06, 80 steps 0.05, 110 steps 0.17, 150 steps 0.30,
# baseline 0 (20 steps scored 0). Submission, requests and reruns are under test here, not what SFT learns
# (tests/e2e/test_default_matrix.py tests that on the default itself).
AGENTS = default_agents(sft_steps=110)


def write_matrix_overlay(work: Path) -> None:
    """The module's matrix: the default's first model and first eval (`add`) with AGENTS. Every rule is still a Slurm
    job (10 of them); a second eval would add 7 jobs that no assertion needs. The eval list itself is cut to `add`,
    not only the matrix's selection: corrupt_checkpoint_config's overlay selects `evals: all`."""
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    evals = [e for e in default["evals"] if e["id"] == "add"]
    overlay = {"agents": AGENTS, "evals": evals, "matrix": {"models": [default["models"][0]["id"]], "evals": "all"}}
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


def run_id(proc) -> str:
    """The plugin names every job of one Snakemake run after the run's UUID, and logs it."""
    m = re.search(r"SLURM run ID: (\S+)", proc.stdout + proc.stderr)
    assert m, "snakemake did not report its SLURM run ID"
    return m.group(1)


@pytest.fixture(scope="module")
def matrix_done(slurm_cluster, work):
    write_matrix_overlay(work)
    out = slurm_run(work, slurm_cluster, *configfiles(work))
    # Only this run's jobs: the cluster may be shared with other tests' jobs.
    ours = [j for j in scontrol_jobs(slurm_cluster) if j.get("JobName") == run_id(out)]
    return work, ours, out


def test_every_rule_is_a_slurm_job_and_results_match_local_shape(matrix_done):
    work, jobs, _ = matrix_done
    rules = [j["Comment"].split("_wildcards_")[0].removeprefix("rule_") for j in jobs]
    assert sorted(set(rules)) == sorted(RULE_STAGE)
    assert len(jobs) == 10, "1 dataset, 1 model, 1 marker, 1 preprocess, 2 train, 3 evaluate, 1 aggregate"
    assert all(j["JobState"] == "COMPLETED" for j in jobs), [(j["JobId"], j["JobState"]) for j in jobs]
    df = pd.read_csv(work / "results" / "summary.csv")
    assert list(df.columns) == SUMMARY_COLUMNS and len(df) == 3
    # the jobs' GPU-hours came from Slurm's accounting (the test cluster keeps one)
    assert set(df["gpu_hours_source"]) == {"Slurm accounting"}
    ids = {j["JobId"] for j in jobs}
    for p in (work / "results" / "cells").rglob("eval.json"):
        assert json.loads(p.read_text())["slurm_job_id"] in ids


def test_recorded_request_equals_site(matrix_done):
    work, jobs, _ = matrix_done
    site = load_site(str(SITE), REPO)
    cfg = build_config(merged_config(REPO))
    for job in jobs:
        rule, _, wc = job["Comment"].removeprefix("rule_").partition("_wildcards_")
        agent = cfg.agents[wc.rsplit("_", 1)[1]] if rule == "train" else None
        req = site.request(RULE_STAGE[rule], agent)
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


def with_healthy_twin(cfg: Path) -> Path:
    """corrupt_checkpoint_config's overlay plus `grpo-twin`: the failing agent's twin (same kind and params), started
    from the intact grpo checkpoint instead of the damaged sft one. It stands in for the other eval's grpo-more cell
    (the module runs one eval): a healthy train -> evaluate chain in the same run, whose evaluate job is submitted
    after the failure, so keep-going on Slurm is what lets it finish."""
    crash = yaml.safe_load(cfg.read_text())
    (more,) = [a for a in crash["agents"] if a["id"] == "grpo-more"]
    crash["agents"].append({**more, "id": "grpo-twin", "from": "grpo"})
    crash["matrix"]["agents"].append("grpo-twin")
    twin = cfg.with_name("crash-twin.yaml")
    twin.write_text(yaml.safe_dump(crash))
    return twin


def test_failed_cell_is_the_only_one_rerun(slurm_cluster, matrix_done, tmp_path):
    work, _, _ = matrix_done
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


def test_scancelled_job_is_retried_and_completes(slurm_cluster, matrix_done):
    """Needs the profile's squeue status command: with sacct, plugin 2.8.0 never matches "CANCELLED by <uid>" and
    waits on the cancelled job forever (this test's earlier timeout)."""
    work, _, _ = matrix_done
    target = work / "results" / "cells" / "ptflow--tiny-llama-h64" / "add" / "baseline" / "eval.json"
    target.unlink()
    before = job_ids(slurm_cluster, work)
    # the cell alone as the target: the aggregate job a whole-matrix run would add proves nothing here
    args = ("--config", f"site={SITE}", *configfiles(work), "--retries", "2", "--", str(target.relative_to(work)))
    proc = subprocess.Popen(
        command(work, *args, profile="profiles/slurm"),
        cwd=work,
        env={**os.environ, **slurm_cluster.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    cancelled = None
    deadline = time.monotonic() + 180
    while cancelled is None and time.monotonic() < deadline:
        for j in scontrol_jobs(slurm_cluster):
            mine = j.get("WorkDir") == str(work) and j["JobId"] not in before
            if mine and j["JobState"] in ("RUNNING", "PENDING") and "evaluate" in j["Comment"]:
                slurm_cluster.run(["scancel", j["JobId"]], check=True)
                cancelled = j["JobId"]
                break
        time.sleep(0.5)
    out, _ = proc.communicate(timeout=600)
    assert cancelled, "never saw the evaluate job to cancel"
    assert proc.returncode == 0, out[-3000:]
    assert slurm_cluster.wait_job(cancelled, timeout=60) == "CANCELLED"
    assert target.exists()
    retried = [
        j
        for j in scontrol_jobs(slurm_cluster)
        if j.get("WorkDir") == str(work)
        and j["JobId"] not in before
        and j["JobId"] != cancelled
        and "evaluate" in j["Comment"]
    ]
    assert [j["JobState"] for j in retried] == ["COMPLETED"]


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
# so a group of edits costs one refused Snakemake run instead of one each; every edit's message must still be a
# problem of its own, and nothing may be submitted. Two groups: node-local and $HOME scratch are both paths.scratch.
PREFLIGHT_EDITS = {
    "cluster-and-node-local": [
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
                # the site does not declare short's limit (a declared one is refused when the site is read): the
                # live cluster's MaxTime is what preflight finds
                "partitions": {"short": {"cpu_only": True}},
                "resources": {"preprocess": {"partition": "short", "runtime": 10}},
            },
            "10 min exceeds partition short's MaxTime of 5 min",
        ),
        ({"resources": {"evaluate": {"gpus": 8}}}, "8 GPUs per node, but partition gpu's nodes have at most 4"),
        ({"paths": {"scratch": "/tmp/ptflow-node-local"}}, "is node-local storage"),
    ],
    "uri-and-home": [
        ({"paths": {"hf_home": "file:///shared/hf"}}, "file:// URI"),
        ({"forbid_home": True, "paths": {"scratch": "HOME/ptflow"}}, "is under $HOME"),
    ],
}


@pytest.mark.parametrize("group", sorted(PREFLIGHT_EDITS))
def test_preflight_rejects_with_nothing_submitted(slurm_cluster, tmp_path, group):
    site = yaml.safe_load(SITE.read_text())
    for edit, _ in PREFLIGHT_EDITS[group]:
        for key, value in edit.items():
            if isinstance(value, dict) and isinstance(site.get(key), dict):
                for k, v in value.items():
                    site[key].setdefault(k, {}).update(v) if isinstance(v, dict) else site[key].__setitem__(k, v)
            else:
                site[key] = value
    if "paths" in site and site["paths"].get("scratch", "").startswith("HOME"):
        site["paths"]["scratch"] = site["paths"]["scratch"].replace("HOME", os.path.expanduser("~"))
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
        found = [next((i for i, p in enumerate(problems) if expect in p), None) for _, expect in PREFLIGHT_EDITS[group]]
        assert None not in found and len(set(found)) == len(found), (found, problems)
        assert job_ids(slurm_cluster, work) == set(), "a job was submitted despite the preflight error"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_supervised_train_is_submitted_by_the_login_node_rule(slurm_cluster, matrix_done, tmp_path):
    """A site with infra_retries (pyxis): `train` runs on the login node as a supervisor that sbatches the GPU job
    with the site's request, waits, and leaves status.json beside the manifest (ptflow.cluster.supervise)."""
    work, _, _ = matrix_done
    site = yaml.safe_load(SITE.read_text())
    site.update(name="supervised", infra_retries=2, internal_timeout_fraction=0.95)
    site["resources"]["train"]["threads"] = 2  # the submitted job's CPUs; the login-node supervisor itself takes 1
    site_file = tmp_path / "supervised.yaml"
    site_file.write_text(yaml.safe_dump(site))
    # SFT at 10 steps: the submission, request and status are under test, not the training (at the module's steps, on
    # 2 threads, this one job cost 89 CPU-s). Only this manifest is the target, and no later test reads the cell.
    short = tmp_path / "short-sft.yaml"
    short.write_text(yaml.safe_dump({"agents": default_agents(sft_steps=10)}))
    cell = work / "results" / "cells" / "ptflow--tiny-llama-h64" / "add" / "sft"
    manifest = cell / "checkpoint.json"
    manifest.unlink()
    target = str(manifest.relative_to(work))
    out = slurm_run(work, slurm_cluster, *configfiles(work, short), "--", target, site=site_file)
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
