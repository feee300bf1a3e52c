"""A maintenance restart in the middle of a run, on the real test cluster: slurmctld is stopped for 90 s while the
run's jobs run and are queued, then started again. The run completes, no cell fails, no job is submitted or run twice,
and the driver says what it waits for meanwhile (ptflow.cluster.patience, ptflow.ops.driver.SlurmWatch).

It stops the whole cluster's controller, so it takes the cluster for itself (EXCLUSIVE_CLUSTER). It goes out first,
beside the local workflow modules whose CPU work fills its wait (tests/conftest.py, LONG_FIRST).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from ptflow.config.layout import Layout
from ptflow.config.naming import model_to_path
from tests.e2e.smk import REPO, command, job_env

pytestmark = pytest.mark.timeout(2400)
EXCLUSIVE_CLUSTER = True
WORK_ROOT = Path("/var/lib/ptflow-tests")
# Jobs past 1 running stay PENDING (QOSMaxJobsPerUserLimit), so the outage finds jobs both running and queued: the
# run's first two jobs ready together (cache_model and preprocess, both waiting only on the one dataset) are one
# RUNNING and one PENDING, whatever the machine's speed.
QOS = ACCOUNT = "ptflowone"
OUTAGE_SECONDS = 90


def test_run_survives_a_controller_restart(slurm_cluster):
    cluster = slurm_cluster
    # PTFLOW_SLURM_EXISTING=1: a cluster the tests did not start is never stopped, so the proof cannot be made there
    if not cluster.session_owned:
        pytest.fail("only a cluster this test session started may have its controller stopped: run this module "
                    "without PTFLOW_SLURM_EXISTING=1", pytrace=False)  # fmt: skip
    assert cluster.accounting, "needs accounting (a QOS that keeps jobs pending, sacct to count steps)"
    user = cluster.run(["id", "-un"]).stdout.strip()
    for argv in (
        ["add", "qos", QOS],
        ["modify", "qos", QOS, "set", "MaxJobsPerUser=1"],
        ["add", "account", ACCOUNT],
        ["add", "user", user, f"account={ACCOUNT}", f"qos={QOS}", f"defaultqos={QOS}"],
    ):
        cluster.run(["sacctmgr", "-i", *argv], timeout=30)

    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    work = WORK_ROOT / f"outage-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    # One baseline cell of add, its eval.json the run's target; the catalog only add, so the tiny model's tokenizer
    # waits on one dataset. Four Slurm jobs (cache_dataset; cache_model and preprocess, ready together: the outage
    # comes then; evaluate, submitted after it), ~40 CPU-s, instead of the nine (~98 CPU-s) of baseline + sft with
    # hf_cache and aggregate: an SFT training, a second evaluation and two more cheap jobs added no state to the
    # outage (they ran after it, as every job of every other Slurm test does). During the outage the RUNNING job's
    # srun waits for the controller in its shim (ptflow.cluster.patience.run_srun), the PENDING one stays queued,
    # and the driver's squeue waits: each of the run's three kinds of waiting is in it.
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    model = config["models"][0]["id"]
    add = next(e for e in config["evals"] if e["id"] == "add")
    matrix = {"agents": [{"id": "baseline", "kind": "baseline"}], "evals": [add],
              "matrix": {"models": [model], "evals": ["add"]}}  # fmt: skip
    (work / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    site = yaml.safe_load((REPO / "tests" / "slurm" / "localtest.yaml").read_text())
    site.update(account=ACCOUNT, controller_wait_minutes=10)
    (work / "site.yaml").write_text(yaml.safe_dump(site))
    # the default's paths, relative to the work directory (the test site sets none); the target before the options:
    # --configfile and --config take every word after them
    target = Layout(**config["paths"]).eval_json(model_to_path(model), "add", "baseline")
    cmd = command(work, target, "--configfile", str(work / "matrix.yaml"), "--config", f"site={work / 'site.yaml'}",
                  profile="profiles/slurm")  # fmt: skip
    log_path = work / "driver.log"
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    with open(log_path, "w") as log:
        driver = subprocess.Popen(cmd, cwd=work, stdout=log, stderr=subprocess.STDOUT, env=job_env(cluster.env))

    def states() -> list[str]:
        out = cluster.run(["squeue", "-h", "-A", ACCOUNT, "-o", "%T"], timeout=30)
        return out.stdout.split() if out.returncode == 0 else []

    deadline = time.monotonic() + 600
    while not ({"RUNNING", "PENDING"} <= set(states())):
        assert driver.poll() is None, log_path.read_text()[-4000:]
        assert time.monotonic() < deadline, "no moment with jobs both running and pending"
        time.sleep(0.5)
    stopped = time.strftime("%H:%M:%S")
    cluster.stop_controller()
    try:
        time.sleep(OUTAGE_SECONDS)
    finally:
        cluster.start_controller()
    answers = time.strftime("%H:%M:%S")
    rc = driver.wait(timeout=1800)
    text = log_path.read_text()
    assert rc == 0, text[-6000:]
    assert (work / target).is_file(), text[-3000:]
    assert "Error in rule" not in text, "a job failed during the outage"
    assert "ptflow: waiting on Slurm: slurmctld does not answer" in text, "the driver was silent during the outage"
    assert "ptflow: Slurm answers again" in text
    # The plugin reads MinJobAge (scontrol show config) before each status check and falls back to sacct without an
    # answer; the patient scontrol answers with the last configuration, so the profile's squeue stays in use.
    assert "Falling back to 'sacct'" not in text

    # No job submitted twice: one Slurm job per Snakemake job, and Slurm knows no more jobs of the account than the
    # driver submitted. No job ran twice: each job has one step (a step restarted by srun would be a second one).
    submitted = [line for line in text.splitlines() if "has been submitted with SLURM jobid" in line]
    snakemake_ids = [line.split("Job ", 1)[1].split()[0] for line in submitted]
    assert len(snakemake_ids) == len(set(snakemake_ids)), submitted
    sacct = cluster.run(["sacct", "-n", "-P", "-a", "-A", ACCOUNT, "-S", started, "-o", "JobID,State,Start,End"],
                        timeout=60)  # fmt: skip
    rows = [line.split("|") for line in sacct.stdout.splitlines() if "|" in line]
    # what each job and step did around the outage, for the log of a failure (and -rP)
    print(f"controller stopped {stopped}, answered again {answers}; sacct:\n{sacct.stdout}")
    ours = {line.rsplit("jobid ", 1)[1].split()[0].rstrip(".") for line in submitted}
    ids = [row[0] for row in rows]
    jobs = {jid for jid in ids if "." not in jid}  # the account is this test's: every job of it is the run's
    assert jobs == ours, f"Slurm has {sorted(jobs)}, the driver submitted {sorted(ours)}"
    steps = [jid for jid in ids if "." in jid and jid.split(".")[0] in ours and jid.split(".")[1].isdigit()]
    per_job = {j: sum(s.split(".")[0] == j for s in steps) for j in ours}
    assert all(n == 1 for n in per_job.values()), f"steps per job: {per_job}"
    shutil.rmtree(work, ignore_errors=True)
