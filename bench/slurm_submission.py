"""Scheduler-side figures on the local test cluster (src/ptflow/testing/local_slurm.py), printed, not asserted.

1. Submission: the 224-cell PostTrainBench matrix (config/posttrainbench.yaml) through the Slurm profile, with the
   job bodies swapped for a no-op (bench/noop.smk) and every job held (`--hold`) — for this measurement only — so
   the time is that of building the DAG and submitting. PostTrainBench's own loop sleeps 2 s per job (>= 448 s).
2. Latency from a job's end to its dependent's submission: N cells (train -> evaluate, no-op bodies, not held),
   with the profile's settings and with the plugin's defaults; Slurm's EndTime and SubmitTime give the figure.

Usage: .venv/bin/python bench/slurm_submission.py [--cells 12]   (uses a running cluster, else starts one)
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
SITE = REPO / "tests" / "slurm" / "localtest.yaml"


def run_snakemake(work: Path, env: dict, *args: str, background: bool = False):
    cmd = [
        SNAKEMAKE,
        "-s",
        str(REPO / "bench" / "noop.smk"),
        "--directory",
        str(work),
        "--profile",
        str(REPO / "profiles" / "slurm"),
        *args,
    ]
    # Output to a file, never an unread pipe: a full pipe blocks Snakemake's logging, and with it every submission
    # (what limited an earlier attempt of this bench to 30 jobs).
    out = open(work / "snakemake.out", "w")  # noqa: SIM115 - closed with the process
    kw = dict(cwd=work, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, text=True)
    return subprocess.Popen(cmd, **kw) if background else subprocess.run(cmd, **kw)


def prepare(work: Path, cfg, site: dict) -> Path:
    """Cache markers and data exist already: the bench DAG is train + evaluate only."""
    from ptflow.config.layout import Layout

    lay = Layout.from_config(cfg.raw)
    for m in cfg.models:
        Path(work, lay.model_marker(m)).parent.mkdir(parents=True, exist_ok=True)
        Path(work, lay.model_marker(m)).touch()
    for e in cfg.evals:
        for split in ("train", "test"):
            Path(work, lay.data(e, split)).parent.mkdir(parents=True, exist_ok=True)
            Path(work, lay.data(e, split)).touch()
    site_file = work / "site.yaml"
    site_file.write_text(yaml.safe_dump(site))
    return site_file


def submission(env: dict) -> None:
    from ptflow.config.load import load

    cfg = load(REPO, ["config/posttrainbench.yaml"], base_dir=REPO).cfg
    work = Path(tempfile.mkdtemp(prefix="bench-submit-", dir="/var/lib/ptflow-tests"))
    site = yaml.safe_load(SITE.read_text())
    for req in site["resources"].values():
        req["extra"] = "--hold"  # held: never runs, so only submission is measured
    site_file = prepare(work, cfg, site)
    started = datetime.now()
    proc = run_snakemake(
        work,
        env,
        "--configfile",
        str(REPO / "config" / "posttrainbench.yaml"),
        "--config",
        f"site={site_file}",
        f"sites_dir={REPO / 'config' / 'sites'}",
        # held jobs never end: above the profile's 250 (224 train + 28 baseline evaluate) so all can be queued
        "--jobs",
        "500",
        background=True,
    )
    n = len(cfg.training_cells())
    run_id, submits = None, []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and len(submits) < n:
        time.sleep(2)
        logs = list((work / ".snakemake" / "log").glob("*.log"))
        if run_id is None and logs and (m := re.search(r"SLURM run ID: (\S+)", logs[0].read_text())):
            run_id = m.group(1)
        if run_id:
            submits = [stamp for rule, stamp in slurm_jobs(env, run_id) if rule == "train"]
    proc.send_signal(signal.SIGINT)  # Snakemake waits for a job event after SIGTERM; SIGINT stops it
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if run_id:
        subprocess.run(["scancel", "--name", run_id], env={**os.environ, **env})
    if len(submits) < n:
        print(f"only {len(submits)} of {n} train jobs were submitted within 600 s")
        return
    first, last = min(submits), max(submits)
    print(
        f"[no-op bodies, held jobs: bench only] {n} train jobs of the PostTrainBench matrix submitted "
        f"{(last - started).total_seconds():.0f} s after starting snakemake (DAG build included; first job after "
        f"{(first - started).total_seconds():.0f} s, {n} jobs in {(last - first).total_seconds():.0f} s); "
        f"PostTrainBench's loop sleeps >= {2 * n} s"
    )


def slurm_jobs(env: dict, run_id: str) -> list[tuple[str, datetime]]:
    """(rule, SubmitTime) of one Snakemake run's jobs, from slurmctld (one scontrol call)."""
    out = subprocess.run(
        ["scontrol", "show", "job", "-o"], capture_output=True, text=True, env={**os.environ, **env}
    ).stdout
    jobs = []
    for line in out.splitlines():
        f = dict(re.findall(r"(\w[\w/]*)=(\S*)", line))
        if f.get("JobName") == run_id:
            jobs.append(
                (
                    f["Comment"].removeprefix("rule_").partition("_wildcards_")[0],
                    datetime.fromisoformat(f["SubmitTime"]),
                )
            )
    return jobs


