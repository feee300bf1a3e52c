"""Scheduler-side figures on the Slurm test cluster (tests/support/local_slurm.py): printed, not asserted.

1. Submission: the 224 train jobs of the PostTrainBench matrix (config/posttrainbench.yaml) through the Slurm
   profile, with every job body swapped for a no-op (bench/noop.smk) and every job held (``--hold``) — for this
   measurement only — so the time is that of building the DAG and submitting. Beside the profile as shipped: the
   account as the plugin's ``slurm_account`` resource (the plugin then runs sacctmgr before every submission), the
   profile's earlier submission rate (20 jobs/s), and the floor: 224 plain sbatch calls one after another.
   PostTrainBench's own loop sleeps 2 s per job (>= 448 s).
2. Latency from a job's end to its dependent: N cells (train -> evaluate, no-op bodies, not held), train i sleeping
   i x --stagger seconds so that the ends fall at every phase of the plugin's status checks (ended at once, all
   pairs share one check: one sample, phase luck), with the profile's settings, a first check after 3 s and, with
   --plugin-defaults, the plugin's (40 s); Slurm's EndTime, SubmitTime and StartTime give the figures. Train and
   evaluate run as CPU jobs here: on the test cluster's 8 fake GPUs the dependents would queue for a GPU.
   ``--sweep-init 3 5 10 --repeat 3`` measures only this, at each first-check interval, runs interleaved.

Every run stops its Snakemake and cancels its jobs, held or not (bench/_slurm.py).

    PTFLOW_SLURM_EXISTING=1 .venv/bin/python bench/slurm_submission.py [--cells 12] [--skip latency]
    PTFLOW_SLURM_EXISTING=1 .venv/bin/python bench/slurm_submission.py --sweep-init 3 5 10 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, datetime
from pathlib import Path

import yaml
from _slurm import REPO, WORK_ROOT, SnakemakeRun, attach, run_id_of, scontrol_jobs

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
NOOP = REPO / "bench" / "noop.smk"


def prepare(work: Path, cfg, site: dict) -> Path:
    """Cache markers and data exist already: the bench DAG is train + evaluate only."""
    from ptflow.config.layout import Layout

    lay = Layout.from_config(cfg.raw)
    # every base model, and the instruct counterparts that instruct cells evaluate
    for m in {*cfg.models, *(cfg.evaluated_model(cell).name for cell in cfg.cells)}:
        Path(work, lay.model_marker(m)).parent.mkdir(parents=True, exist_ok=True)
        Path(work, lay.model_marker(m)).touch()
    for e in cfg.evals:
        # the toy tasks' parquet splits, and the marker of what every other task reads from the caches
        for path in (lay.data(e, "train"), lay.data(e, "test"), lay.eval_data_marker(e)):
            Path(work, path).parent.mkdir(parents=True, exist_ok=True)
            Path(work, path).touch()
    site_file = work / "site.yaml"
    site_file.write_text(yaml.safe_dump(site))
    return site_file


def rule_of(job: dict) -> str:
    return job["Comment"].removeprefix("rule_").partition("_wildcards_")[0]


def submission(env: dict, label: str, extra: list[str]) -> None:
    from ptflow.config.load import load

    cfg = load(REPO, ["config/posttrainbench.yaml"], base_dir=REPO).cfg
    work = Path(tempfile.mkdtemp(prefix="bench-submit-", dir=WORK_ROOT))
    site = yaml.safe_load(SITE.read_text())
    for req in site["resources"].values():
        req["extra"] = "--hold"  # held: never runs, so only submission is measured
    site_file = prepare(work, cfg, site)
    args = ["--configfile", str(REPO / "config/posttrainbench.yaml"), "--config", f"site={site_file}"]
    args += [f"sites_dir={REPO / 'config/sites'}", "--jobs", "500", "--retries", "0", *extra]
    n = len(cfg.training_cells())
    started = datetime.now()
    run = SnakemakeRun(work, env, args, snakefile=NOOP)
    submits: list[datetime] = []
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and len(submits) < n and run.proc.poll() is None:
            time.sleep(1)
            run_id = run_id_of(work)
            if run_id:
                submits = [
                    datetime.fromisoformat(j["SubmitTime"])
                    for j in scontrol_jobs(env)
                    if j.get("JobName") == run_id and rule_of(j) == "train"
                ]
    finally:
        run.stop()
        tail = run.tail(1500)
        shutil.rmtree(work, ignore_errors=True)
    if len(submits) < n:
        print(f"  {label}: only {len(submits)} of {n} train jobs were submitted\n{tail}")
        return
    first, last = min(submits), max(submits)
    print(
        f"  {label}: {n} jobs submitted {(last - started).total_seconds():.0f} s after starting snakemake "
        f"(first after {(first - started).total_seconds():.0f} s; {n} jobs in {(last - first).total_seconds():.0f} s)",
        flush=True,
    )


def latency(env: dict, cells: int, stagger: float, label: str, extra: list[str]) -> tuple[float, float] | None:
    from ptflow.config.load import merged_config
    from ptflow.config.matrix import build_config

    raw = merged_config(REPO)
    raw["agents"] = [{"id": "baseline", "kind": "baseline"}] + [
        {"id": f"a{i}", "kind": "trl-sft", "params": {"steps": 1, "batch_size": 8, "learning_rate": 1e-3, "seed": 0}}
        for i in range(cells)
    ]
    raw["matrix"] = {"models": [raw["models"][0]["id"]], "evals": ["add"], "agents": [f"a{i}" for i in range(cells)]}
    work = Path(tempfile.mkdtemp(prefix="bench-latency-", dir=WORK_ROOT))
    overlay = work / "overlay.yaml"
    overlay.write_text(yaml.safe_dump({"agents": raw["agents"], "matrix": raw["matrix"]}))
    site = yaml.safe_load(SITE.read_text())
    # CPU jobs: the test cluster has 8 fake GPUs, and 12 train + 12 evaluate jobs of one GPU each would queue for
    # them; the start figure would then be that queue, not the latency of the orchestration (32 CPUs per node here)
    for stage in ("train", "evaluate"):
        site["resources"][stage] = {"partition": "cpu", "threads": 1, "mem_mb": 1000, "runtime": 10}
    site_file = prepare(work, build_config(raw), site)
    args = ["--configfile", str(overlay), "--config", f"site={site_file}", f"sites_dir={REPO / 'config/sites'}"]
    env = {**env, "PTFLOW_BENCH_STAGGER_S": str(stagger)}
    run = SnakemakeRun(work, env, [*args, *extra], snakefile=NOOP)
    try:
        rc = run.wait(timeout=900)
        run_id = run_id_of(work)
        jobs = [j for j in scontrol_jobs(env) if j.get("JobName") == run_id]
    finally:
        run.stop()
        tail = run.tail(1500)
        shutil.rmtree(work, ignore_errors=True)
    if rc != 0:
        print(f"  {label}: snakemake failed ({rc})\n{tail}")
        return None
    stamp = datetime.fromisoformat
    ends = {j["Comment"].partition("_wildcards_")[2]: stamp(j["EndTime"]) for j in jobs if rule_of(j) == "train"}
    deps = {j["Comment"].partition("_wildcards_")[2]: j for j in jobs if rule_of(j) == "evaluate"}
    submitted = sorted((stamp(deps[k]["SubmitTime"]) - ends[k]).total_seconds() for k in ends if k in deps)
    begun = sorted((stamp(deps[k]["StartTime"]) - ends[k]).total_seconds() for k in ends if k in deps)
    print(
        f"  {label}: job end -> dependent submitted median {statistics.median(submitted):.1f} s "
        f"(min {submitted[0]:.0f}, max {submitted[-1]:.0f}); -> dependent started median "
        f"{statistics.median(begun):.1f} s (min {begun[0]:.0f}, max {begun[-1]:.0f}); n={len(begun)}",
        flush=True,
    )
    return statistics.median(submitted), statistics.median(begun)


def sweep(env: dict, cells: int, stagger: float, inits: list[int], repeat: int) -> None:
    """The latency at each first-check interval (the plugin resets to it after every check that saw a job end and
    adds 10 s after each that saw none), runs interleaved so that load hits each value alike; the median of the
    runs' medians per value."""
    medians: dict[int, list[tuple[float, float]]] = {i: [] for i in inits}
    for _ in range(repeat):
        for init in inits:
            extra = [
                "--slurm-init-seconds-before-status-checks",
                str(init),
                "--seconds-between-status-checks",
                str(init),
            ]
            got = latency(env, cells, stagger, f"first check after {init} s", extra)
            if got:
                medians[init].append(got)
    for init, runs in medians.items():
        if runs:
            sub = statistics.median(r[0] for r in runs)
            began = statistics.median(r[1] for r in runs)
            print(f"  first check after {init:>3} s: median over {len(runs)} runs: submitted {sub:.1f} s, started "
                  f"{began:.1f} s; run medians started {sorted(r[1] for r in runs)}", flush=True)  # fmt: skip


