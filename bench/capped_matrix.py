"""A matrix of short jobs under a submit cap, on the Slurm test cluster (tests/support/local_slurm.py): printed, not
asserted.

--jobs-count (200) independent jobs of --sleep (20) s each (bench/capped.smk, BENCH ONLY) through the Slurm profile
with ``--jobs 250``, twice:

1. capped: account ``benchcap``, whose QOS caps the user at --cap (20) jobs queued or running (MaxSubmitJobsPerUser).
   The profile's --jobs is above it, so the cap the run keeps to is the one ptflow reads from sacctmgr at the
   driver's start (ptflow.cluster.limits: read_limits, driver_caps, apply), with the patient sbatch in front
   (ptflow.cluster.patience).
2. uncapped: account ``ptflow`` (QOS normal, no caps): the same matrix as fast as the cluster runs it.

Per run: wall time (Snakemake's start to its exit), the most of the run's jobs in the queue at once (squeue every
0.5 s), the sbatch refusals slurmctld logged meanwhile (QOSMaxSubmitJobPerUserLimit), and the median job time (sacct
Elapsed) -> ideal = ceil(jobs / slots) x median job time, slots being the cap (capped) or the CPUs of partition debug
(uncapped: every job holds one CPU). Beside them, where the time between waves goes: a freed slot's job end to the
next submission, and submission to start (sacct's Submit/Start/End, 1 s resolution). The capped run should be
within 1.2x of its ideal.

Each run stops its Snakemake and cancels its jobs (bench/_slurm.py). Needs the cluster with accounting (the QOS,
account and association ``benchcap`` are added here, idempotently, and the QOS's cap set to --cap).

    PTFLOW_SLURM_EXISTING=1 .venv/bin/python bench/capped_matrix.py [--jobs-count 200] [--cap 20] [--sleep 20]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date, datetime, timedelta
from pathlib import Path

import yaml
from _slurm import REPO, WORK_ROOT, SnakemakeRun, attach, run_id_of

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
CAPPED_SMK = REPO / "bench" / "capped.smk"
CAPPED, UNCAPPED = "benchcap", "ptflow"  # accounts: benchcap's QOS has the cap, ptflow's (normal) none
REFUSAL = "QOSMaxSubmitJobPerUserLimit"  # what slurmctld logs for each sbatch past the per-user submit cap


def slurm(cluster, *argv: str) -> str:
    return cluster.run(list(argv), timeout=60).stdout


def set_up_cap(cluster, cap: int) -> None:
    """QOS benchcap (MaxSubmitJobsPerUser=cap), the default QOS of this user in account benchcap."""
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    for argv in (
        ["add", "qos", CAPPED],
        ["modify", "qos", CAPPED, "set", f"MaxSubmitJobsPerUser={cap}"],
        ["add", "account", CAPPED],
        ["add", "user", user, f"account={CAPPED}", f"qos={CAPPED}", f"defaultqos={CAPPED}"],
    ):
        cluster.run(["sacctmgr", "-i", *argv], timeout=60)  # "already exists" is fine
    shown = slurm(cluster, "sacctmgr", "-nP", "show", "qos", CAPPED, "format=MaxSubmitJobsPU").split()
    if shown != [str(cap)]:
        raise SystemExit(f"QOS {CAPPED}: MaxSubmitJobsPU is {shown}, not {cap}")


def ctld_log(cluster) -> Path | None:
    for line in slurm(cluster, "scontrol", "show", "config").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SlurmctldLogFile" and value.strip() not in ("", "(null)"):
            return Path(value.strip())
    return None


def refusals(log: Path | None) -> int:
    if log is None or not log.is_file():
        return 0
    return sum(REFUSAL in line for line in log.read_text(errors="replace").splitlines())


def debug_cpus(cluster) -> int:
    """The CPUs of partition debug: how many one-CPU jobs run at once there."""
    out = slurm(cluster, "sinfo", "-h", "-p", "debug", "-N", "-o", "%N %c")
    return sum(int(cpus) for line in set(out.splitlines()) for _name, cpus in [line.split()])


class Sampler:
    """Every 0.5 s: how many of the run's jobs (named after its run id, once Snakemake has logged it) are in the
    queue, pending, running or completing."""

    def __init__(self, cluster, work: Path, account: str):
        self.cluster, self.work, self.account = cluster, work, account
        self.run_id: str | None = None
        self.max_queued = self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_id = self.run_id or run_id_of(self.work)
            if self.run_id:
                out = self.cluster.run(["squeue", "-h", "-A", self.account, "-o", "%j"], timeout=30)
                if out.returncode == 0:
                    mine = sum(name == self.run_id for name in out.stdout.split())
                    self.max_queued, self.samples = max(self.max_queued, mine), self.samples + 1
            self._stop.wait(0.5)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def seconds(elapsed: str) -> int:
    """sacct's [D-]HH:MM:SS."""
    days, _, hms = elapsed.rpartition("-")
    h, m, s = (int(x) for x in hms.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def sacct_jobs(cluster, run_id: str, since: datetime) -> list[dict[str, str]]:
    fields = ("JobID", "State", "Elapsed", "Submit", "Start", "End")
    out = slurm(
        cluster,
        "sacct",
        "-n",
        "-P",
        "-X",
        f"--name={run_id}",
        "-S",
        since.strftime("%Y-%m-%dT%H:%M:%S"),
        "-o",
        ",".join(fields),
    )
    return [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines() if line.count("|") == 5]


def median_gap(ends: list[datetime], submits: list[datetime], slots: int) -> float | None:
    """A freed slot's end to the submission that refills it: the k-th end frees the slot of the (k + slots)-th
    submission (both sorted)."""
    gaps = [(s - e).total_seconds() for e, s in zip(sorted(ends), sorted(submits)[slots:], strict=False)]
    return statistics.median(gaps) if gaps else None


def one_run(cluster, label: str, account: str, n: int, sleep: int, slots: int, log: Path | None) -> dict | None:
    work = Path(tempfile.mkdtemp(prefix=f"bench-{label}-", dir=WORK_ROOT))
    site = yaml.safe_load(SITE.read_text())
    site["account"] = account
    (work / "site.yaml").write_text(yaml.safe_dump(site))
    env = {**cluster.env, "SBATCH_ACCOUNT": account}
    args = ["--config", f"count={n}", f"sleep={sleep}", f"site={work / 'site.yaml'}", "--jobs", "250"]
    refused_before = refusals(log)
    since = datetime.now() - timedelta(minutes=1)
    t0 = time.monotonic()
    with Sampler(cluster, work, account) as sampler:
        run = SnakemakeRun(work, env, args, snakefile=CAPPED_SMK)
        try:
            rc = run.wait(timeout=max(1800, 4 * n * sleep))
            wall = time.monotonic() - t0
        finally:
            run.stop()
    refused = refusals(log) - refused_before
    tail = run.tail(2000)
    said = run.out_path.read_text(errors="replace").splitlines()
    caps_line = next((line for line in said if "bench: cluster limits" in line), "(no caps line)")
    run_id = sampler.run_id or run_id_of(work)
    jobs = sacct_jobs(cluster, run_id, since) if run_id else []
    shutil.rmtree(work, ignore_errors=True)
    if rc != 0 or len(jobs) < n:
        print(f"  {label}: snakemake exited {rc}, {len(jobs)} of {n} jobs in sacct\n{tail}", flush=True)
        return None
    done = [j for j in jobs if j["State"] == "COMPLETED"]
    job_s = statistics.median(seconds(j["Elapsed"]) for j in done)
    stamp = datetime.fromisoformat
    submits = [stamp(j["Submit"]) for j in done]
    starts = {j["JobID"]: stamp(j["Start"]) for j in done}
    wait_s = statistics.median((starts[j["JobID"]] - stamp(j["Submit"])).total_seconds() for j in done)
    ideal = math.ceil(n / slots) * job_s
    figures = {
        "run": label,
        "wall": wall,
        "max_queued": sampler.max_queued,
        "refusals": refused,
        "ideal": ideal,
        "job_s": job_s,
        "slots": slots,
        "jobs": len(jobs),
        "failed": len(jobs) - len(done),
        "samples": sampler.samples,
        # only where the cap holds submissions back (uncapped, a submission waits on no slot)
        "refill_s": median_gap([stamp(j["End"]) for j in done], submits, slots) if account == CAPPED else None,
        "wait_s": wait_s,
        "span_s": (max(stamp(j["End"]) for j in done) - min(submits)).total_seconds(),
        "caps": caps_line.split("bench: ", 1)[-1].strip(),
    }
    print(f"  {label}: {wall:.0f} s wall; {figures['caps']}", flush=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs-count", type=int, default=200, help="independent jobs in the matrix")
    parser.add_argument("--cap", type=int, default=20, help="MaxSubmitJobsPerUser of QOS benchcap")
    parser.add_argument("--sleep", type=int, default=20, help="seconds each job sleeps")
    args = parser.parse_args()
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    cluster, started = attach()
    try:
        if not cluster.accounting:
            raise SystemExit("the cluster keeps no accounting: no QOS to cap with")
        set_up_cap(cluster, args.cap)
        log = ctld_log(cluster)
        cpus = debug_cpus(cluster)
        print(
            f"{date.today()}: load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.jobs_count} "
            f"jobs of sleep {args.sleep} s; cap {args.cap}; partition debug {cpus} CPUs; log {log}",
            flush=True,
        )
        rows = [
            one_run(cluster, "capped", CAPPED, args.jobs_count, args.sleep, args.cap, log),
            one_run(cluster, "uncapped", UNCAPPED, args.jobs_count, args.sleep, cpus, log),
        ]
        print(f"load average now {os.getloadavg()[0]:.1f}\n")
        print(
            f"{'run':<9} {'wall s':>7} {'max queued':>10} {'refusals':>8} {'ideal s':>8} {'wall/ideal':>10}   "
            "ideal = ceil(jobs/slots) x median job; refill = slot's job end -> next submit; wait = submit -> start"
        )
        for r in filter(None, rows):
            refill = "-" if r["refill_s"] is None else f"{r['refill_s']:.0f} s"
            print(
                f"{r['run']:<9} {r['wall']:>7.0f} {r['max_queued']:>10} {r['refusals']:>8} {r['ideal']:>8.0f} "
                f"{r['wall'] / r['ideal']:>10.2f}   slots {r['slots']}, median job {r['job_s']:.0f} s, "
                f"refill {refill}, wait {r['wait_s']:.0f} s, first submit -> last end {r['span_s']:.0f} s, "
                f"{r['jobs']} jobs ({r['failed']} not completed), {r['samples']} queue samples"
            )
        if all(rows):
            print(f"capped / uncapped wall: {rows[0]['wall'] / rows[1]['wall']:.2f}")
    finally:
        if started:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "src"))
    raise SystemExit(main())
