"""Staging inside a GPU job: the one piece left is the private HF cache view when fuse-overlayfs is not usable (a
copy into the job's node-local $TMPDIR, ptflow.cluster.hfview). Downloads run in CPU cache jobs, images in CPU image
jobs, and jobs in a runtime get HF_HUB_OFFLINE=1, so nothing else is fetched or built while GPUs are held.

Measured here on a synthetic cache in the hub layout (N model repos of S MiB each, blobs + snapshot symlinks, plus a
dataset repo): the time a job spends making its view, for
- a copy of the whole cache (what every agent cell without overlay did before),
- a copy of the job's own model repo only (agent cells now: ``models=[base model]``),
- fuse-overlayfs (when this machine can mount it).
Also the view of the workflow's own demo cache, if ``--demo-cache`` names one. Printed, not asserted.

Usage: .venv/bin/python bench/staging_in_jobs.py [--models 4] [--mib 256] [--demo-cache .scratch/hf_home]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from ptflow.cluster import hfview  # noqa: E402


def synthetic_cache(root: Path, models: int, mib: int) -> list[str]:
    ids = [f"org/model-{i}" for i in range(models)]
    chunk = os.urandom(1 << 20)
    for repo in [*(f"models--{i.replace('/', '--')}" for i in ids), "datasets--org--data"]:
        blobs, snap = root / "hub" / repo / "blobs", root / "hub" / repo / "snapshots" / "abc"
        blobs.mkdir(parents=True)
        snap.mkdir(parents=True)
        size = mib if repo.startswith("models--") else max(mib // 16, 1)
        with open(blobs / "w", "wb") as fh:
            for _ in range(size):
                fh.write(chunk)
        (snap / "model.safetensors").symlink_to("../../blobs/w")
    return ids


def timed(shared: Path, work: Path, **kw) -> tuple[float, int, str]:
    t0 = time.monotonic()
    try:
        view = hfview.open_view(shared, work, log=lambda m: None, **kw)
    except RuntimeError as exc:
        return float("nan"), 0, f"unavailable: {exc}"
    seconds = time.monotonic() - t0
    out = (seconds, view.bytes, view.method)
    hfview.close_view(view, log=lambda m: None)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=4)
    ap.add_argument("--mib", type=int, default=256, help="size of each model repo")
    ap.add_argument("--demo-cache", help="an HF_HOME made by the workflow (e.g. .scratch/hf_home after make demo)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ptflow-bench-staging-", dir=os.environ.get("TMPDIR")) as tmp:
        shared = Path(tmp) / "shared"
        ids = synthetic_cache(shared, args.models, args.mib)
        rows = [
            ("copy, whole cache (before)", timed(shared, Path(tmp) / "v1", method="copy")),
            ("copy, the job's model only (now)", timed(shared, Path(tmp) / "v2", method="copy", models=[ids[0]])),
            ("fuse-overlayfs", timed(shared, Path(tmp) / "v3", method="overlay")),
        ]
        print(f"HF cache view made inside a job: {args.models} model repos x {args.mib} MiB + a dataset repo")
        for label, (seconds, size, how) in rows:
            rate = f"{size / 2**20 / seconds:7.0f} MiB/s" if size and seconds == seconds else ""
            print(f"  {label:34s} {seconds:7.2f} s  {size / 2**20:8.1f} MiB copied {rate}  [{how}]")
        if args.demo_cache:
            seconds, size, how = timed(Path(args.demo_cache), Path(tmp) / "demo", method="copy")
            print(f"  {'copy of the demo cache':34s} {seconds:7.2f} s  {size / 2**20:8.1f} MiB copied  [{how}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
