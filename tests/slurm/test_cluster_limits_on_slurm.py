"""A matrix under a QOS that caps the user's queue at 2 jobs and its GPUs at 1, on the real test cluster (it keeps
accounting and enforces limits): the driver reads the caps from sacctmgr, keeps under the submit cap (nothing is
refused) and leaves the GPU cap, a running cap, to Slurm (GPU jobs past it wait in Slurm's queue, not in ptflow's),
and ``ptflow plan`` said beforehand how long it would take. A second driver of the same user shares the cap: refusals
then happen, and are waited out.

The QOS and its account are the test's own (``ptflowcap``): other tests' jobs use account ``ptflow`` and are not
capped, so the suite's other modules run beside this one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
import yaml

from ptflow.config.layout import Layout
from ptflow.config.naming import model_to_path
from ptflow.ops.driver import PREFLIGHT_REFUSED
from tests.e2e.smk import REPO, command, default_agents, job_env

pytestmark = pytest.mark.timeout(2400)
PTFLOW = str(Path(sys.executable).with_name("ptflow"))
WORK_ROOT = Path("/var/lib/ptflow-tests")
QOS = ACCOUNT = "ptflowcap"
# The lowest caps that keep the order the proofs need (GPU jobs ready at once > submit cap > GPU cap): 3 > 2 > 1.
MAX_SUBMIT, MAX_GPUS = 2, 1
REFUSAL = "QOSMaxSubmitJobPerUserLimit"  # what slurmctld logs for each sbatch past the cap
# What the tiny jobs take on the test cluster (sacct Elapsed, 2026-11-24: cache and preprocess 7-12 s, train and
# evaluate 18-25 s): ptflow plan's estimate counts on these.
EXPECTED = {"cache": 0.2, "preprocess": 0.2, "train": 0.4, "evaluate": 0.4, "aggregate": 0.3}
# The capped matrix: three untrained cells of one (model, eval). Their three evaluations read the same two inputs, so
# they become ready at the same moment: three GPU jobs against a submit cap of 2 and a GPU cap of 1, so both caps
# bind every run (a driver that ignored the submit cap would be refused; GPU jobs past the GPU cap wait in Slurm's
# queue). No training: what the caps prove does not depend on what a job does, and an evaluation costs ~18 CPU-s,
# nearly all of it start-up (bench/RESULTS.md). So three evaluations under caps of 2 and 1 instead of five under 4
# and 2: the same order of group, submit cap and GPU cap, and the same three waves of GPU jobs (the same makespan
# for the plan to estimate), at two evaluations less. The catalog is add alone (the tiny model's tokenizer then waits
# on one dataset, not two): 7 Slurm jobs instead of 11.
CAPPED_AGENTS = [{"id": "baseline", "kind": "baseline"}] + [{"id": f"baseline-{c}", "kind": "baseline"} for c in "bc"]


def sacctmgr(cluster, *args: str) -> None:
    cluster.run(["sacctmgr", "-i", *args], timeout=30)


@pytest.fixture(scope="module")
def capped(slurm_cluster):
    """QOS ptflowcap (MaxSubmitJobsPerUser=2, GrpTRES=gres/gpu=1), the default QOS of user root in account ptflowcap."""
    assert slurm_cluster.accounting, "the test cluster keeps no accounting: no QOS to cap with"
    user = slurm_cluster.run(["id", "-un"]).stdout.strip()
    sacctmgr(slurm_cluster, "add", "qos", QOS)
    sacctmgr(slurm_cluster, "modify", "qos", QOS, "set", f"MaxSubmitJobsPerUser={MAX_SUBMIT}",
             f"GrpTRES=gres/gpu={MAX_GPUS}")  # fmt: skip
    sacctmgr(slurm_cluster, "add", "account", ACCOUNT)
    sacctmgr(slurm_cluster, "add", "user", user, f"account={ACCOUNT}", f"qos={QOS}", f"defaultqos={QOS}")
    shown = slurm_cluster.run(["sacctmgr", "-nP", "show", "qos", QOS, "format=MaxSubmitJobsPU,GrpTRES"]).stdout
    assert shown.split() == [f"{MAX_SUBMIT}|gres/gpu={MAX_GPUS}"], shown
    return slurm_cluster


def make_work(name: str, evals: list[str], agents: list[dict] | None = None, catalog: list[dict] | None = None) -> Path:
    """A work directory: the matrix (one model x ``evals`` x ``agents``, default baseline and sft; ``catalog``: the
    evals it may name, default config.yaml's) and the test site with account ptflowcap."""
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    work = WORK_ROOT / f"{name}-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    model = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["models"][0]["id"]
    if agents is None:
        agents = [a for a in default_agents(sft_steps=150) if a["id"] in ("baseline", "sft")]
    matrix = {"agents": agents, "matrix": {"models": [model], "evals": evals}}
    if catalog is not None:
        matrix["evals"] = catalog
    (work / "matrix.yaml").write_text(yaml.safe_dump(matrix))
    site = yaml.safe_load((REPO / "tests" / "slurm" / "localtest.yaml").read_text())
    site["account"] = ACCOUNT
    for stage, minutes in EXPECTED.items():
        site["resources"].setdefault(stage, {})["expected_runtime"] = minutes
    (work / "site.yaml").write_text(yaml.safe_dump(site))
    return work


def args(work: Path) -> list[str]:
    return ["--configfile", str(work / "matrix.yaml"), "--config", f"site={work / 'site.yaml'}"]


def start_driver(cluster, work: Path, targets: tuple[str, ...] = (), env: dict | None = None) -> subprocess.Popen:
    # targets before the options: --configfile and --config take every word after them
    cmd = command(work, *targets, *args(work), profile="profiles/slurm")
    log = open(work / "driver.log", "w")  # noqa: SIM115 - the child's
    return subprocess.Popen(cmd, cwd=work, stdout=log, stderr=subprocess.STDOUT, env=job_env(env or cluster.env))


def slow_status_query(cluster, work: Path) -> tuple[dict, Path]:
    """The driver's environment with a squeue whose answer to the Slurm plugin's status query (``--format=%i|%T``)
    comes 8 s late, as from a busy slurmctld, and the file that marks such a query in flight. A stand-in delay in
    front of the real squeue; every other squeue call (ptflow's own) goes straight through."""
    path = os.environ["PATH"]
    real = shutil.which("squeue", path=path)
    bindir, mark = work / "slow-squeue", work / "status-query-in-flight"
    bindir.mkdir()
    (bindir / "squeue").write_text(
        f'#!/bin/bash\ncase " $* " in *"%i|%T"*) touch {mark}; sleep 8; rm -f {mark};; esac\nexec {real} "$@"\n'
    )
    (bindir / "squeue").chmod(0o755)
    return {**cluster.env, "PATH": f"{bindir}:{path}"}, mark


class Sampler:
    """Every 0.5 s: the account's jobs in the queue, and the GPUs of those running (squeue's gres column); and how
    often a GPU job was pending in Slurm's queue while the running GPUs were at the cap."""

    def __init__(self, cluster):
        self.cluster, self.max_queued, self.max_gpus, self.samples = cluster, 0, 0, 0
        self.gpu_job_waiting_at_cap = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            out = self.cluster.run(["squeue", "-h", "-A", ACCOUNT, "-o", "%T|%b"], timeout=30)
            if out.returncode == 0:
                rows = [line.split("|") for line in out.stdout.splitlines() if "|" in line]
                gpus = sum(int(m.group(1)) for state, gres in rows if state == "RUNNING"
                           for m in [re.search(r"gpu(?::\w+)?:(\d+)", gres)] if m)  # fmt: skip
                self.max_queued, self.max_gpus = max(self.max_queued, len(rows)), max(self.max_gpus, gpus)
                pending_gpu = any(state == "PENDING" and re.search(r"gpu", gres) for state, gres in rows)
                self.gpu_job_waiting_at_cap += gpus >= MAX_GPUS and pending_gpu
                self.samples += 1
            self._stop.wait(0.5)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)


