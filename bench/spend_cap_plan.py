"""The matrix spend cap's cost at planning: a dry run of the embedded default grown to N agent cells (claude agents
with ``max_spend_usd``), with and without ``spend.max_usd`` (printed, not asserted).

Issue 57 measured the cap growing faster than the matrix: every agent cell's params listed every other agent cell
(O(N^2) in what Snakemake evaluates and keeps). Since then a cell's job is handed the ledger's path and the run writes
the ledger once at its start (``ptflow.config.spend.write_ledger``). This times ``snakemake -n`` of both configs,
interleaved so that load hits both alike, on the workflow of ``--tree`` (default: this checkout; give an older
checkout, e.g. a ``git worktree`` of the commit before, to time it the same way on the same machine).

    .venv/bin/python bench/spend_cap_plan.py [--cells 2000] [--repeat 2] [--tree PATH]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def overlay(work: Path, cells: int, capped: bool) -> Path:
    """The embedded default (its models, evals and agents) with enough claude agents for ``cells`` agent cells."""
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    per_agent = len(default["models"]) * len(default["evals"])
    claude = {"kind": "cli-agent", "cli": "claude", "model": "claude-sonnet-4-5", "hours": 1,
              "keys": ["ANTHROPIC_API_KEY"], "max_spend_usd": 5}  # fmt: skip
    agents = default["agents"] + [{"id": f"claude-{i}", **claude} for i in range(-(-cells // per_agent))]
    spend = {"prices": str(REPO / "config" / "prices.yaml"), **({"max_usd": 1000} if capped else {})}
    path = work / f"overlay-{'capped' if capped else 'uncapped'}.yaml"
    path.write_text(yaml.safe_dump({"agents": agents, "spend": spend, "matrix": {"agents": "all"}}))
    return path


def timed(argv: list[str], cwd: Path, tree: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one command (CPU: user + sys of the process tree), with ``tree``'s package first on
    the path (the venv's ptflow is this checkout's); fails loudly."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stdout[-3000:]}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose workflow is timed")
    args = parser.parse_args()
    times: dict[str, list[tuple[float, float]]] = {"without spend.max_usd": [], "with spend.max_usd": []}
    with tempfile.TemporaryDirectory(prefix="spend-cap-plan-") as tmp:
        work = Path(tmp)
        configs = {"without spend.max_usd": overlay(work, args.cells, False),
                   "with spend.max_usd": overlay(work, args.cells, True)}  # fmt: skip
        for _ in range(args.repeat):
            for name, path in configs.items():
                run_dir = work / name.replace(" ", "_")
                run_dir.mkdir(exist_ok=True)
                argv = [str(BIN / "snakemake"), "-n", "-s", str(args.tree / "Snakefile"), "--directory", str(run_dir),
                        "--configfile", str(path)]  # fmt: skip
                times[name].append(timed(argv, run_dir, args.tree.resolve()))
    load = os.getloadavg()[0]
    print(f"{args.cells} agent cells, workflow of {args.tree}, load {load:.1f}, {args.repeat} runs each (median):")
    for name, runs in times.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"  snakemake -n {name:<22} {wall:6.1f} s wall  {cpu:6.1f} s CPU   (runs: "
              + ", ".join(f"{w:.1f}" for w, _ in runs) + ")")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