def latency(env: dict, cells: int, settings: list[str], label: str) -> None:
    from ptflow.config.load import merged_config
    from ptflow.config.model import build_config

    raw = merged_config(REPO)
    raw["agents"] = [{"id": "baseline", "kind": "baseline"}] + [
        {"id": f"a{i}", "kind": "trl-sft", "params": {"steps": 1, "batch_size": 8, "learning_rate": 1e-3, "seed": 0}}
        for i in range(cells)
    ]
    raw["matrix"] = {"models": [raw["models"][0]["id"]], "evals": ["add"], "agents": [f"a{i}" for i in range(cells)]}
    work = Path(tempfile.mkdtemp(prefix="bench-latency-", dir="/var/lib/ptflow-tests"))
    overlay = work / "overlay.yaml"
    overlay.write_text(yaml.safe_dump({"agents": raw["agents"], "matrix": raw["matrix"]}))
    site_file = prepare(work, build_config(raw), yaml.safe_load(SITE.read_text()))
    run_snakemake(
        work,
        env,
        "--configfile",
        str(overlay),
        "--config",
        f"site={site_file}",
        f"sites_dir={REPO / 'config' / 'sites'}",
        *settings,
    )
    log = next((work / ".snakemake" / "log").glob("*.log")).read_text()
    run_id = re.search(r"SLURM run ID: (\S+)", log).group(1)
    jobs = subprocess.run(
        ["scontrol", "show", "job", "-o"], capture_output=True, text=True, env={**os.environ, **env}
    ).stdout
    ends, submits = {}, {}
    for line in jobs.splitlines():
        f = dict(re.findall(r"(\w[\w/]*)=(\S*)", line))
        if f.get("JobName") != run_id:
            continue
        rule, _, wc = f["Comment"].removeprefix("rule_").partition("_wildcards_")
        stamp = datetime.fromisoformat
        (ends if rule == "train" else submits)[wc] = stamp(f["EndTime"] if rule == "train" else f["SubmitTime"])
    gaps = sorted((submits[k] - ends[k]).total_seconds() for k in ends if k in submits)
    print(
        f"{label}: job end -> dependent submitted, median {statistics.median(gaps):.1f} s "
        f"(min {gaps[0]:.0f}, max {gaps[-1]:.0f}, n={len(gaps)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=12)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from tests.support.local_slurm import LocalSlurmCluster

    Path("/var/lib/ptflow-tests").mkdir(parents=True, exist_ok=True)
    cluster = LocalSlurmCluster()
    started = not cluster.is_running()
    if started:
        cluster.start()
    try:
        env = cluster.env
        submission(env)
        latency(env, args.cells, [], "profiles/slurm (status checks every 5 s, first after 10 s)")
        latency(
            env,
            args.cells,
            ["--slurm-init-seconds-before-status-checks", "40", "--seconds-between-status-checks", "10"],
            "plugin defaults (40 s, then 10 s+)",
        )
    finally:
        if started:
            cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
