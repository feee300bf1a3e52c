"""What an agent cell's workspace sync costs (issue 35): a 1 GiB task dir, then 10 MiB changed.

    .venv/bin/python bench/sync_cost.py [--dir DIR] [--gib 1] [--changed-mib 10]

Prints the seconds of ``sync_workspace`` (unchanged files hard-linked from the previous copy, changed ones copied)
against a whole copy of the dir (``shutil.copytree``, what every sync did before), on the same files, median of 3.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from ptflow.stages.train.agent.task_dir import sync_workspace


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=None, help="where to make the task dir (default: a temporary dir)")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--changed-mib", type=float, default=10.0)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ptflow-sync-", dir=args.dir))
    try:
        task, ws, whole = root / "task", root / "resume" / "workspace", root / "whole"
        (task / "final_model").mkdir(parents=True)
        chunk = os.urandom(1 << 20)
        for i in range(4):  # four shards, as a saved model has
            with open(task / "final_model" / f"model-{i}.safetensors", "wb") as f:
                for _ in range(int(args.gib * 256)):
                    f.write(chunk)
        for i in range(200):  # the agent's scripts and logs
            (task / f"script_{i}.py").write_text("print('x')\n" * 50)
        first = timed(lambda: sync_workspace(task, ws))
        rows = []
        for n in range(3):
            with open(task / f"changed-{n}.bin", "wb") as f:  # what the agent wrote since the last sync
                for _ in range(int(args.changed_mib)):
                    f.write(chunk)
            os.sync()
            incremental = timed(lambda: sync_workspace(task, ws))
            shutil.rmtree(whole, ignore_errors=True)
            os.sync()
            full = timed(lambda: shutil.copytree(task, whole, symlinks=True))
            rows.append((incremental, full))
        print(f"task dir {args.gib:g} GiB + 200 small files; first sync (everything copied) {first:.2f} s")
        print(f"after {args.changed_mib:g} MiB changed: sync {statistics.median(r[0] for r in rows):.3f} s "
              f"(median of 3), whole copy {statistics.median(r[1] for r in rows):.2f} s")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
