"""`ptflow plan` against what Slurm recorded, job by job, on the test cluster (printed; exit 1 if any differ).

A small matrix (one tiny model, one eval, baseline + sft + grpo: 10 jobs over three partitions, with CPUs, GPUs and
memory that differ per stage and agent) is planned with ``ptflow plan --json`` and then run for real (real job bodies,
a few training steps) through the Slurm profile; then one training again on a site with ``infra_retries``, where the
login-node supervisor submits the GPU job itself. For every planned Slurm job the planned request (partition,
account, CPUs, GPUs, nodes, memory per node, time limit) is printed beside slurmctld's record of the job it became
(``scontrol show job``, polled until every job is there or 60 s pass; the test cluster keeps finished jobs for
MinJobAge = 600 s).

    PTFLOW_SLURM_EXISTING=1 .venv/bin/python bench/plan_vs_slurm.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from datetime import date
from pathlib import Path

import yaml
from _slurm import REPO, WORK_ROOT, SnakemakeRun, attach, run_id_of, scontrol_jobs

from ptflow.cluster.slurm import recorded_request
from ptflow.jobenv import user_name

PTFLOW = str(Path(sys.executable).with_name("ptflow"))
FIELDS = ("partition", "account", "cpus", "gpus", "nodes", "mem_mb", "runtime")
RECORD_PATIENCE_S = 60


def account_not_default(env: dict, fallback: str) -> str:
    """One of the user's accounts other than their default one, so that the recorded account proves the site's account
    reached sbatch (a job without one gets the default); the site's own where there is none or no accounting."""
    sacctmgr = ["sacctmgr", "-n", "-P", "show", "assoc", f"user={user_name()}", "format=account"]
    default = ["sacctmgr", "-n", "-P", "show", "user", user_name(), "format=defaultaccount"]
    try:
        full_env = {**os.environ, **env}
        accounts = subprocess.run(sacctmgr, capture_output=True, text=True, env=full_env, check=True).stdout.split()
        default_account = subprocess.run(default, capture_output=True, text=True, env=full_env, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return fallback
    return next((a for a in sorted(accounts) if a != default_account.strip()), fallback)


def site(work: Path, name: str, account: str, **changes) -> Path:
    """The test cluster's site with CPUs that differ per stage and agent, and the given account."""
    raw = yaml.safe_load((REPO / "tests/slurm/localtest.yaml").read_text())
    raw["account"] = account
    raw["resources"]["train"]["threads"] = 2
    raw["resources"]["evaluate"]["threads"] = 3
    raw["agent_resources"]["trl-grpo"]["threads"] = 4
    raw.update(name=name, **changes)
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def overlay(work: Path) -> Path:
    """One model, one eval, three agents; a few training steps (the requests do not depend on them)."""
    default = yaml.safe_load((REPO / "config/config.yaml").read_text())
    agents = default["agents"]
    for a in agents:
        if a["kind"] == "trl-sft":
            a["params"]["steps"] = 20
        if a["kind"] == "trl-grpo":
            a["params"].update(steps=2, batch_size=4)
    path = work / "matrix.yaml"
    matrix = {"models": [default["models"][0]["id"]], "evals": ["add"], "agents": ["baseline", "sft", "grpo"]}
    path.write_text(yaml.safe_dump({"agents": agents, "matrix": matrix}))
    return path


def plan(work: Path, env: dict, args: list[str]) -> list[tuple[dict, dict]]:
    """(planned job, one Slurm request of it) for every Slurm job the plan says the run makes."""
    argv = [PTFLOW, "plan", "--json", "-s", str(REPO / "Snakefile"), "--directory", str(work)]
    argv += ["--profile", str(REPO / "profiles/slurm"), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **env})
    if proc.returncode != 0:
        raise SystemExit(f"ptflow plan failed:\n{proc.stderr[-3000:]}")
    return [(job, req) for job in json.loads(proc.stdout)["jobs"] for req in job["requests"]]


def comment(job: dict) -> str:
    """The plugin's --comment of a job (plugin 2.8.0: run_job, utils.get_job_wildcards)."""
    wildcards = "_".join(job["wildcards"].values()).replace("/", "_")
    return f"rule_{job['rule']}" + (f"_wildcards_{wildcards}" if wildcards else "")


