"""Where the suite's CPU goes: run pytest with tests/support/cpu_meter.py and print CPU-seconds per module and per
fixture setup (the suite is CPU-bound on 2 cores, so wall time follows CPU time).

    .venv/bin/python bench/suite_cpu.py [--out DIR] [--workers 5] [-- pytest args]
    .venv/bin/python bench/suite_cpu.py --report DIR      # only print the figures of an earlier run

Per module: wall (its phases summed; under workers they overlap), the CPU of the worker's process tree (local
Snakemake runs and their jobs included), and the CPU of the Slurm jobs whose work directory the module made (by the
directory's name prefix, from sacct). Then the slowest fixture setups, and the machine's busy CPU over the run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(out: Path, workers: int, extra: list[str]) -> int:
    env = {**os.environ, "PTFLOW_CPU_METER": str(out), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    argv = [sys.executable, "-m", "pytest", "-n", str(workers), "-p", "tests.support.cpu_meter", *extra]
    t0 = time.monotonic()
    rc = subprocess.call(argv, cwd=REPO, env=env)
    print(f"pytest exit {rc} after {time.monotonic() - t0:.0f} s (wall, this command)")
    return rc


def report(out: Path) -> None:
    phases = []
    for path in sorted(out.glob("*.jsonl")):
        if path.name != "slurm_jobs.jsonl":
            phases += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    modules: dict[str, dict[str, float]] = collections.defaultdict(lambda: collections.Counter())
    for p in phases:
        mod = p["nodeid"].split("::", 1)[0]
        modules[mod]["wall"] += p["wall"]
        modules[mod]["cpu"] += p["cpu"]
    slurm: dict[str, float] = collections.Counter()
    slurm_path = out / "slurm_jobs.jsonl"
    if slurm_path.is_file():
        for line in slurm_path.read_text().splitlines():
            job = json.loads(line)
            if "." in job["job"]:
                continue  # a step (.batch, .0, ...): the allocation's own line already sums its steps
            name = Path(job["workdir"]).name
            prefix = name.rsplit("-", 1)[0] if "-" in name else name
            slurm[prefix] += job["cpu"]
    print(f"{'module':62} {'wall s':>8} {'tree CPU s':>11}")
    for mod, fig in sorted(modules.items(), key=lambda kv: -kv[1]["cpu"]):
        print(f"{mod:62} {fig['wall']:8.0f} {fig['cpu']:11.0f}")
    print(f"{'all modules':62} {sum(f['wall'] for f in modules.values()):8.0f} "
          f"{sum(f['cpu'] for f in modules.values()):11.0f}")  # fmt: skip
    if slurm:
        print(f"\n{'Slurm jobs by work directory prefix':62} {'CPU s':>8}")
        for prefix, cpu in sorted(slurm.items(), key=lambda kv: -kv[1]):
            print(f"{prefix:62} {cpu:8.0f}")
        print(f"{'all Slurm jobs':62} {sum(slurm.values()):8.0f}")
    setups = sorted((p for p in phases if p["phase"] == "setup"), key=lambda p: -p["cpu"])[:15]
    print(f"\n{'slowest setups (the first test of a module-scoped fixture)':90} {'wall s':>7} {'CPU s':>7}")
    for p in setups:
        print(f"{p['nodeid'][:90]:90} {p['wall']:7.0f} {p['cpu']:7.0f}")
    machine = out / "machine.json"
    if machine.is_file():
        m = json.loads(machine.read_text())
        print(f"\nmachine: {m['busy_cpu']:.0f} busy CPU-s over {m['wall']:.0f} s on {m['cores']} cores "
              f"({100 * m['busy_cpu'] / (m['wall'] * m['cores']):.0f} %)")  # fmt: skip
        if "cluster_cpu" in m:
            print(f"the Slurm test cluster (its daemons and every job): {m['cluster_cpu']:.0f} CPU-s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="where the meter writes (default: a new temporary directory)")
    ap.add_argument("--workers", type=int, default=int(os.environ.get("TEST_WORKERS", "5")))
    ap.add_argument("--report", type=Path, help="print the figures of an earlier run's directory and stop")
    args, extra = ap.parse_known_args()
    if args.report:
        report(args.report)
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="ptflow-suite-cpu-"))
    rc = run(out, args.workers, [a for a in extra if a != "--"])
    report(out)
    print(f"(raw figures: {out})")
    return rc


if __name__ == "__main__":
    sys.exit(main())
