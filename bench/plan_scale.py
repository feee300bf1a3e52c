"""Dry-run and `ptflow plan` of PostTrainBench-shaped matrices against Snakemake's own floor (printed, not asserted).

For 224, 2,000 and 10,000 trained cells (config/posttrainbench.yaml's 4 models x 7 evals, with its 8 agent configs
repeated as runs ``-r2``, ``-r3``, ... until the count is reached; plus the 28 baseline cells) this times, in one
command and interleaved so that load hits all alike:

- ``snakemake -n`` of ptflow's workflow on the ``generic`` site (Slurm profile),
- ``ptflow plan`` of the same,
- ``snakemake -n`` of bench/trivial.smk: the same jobs per rule (cache_model -> train -> evaluate -> judge ->
  aggregate) with touch bodies and nothing of ptflow, one input per job,
- the same with ptflow's edges (``edges=ptflow``): each train and evaluate job also reads an eval cache marker and
  an image, each judge the checkpoint, as ptflow's jobs do on the generic site,

and prints each as wall seconds, CPU seconds (user + sys of the process tree: steadier on a shared machine) and the
ratios to both trivial workflows (the first is the issue's yardstick). ``--profile-cells N`` writes a cProfile of
ptflow's dry-run at N cells instead.

    .venv/bin/python bench/plan_scale.py [--cells 224 2000 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PTB = REPO / "config" / "posttrainbench.yaml"


def matrix(work: Path, cells: int) -> tuple[Path, int]:
    """An overlay on posttrainbench.yaml with ``cells`` trained cells (rounded up to whole agent runs)."""
    ptb = yaml.safe_load(PTB.read_text())
    per_agent = len(ptb["models"]) * len(ptb["evals"])
    base = [a for a in ptb["agents"] if a["kind"] != "baseline"]
    runs = -(-cells // per_agent)
    agents = [a for a in ptb["agents"] if a["kind"] == "baseline"]
    for i in range(runs):
        a = dict(base[i % len(base)])
        if i >= len(base):
            a["id"] = f"{a['id']}-r{i // len(base) + 1}"
        agents.append(a)
    path = work / f"matrix-{cells}.yaml"
    path.write_text(yaml.safe_dump({"agents": agents}))
    return path, runs


def plan_env(work: Path) -> dict:
    """The environment of a plan made where Slurm's tools are installed and no controller answers (this machine).

    The Slurm plugin runs ``scontrol show config`` when it is imported. On a login node that answers at once. With no
    configuration at all (``SLURM_CONF=/nonexistent``) scontrol keeps trying for the plugin's full 10 s timeout,
    which every command here would carry in its wall time. An empty slurm.conf makes it fail at once, so wall times
    are what a user on a login node waits.
    """
    conf = work / "slurm.conf"
    conf.write_text("")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    env.setdefault("USER", "bench")  # the generic site's paths name $USER
    return env


def timed(argv: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one command; fails loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def commands(work: Path, cells: int) -> dict[str, list[str]]:
    overlay, runs = matrix(work, cells)
    ptflow_args = [
        "-s", str(REPO / "Snakefile"), "--directory", str(work / "ptflow"), "--profile", str(REPO / "profiles/slurm"),
        "--configfile", str(PTB), str(overlay), "--config", "site=generic",
    ]  # fmt: skip
    trivial = [
        str(BIN / "snakemake"), "-n", "-s", str(REPO / "bench/trivial.smk"), "--directory", str(work / "trivial"),
        "--profile", str(REPO / "profiles/slurm"), "--config", "models=4", "evals=7", f"agents={runs}",
    ]  # fmt: skip
    return {
        "trivial snakemake -n": trivial,
        "trivial, ptflow edges": [*trivial, "edges=ptflow"],
        "ptflow snakemake -n": [str(BIN / "snakemake"), "-n", *ptflow_args],
        "ptflow plan": [str(BIN / "ptflow"), "plan", *ptflow_args],
    }


def profile(work: Path, cells: int, env: dict) -> None:
    argv = commands(work, cells)["ptflow snakemake -n"]
    out = Path(f"plan_scale-{cells}.prof").resolve()
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), *argv], env=env, stdout=subprocess.DEVNULL)
    print(f"cProfile of ptflow's dry-run at {cells} cells: {out}")
    print(f"read it with: {sys.executable} -c \"import pstats; pstats.Stats('{out}').sort_stats('cumulative')"
          ".print_stats(40)\"")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, nargs="+", default=[224, 2000, 10000])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command per size (median shown)")
    parser.add_argument("--profile-cells", type=int, help="write a cProfile of ptflow's dry-run at this size")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ptflow-scale-"))
    env = plan_env(work)
    try:
        if args.profile_cells:
            profile(work, args.profile_cells, env)
            return 0
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; median of {args.repeat} runs each")
        for cells in args.cells:
            cmds = commands(work, cells)
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in cmds}
            for _ in range(args.repeat):
                for name, argv in cmds.items():  # interleaved: a load spike hits every command alike
                    results[name].append(timed(argv, env, work))
            medians = {
                name: (statistics.median(w for w, _ in xs), statistics.median(c for _, c in xs))
                for name, xs in results.items()
            }
            floor, edged = medians["trivial snakemake -n"], medians["trivial, ptflow edges"]
            print(f"{cells} trained cells (ratios: to the trivial workflow / to it with ptflow's edges):")
            for name, (wall, cpu) in medians.items():
                print(
                    f"  {name:22s} wall {wall:6.1f} s ({wall / floor[0]:4.2f}x / {wall / edged[0]:4.2f}x)   "
                    f"CPU {cpu:6.1f} s ({cpu / floor[1]:4.2f}x / {cpu / edged[1]:4.2f}x)",
                    flush=True,
                )
        print(f"load average now {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
