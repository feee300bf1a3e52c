"""What Snakemake's own per-job costs weigh in ptflow's dry-run (printed, not asserted; an experiment).

ptflow's dry-run at scale is slower than bench/trivial.smk mostly where Snakemake handles directives that the
trivial rules lack (bench/plan_scale.py's profile). This measures two of them by switching each inside the child
Snakemake process; the switches live only in this bench:

- ``per-job script check``: Snakemake as shipped, whose ``ScriptProcessor.process_job`` (snakemake/dag.py) re-reads
  each job's script through the source cache (three ``smart_open.parse_uri`` calls, each building a namedtuple class)
  only to check that it exists. ptflow's Snakefile wraps it to check once per rule (``ptflow.snakemake_checks``);
  this variant leaves that wrapper out, to show what it saves.
- ``cached signature``: every evaluable resource goes through ``inspect.signature`` of the bound
  ``Resource.evaluate``, twice per job (``Rule.apply_input_function`` and ``get_input_function_aux_params``). Cached
  per function here. ptflow's attempt-scaled resources (runtime, mem_mb) add two such resources per job.

Each variant is the same ``snakemake -n`` of ptflow's workflow as bench/plan_scale.py (generic site, Slurm profile),
timed interleaved with the trivial workflow, and printed as wall and CPU seconds with the ratio to it.

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
from plan_scale import commands, timed  # noqa: E402  (bench/ is not a package)

VARIANTS = {"as is": "", "per-job script check": "per-job", "cached signature": "signature"}


def patch(switches: set[str]) -> None:
    """In the child: switch the named per-job costs, then run Snakemake's CLI."""
    import inspect

    import snakemake.api  # noqa: F401  (imports the modules below without a cycle)
    import snakemake.common as common
    import snakemake.jobs
    import snakemake.rules

    if "per-job" in switches:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
        import ptflow.snakemake_checks

        # the Snakefile's `from ptflow.snakemake_checks import ...` finds this module already loaded
        ptflow.snakemake_checks.check_each_script_once = lambda: False
    if "signature" in switches:
        original, cache = common.get_function_params, {}

        def get_function_params(func):
            underlying = getattr(func, "__func__", None)
            if underlying is None or hasattr(func, common.FUNC_OVERWRITE_PARAMS_ATTR):
                return original(func)
            if underlying not in cache:
                cache[underlying] = inspect.signature(func).parameters
            return cache[underlying]

        for module in (common, snakemake.rules, snakemake.jobs):
            if hasattr(module, "get_function_params"):
                module.get_function_params = get_function_params


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
    env = {**os.environ, "SLURM_CONF": "/nonexistent"}  # as bench/plan_scale.py: a plan needs no cluster
    env.setdefault("USER", "bench")
    work = Path(tempfile.mkdtemp(prefix="ptflow-costs-"))
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
            for name, (wall, cpu) in medians.items():
                print(f"  {name:28s} wall {wall:6.1f} s ({wall / floor[0]:4.2f}x)   CPU {cpu:6.1f} s "
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