def refusals(cluster) -> int:
    return (cluster.workdir / "log" / "slurmctld.log").read_text(errors="replace").count(REFUSAL)


def eval_jsons(work: Path) -> list[Path]:
    return sorted((work / "results" / "cells").rglob("eval.json"))


def test_matrix_under_qos_caps_completes_unrefused_in_the_planned_time(capped):
    add = next(e for e in yaml.safe_load((REPO / "config" / "config.yaml").read_text())["evals"] if e["id"] == "add")
    work = make_work("caps", ["add"], agents=CAPPED_AGENTS, catalog=[add])
    plan = subprocess.run(
        [PTFLOW, "plan", "--json", "-d", str(work), "--profile", str(REPO / "profiles" / "slurm"), *args(work)],
        capture_output=True, text=True, env=job_env(capped.env), timeout=300,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    planned = json.loads(plan.stdout)
    limits = planned["limits"]
    assert limits["max_submit_jobs"]["value"] == MAX_SUBMIT and QOS in limits["max_submit_jobs"]["source"]
    assert limits["max_gpus"]["value"] == MAX_GPUS and QOS in limits["max_gpus"]["source"]
    estimate_min = planned["estimate"]["minutes"]
    jobs = planned["totals"]["jobs"]
    # The matrix is bigger than the caps where it matters: more GPU jobs ready at the same moment (the same inputs)
    # than the submit cap, hence than the GPU cap. (A stronger precondition than the former "more than 12 jobs",
    # which a matrix could meet with every stage under the cap.)
    gpu_jobs = [j for j in planned["jobs"] if any(r["gpus"] for r in j["requests"])]
    together = max(Counter(tuple(sorted(j["inputs"])) for j in gpu_jobs).values(), default=0)
    assert together > MAX_SUBMIT > MAX_GPUS, f"only {together} GPU jobs become ready at once"

    before = refusals(capped)
    t0 = time.monotonic()
    with Sampler(capped) as sampler:
        driver = start_driver(capped, work)
        rc = driver.wait(timeout=1800)
    took_min = (time.monotonic() - t0) / 60
    log = (work / "driver.log").read_text()
    assert rc == 0, log[-6000:]
    assert len(eval_jsons(work)) == len(CAPPED_AGENTS), log[-3000:]
    assert "ptflow: cluster limits" in log and f"--jobs={MAX_SUBMIT}" in log
    assert sampler.samples > 50
    assert sampler.max_queued <= MAX_SUBMIT, f"{sampler.max_queued} jobs queued at once"
    assert sampler.max_gpus <= MAX_GPUS, f"{sampler.max_gpus} GPUs in use at once"
    assert sampler.max_gpus == MAX_GPUS, "the GPU cap was never reached: the test would not see a breach"
    assert refusals(capped) == before, "slurmctld refused an sbatch of a driver that knew the cap"
    # the GPU cap is a running cap: ptflow submitted past it, and the extra GPU jobs waited in Slurm's queue
    assert sampler.gpu_job_waiting_at_cap >= 3, "no GPU job ever waited in Slurm's queue at the GPU cap"
    print(f"planned {estimate_min:.1f} min for {jobs} jobs, took {took_min:.1f} min; at most {sampler.max_queued} "
          f"queued and {sampler.max_gpus} GPUs in use ({sampler.samples} samples)")  # fmt: skip
    assert estimate_min / 2 <= took_min <= estimate_min * 2, f"planned {estimate_min:.1f} min, took {took_min:.1f}"
    shutil.rmtree(work, ignore_errors=True)


def test_two_drivers_of_one_user_share_the_cap(capped):
    """Each driver keeps under the cap alone; together they pass it, and the refusals are waited out.

    The drivers run cheap jobs: the HF-cache jobs of the default's two datasets (their targets), all ready at their
    start, two for the first driver and one for the second, so the two want 3 jobs queued at once against a cap of
    2 from their first submissions on. What is under test is the submit path (a refused sbatch waited out, not
    counted as a job's failure), which is the same for every job; the 18 jobs of two whole baseline + sft matrices
    (then six cache jobs against a cap of 4) added nothing to it but CPU."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    layout = Layout(**config["paths"])  # the default's paths, relative to the work directory (the test site sets none)
    markers = tuple(layout.dataset_marker(model_to_path(e["dataset"]["repo"])) for e in config["evals"])
    targets = (markers, markers[:1])
    # together over the cap, each alone at most at it
    assert all(len(t) <= MAX_SUBMIT for t in targets) and sum(map(len, targets)) > MAX_SUBMIT, markers
    works = [make_work(f"caps2-{i}", ["add"], agents=CAPPED_AGENTS[:1]) for i in (1, 2)]
    before = refusals(capped)
    with Sampler(capped) as sampler:
        drivers = [start_driver(capped, w, targets=t) for w, t in zip(works, targets, strict=True)]
        codes = [d.wait(timeout=1800) for d in drivers]
    logs = [(w / "driver.log").read_text() for w in works]
    for work, wanted, code, log in zip(works, targets, codes, logs, strict=True):
        assert code == 0, log[-6000:]
        # every job the driver planned completed: no refused submission was lost
        assert all((work / m).is_file() for m in wanted), log[-3000:]
        assert "Error in rule" not in log, "a refused submission counted as a job's failure"
    assert sampler.max_queued <= MAX_SUBMIT
    refused = refusals(capped) - before
    waited = sum(log.count("the submit cap is full") for log in logs)
    print(f"two drivers: {refused} sbatch refusals, {waited} waits said, at most {sampler.max_queued} queued")
    # Slurm refused some of the second driver's submissions (the cap is shared); each was waited out and said.
    assert refused == 0 or waited > 0, f"{refused} refusals, but no driver said it waited for a slot"
    for work in works:
        shutil.rmtree(work, ignore_errors=True)


def test_site_limit_above_sacctmgr_is_refused_in_one_line(capped):
    work = make_work("caps-bad", ["add"])
    site = yaml.safe_load((work / "site.yaml").read_text())
    site["limits"] = {"max_submit_jobs": MAX_SUBMIT + 1}
    (work / "site.yaml").write_text(yaml.safe_dump(site))
    proc = subprocess.run(
        command(work, *args(work), profile="profiles/slurm"), cwd=work, capture_output=True, text=True,
        env=job_env(capped.env), timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == PREFLIGHT_REFUSED, out[-3000:]
    line = f"limits.max_submit_jobs: {MAX_SUBMIT + 1} is above the cluster's cap of {MAX_SUBMIT} (QOS {QOS}"
    assert line in out, out[-3000:]
    assert "Traceback" not in out and 'File "' not in out
    assert not (work / "results" / "cells").exists(), "nothing may run on a refused site"
    shutil.rmtree(work, ignore_errors=True)


def test_sigterm_stops_the_driver_as_ctrl_c_does(capped):
    """Snakemake alone marks a graceful stop on SIGTERM and waits for every running job (hours of training); the
    driver stops at once instead, and its jobs are cancelled, as on Ctrl-C. The stop comes while the plugin's status
    query is in flight: the executor interface has emptied its list of active jobs then, so Snakemake's own cancel
    scancels nothing (CI, 2026-12-07: job left running); the driver's onerror cancels them by the run's UUID."""
    work = make_work("sigterm", ["add"])
    env, in_flight = slow_status_query(capped, work)
    driver = start_driver(capped, work, env=env)
    log_path = work / "driver.log"
    deadline = time.monotonic() + 600
    run_id = running_since = None
    while True:
        assert driver.poll() is None, log_path.read_text()[-4000:]
        assert time.monotonic() < deadline, "no job of the run started"
        m = re.search(r"SLURM run ID: (\S+)", log_path.read_text())
        run_id = m.group(1) if m else None
        if running_since is None and run_id:
            running = capped.run(["squeue", "-h", "-n", run_id, "-t", "RUNNING", "-o", "%i"]).stdout.split()
            if running:
                # held live (a job here ends in seconds), as hours of training would be
                capped.run(["scontrol", "suspend", ",".join(running)], timeout=30)
                running_since = time.time()
        # a status query begun after a job ran: that job was in the list the executor emptied for it
        elif running_since is not None and in_flight.exists() and in_flight.stat().st_mtime > running_since:
            break
        time.sleep(0.5)
    driver.send_signal(signal.SIGTERM)
    rc = driver.wait(timeout=120)
    text = log_path.read_text()
    assert rc != 0, text[-3000:]
    assert "ptflow: SIGTERM: stopping as on Ctrl-C" in text
    said = r"ptflow: the run stopped with \d+ of its Slurm job\(s\) still live; scancel \d+"
    assert re.search(said, text), text[-3000:]
    left = capped.run(["squeue", "-h", "-n", run_id, "-t", "PENDING,RUNNING,SUSPENDED", "-o", "%i"]).stdout.split()
    assert left == [], f"jobs of the stopped run still queued or running: {left}"
    shutil.rmtree(work, ignore_errors=True)