def sbatch_floor(env: dict, n: int) -> None:
    """n plain, held sbatch calls one after another: what no submitter on this controller can beat by much."""
    work = Path(tempfile.mkdtemp(prefix="bench-sbatch-", dir=WORK_ROOT))
    name = f"bench-floor-{work.name}"
    argv = ["sbatch", "--parsable", "--hold", f"--job-name={name}", "--output=/dev/null", "--wrap=true"]
    t0 = time.monotonic()
    try:
        for _ in range(n):
            subprocess.run(argv, cwd=work, env={**os.environ, **env}, capture_output=True, check=True)
        took = time.monotonic() - t0
    finally:
        subprocess.run(["scancel", f"--name={name}"], env={**os.environ, **env}, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    print(f"  floor: {n} plain sbatch calls one after another: {took:.1f} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=12)
    parser.add_argument("--skip", choices=("submission", "variants", "latency"), action="append", default=[])
    parser.add_argument("--stagger", type=float, default=1.7, help="seconds between the ends of the train jobs")
    parser.add_argument("--plugin-defaults", action="store_true", help="latency with the plugin's 40 s as well")
    parser.add_argument("--sweep-init", type=int, nargs="+", metavar="S", help="latency only, at each of these "
                        "slurm-init-seconds-before-status-checks values, --repeat runs each")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, help="runs per value of --sweep-init")
    args = parser.parse_args()
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    cluster, started = attach()
    try:
        env = cluster.env
        print(f"{date.today()}: load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        if args.sweep_init:
            print(f"[no-op bodies] {args.cells} train -> evaluate pairs, train i sleeping i x {args.stagger} s:")
            sweep(env, args.cells, args.stagger, args.sweep_init, args.repeat)
            return 0
        if "submission" not in args.skip:
            print("[no-op bodies, held jobs: bench only] PostTrainBench's 224 trainings:")
            submission(env, "profiles/slurm", [])
            if "variants" not in args.skip:
                resource = ["--set-resources", "train:slurm_account=ptflow"]
                submission(env, "account as the plugin's slurm_account resource", resource)
                submission(env, "profile's earlier rate, 20 jobs/s", ["--max-jobs-per-timespan", "20/1s"])
                sbatch_floor(env, 224)
        if "latency" not in args.skip:
            print(f"[no-op bodies] {args.cells} train -> evaluate pairs, train i sleeping i x {args.stagger} s:")
            latency(env, args.cells, args.stagger, "profiles/slurm", [])
            earlier = ["--slurm-init-seconds-before-status-checks", "3", "--seconds-between-status-checks", "3"]
            latency(
                env, args.cells, args.stagger, "first check after 3 s (the profile before 2026-11-23's sweep)", earlier
            )
            if args.plugin_defaults:
                defaults = ["--slurm-init-seconds-before-status-checks", "40", "--seconds-between-status-checks", "10"]
                latency(env, args.cells, args.stagger, "plugin defaults (40 s, 10 s)", defaults)
        print(f"load average now {os.getloadavg()[0]:.1f}")
    finally:
        if started:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "src"))
    raise SystemExit(main())
