"""Time the embedded default end to end (what `make demo` runs after installation) and print the leaderboard.

Usage: .venv/bin/python bench/demo_time.py [--keep]
Runs in a fresh temporary working directory, so nothing is reused from an earlier run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ptflow-demo-"))
    # absolute: the run's directory is a temporary one, and a relative PATH would make sys.executable relative
    snakemake = str(Path(os.path.abspath(sys.executable)).with_name("snakemake"))
    cmd = [
        snakemake,
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(work),
        "--profile",
        str(REPO / "profiles/local"),
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-5000:], sep="\n")
        return proc.returncode
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())  # other work on the machine stretches the wall time
    print(
        f"embedded default matrix: {seconds:.1f} s wall on {os.cpu_count()} cores (29 jobs, fresh directory); "
        f"load average at the end {load}"
    )
    print((work / "results" / "leaderboard.md").read_text())
    if args.keep:
        print(f"kept: {work}")
    else:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
