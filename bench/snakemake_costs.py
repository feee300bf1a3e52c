"""What ptflow.snakemake_once saves in ptflow's dry-run (printed, not asserted).

ptflow's Snakefile does once what Snakemake repeats for every job of a rule with the same answer
(``ptflow.snakemake_once``, whose docstring says what each is):

- the script check: ``ScriptProcessor.process_job`` (snakemake/dag.py) reads each job's script through the source
  cache only to check that it exists; ptflow checks once per rule and script;
- the signature of ``Resource.evaluate``: read with ``inspect.signature`` twice per callable resource per job;
  ptflow states it once.

Each variant is the same ``snakemake -n`` of ptflow's workflow as bench/plan_scale.py (generic site, Slurm profile),
with one or both of those left as Snakemake ships them (inside the bench's child process only), timed interleaved
with the trivial workflow and printed as wall and CPU seconds with the ratio to it.

    .venv/bin/python bench/snakemake_costs.py [--cells 2000 10000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_scale import commands, plan_env, timed  # noqa: E402  (bench/ is not a package)

VARIANTS = {
    "as is": "",
    "script check per job": "script",
    "evaluate signature per job": "signature",
    "both per job (as shipped)": "script,signature",
}


def patch(switches: set[str]) -> None:
    """In the child: leave the named computations per job, as Snakemake ships them."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from ptflow import snakemake_once

    # install() (run by the Snakefile, which finds this module already imported) calls these by name
    if "script" in switches:
        snakemake_once.check_each_script_once = lambda: False
    if "signature" in switches:
        snakemake_once.sign_resource_evaluate_once = lambda: False


def child(switches: str, argv: list[str]) -> None:
    patch({s for s in switches.split(",") if s})
    from snakemake.cli import main as snakemake_main

    sys.argv = ["snakemake", *argv]
    snakemake_main()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, nargs="+", default=[2000, 10000])
    parser.add_argument("--repeat", type=int, default=1, help="runs of each command per size (median shown)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ptflow-costs-"))
    env = plan_env(work)
    try:
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; median of {args.repeat} runs each")
        for cells in args.cells:
            cmds = commands(work, cells)
            ptflow_args = cmds["ptflow snakemake -n"][1:]  # without the snakemake executable
            runs = {"trivial snakemake -n": cmds["trivial snakemake -n"]}
            for name, switches in VARIANTS.items():
                runs[f"ptflow, {name}"] = [sys.executable, __file__, "--child", switches, "--", *ptflow_args]
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
            for _ in range(args.repeat):
                for name, argv in runs.items():
                    results[name].append(timed(argv, env, work))
            medians = {
                name: (statistics.median(w for w, _ in xs), statistics.median(c for _, c in xs))
                for name, xs in results.items()
            }
            floor = medians["trivial snakemake -n"]
            print(f"{cells} trained cells (ratio to the trivial workflow):")
            width = max(map(len, medians))
            for name, (wall, cpu) in medians.items():
                print(f"  {name:{width}s} wall {wall:6.1f} s ({wall / floor[0]:4.2f}x)   CPU {cpu:6.1f} s "
                      f"({cpu / floor[1]:4.2f}x)", flush=True)  # fmt: skip
        print(f"load average now {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[sys.argv.index("--") + 1 :])
    else:
        raise SystemExit(main())