def records(env: dict, wanted: set[str], key) -> dict[str, dict[str, str]]:
    """slurmctld's records by ``key``, polled until every wanted one is there (bounded)."""
    deadline = time.monotonic() + RECORD_PATIENCE_S
    while True:
        found = {key(j): j for j in scontrol_jobs(env)}
        if wanted <= found.keys() or time.monotonic() > deadline:
            return found
        time.sleep(2)


def compare(planned: list[tuple[dict, dict]], recorded: dict[str, dict[str, str]], key) -> int:
    """Print planned vs recorded per Slurm job; the number of jobs that differ (or were never found)."""
    bad = 0
    print(f"  {'job':64s} {'':9s} " + " ".join(f"{f:>9s}" for f in FIELDS))
    for job, req in planned:
        name = f"{job['rule']}[{','.join(job['wildcards'].values())}] ({req['by']})"
        rec = recorded.get(key(job))
        want = {f: req[f] for f in FIELDS}
        got = recorded_request(rec) if rec else None
        same = got == want
        bad += not same
        print(f"  {name:64s} {'planned':9s} " + " ".join(f"{str(want[f]):>9s}" for f in FIELDS))
        shown = " ".join(f"{str(got[f]):>9s}" for f in FIELDS) if got else "(no Slurm job found)"
        print(f"  {'':64s} {'Slurm':9s} {shown}   {'agree' if same else 'DIFFER'}")
    return bad


def run(work: Path, env: dict, args: list[str], timeout: float) -> bool:
    snakemake = SnakemakeRun(work, env, args)
    try:
        rc = snakemake.wait(timeout=timeout)
    finally:
        snakemake.stop()
    if rc != 0:
        print(f"snakemake failed ({rc}):\n{snakemake.tail()}")
    return rc == 0


def main() -> int:
    import argparse

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # no options; --help says what it does
    cluster, started = attach()
    env = cluster.env
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    work = WORK_ROOT / f"bench-plan-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    bad = 0
    t0 = time.monotonic()
    account = account_not_default(env, yaml.safe_load((REPO / "tests/slurm/localtest.yaml").read_text())["account"])
    print(
        f"{date.today()}: account {account} (not the user's default where they have another); "
        "real job bodies (tiny model, 20 SFT / 2 GRPO steps) on the test cluster"
    )
    try:
        args = ["--configfile", str(overlay(work)), "--config", f"site={site(work, 'plain', account)}"]
        planned = plan(work, env, args)
        if not run(work, env, args, timeout=1500):
            return 1
        run_id = run_id_of(work)
        wanted = {comment(job) for job, _ in planned}
        mine = records(env, wanted, lambda j: j["Comment"] if j.get("JobName") == run_id else "")
        print(f"load average {os.getloadavg()[0]:.1f}; submitted by the slurm plugin (run {run_id}):")
        bad += compare(planned, mine, comment)

        # One training again, on a site whose train rule is a login-node supervisor submitting the GPU job.
        manifest = next((work / "results/cells").glob("*/add/sft/checkpoint.json"))
        manifest.unlink()
        target = str(manifest.relative_to(work))
        supervised = site(work, "supervised", account, infra_retries=1)
        args = ["--configfile", str(overlay(work)), "--config", f"site={supervised}"]
        planned = plan(work, env, [target, *args])
        if not run(work, env, [target, *args], timeout=900):
            return 1
        job_id = json.loads((manifest.parent / "status.json").read_text())["job_id"]
        by_id = records(env, {job_id}, lambda j: j["JobId"])
        print("\nsubmitted by ptflow's supervisor (site with infra_retries):")
        bad += compare(planned, by_id, lambda job: job_id)
        verdict = "every planned request agrees with Slurm" if not bad else f"{bad} job(s) differ"
        print(f"\n{verdict} ({time.monotonic() - t0:.0f} s)")
        return 1 if bad else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if started:
            cluster.stop()


if __name__ == "__main__":
    raise SystemExit(main())
