"""Seconds from an agent cell's start to the agent's first API request, per real CLI (claude, codex, gemini at
their pins): what a cell spends before the agent thinks at all — task dir, the private HF cache view (a copy of the
base model's repo here: no fuse-overlayfs on this machine), the CLI's settings in its private home, and the CLI's
own start-up (Node, its bundle, its relaunch). Measured with ptflow's ``train_agent_cell`` (the code a train job
runs) against the provider STAND-IN of tests/support/providers (trajectory: one final answer), on a synthetic HF
cache in the hub layout holding a model repo of ``--mib`` MiB. Printed, not asserted.

Usage: .venv/bin/python bench/agent_cli_startup.py [--repeats 3] [--mib 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from ptflow.stages.train.agent.cell import train_agent_cell  # noqa: E402
from tests.support.agent_cells import agent_job  # noqa: E402
from tests.support.agent_clis import cli_bin_dir  # noqa: E402
from tests.support.providers import ProviderStandIn, Step  # noqa: E402

AGENTS = {
    "claude": ("claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
    "codex": ("gpt-5.1-codex-max", "OPENAI_API_KEY"),
    "gemini": ("gemini-3-pro-preview", "GEMINI_API_KEY"),
}


def hf_cache(root: Path, mib: int) -> Path:
    repo = root / "hub" / "models--org--base"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc").mkdir(parents=True)
    chunk = os.urandom(1 << 20)
    with open(repo / "blobs" / "w", "wb") as fh:
        for _ in range(mib):
            fh.write(chunk)
    (repo / "snapshots" / "abc" / "model.safetensors").symlink_to("../../blobs/w")
    return repo / "snapshots" / "abc"


def one(cli: str, work: Path, hf_home: Path, snapshot: Path) -> dict:
    model, key = AGENTS[cli]
    os.environ[key] = "sk-FAKE-bench"
    with ProviderStandIn(trajectory=[Step(text="Done.")]) as api:
        spec = {"id": f"bench-{cli}", "cli": cli, "model": model, "hours": 0.05, "grace_minutes": 0.1, "keys": [key],
                "trace_dir": str(work / "trace"), "base_url": api.url, "hf_home": str(hf_home)}  # fmt: skip
        t0 = time.time()
        cell = {"model": "org/base", "eval": "e"}
        result = train_agent_cell(
            agent_job(str(snapshot), None, work / "out", agent=spec, cell=cell, log=lambda _: None)
        )
        first = min(r["time"] for r in api.records)
    staging = result["agent_run"]["staging_seconds"]
    return {"first_request": first - t0, "staging": staging, "cli": first - t0 - staging,
            "view": result["agent_run"]["hf_view"]["method"]}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mib", type=int, default=64, help="size of the base model's repo in the HF cache")
    args = ap.parse_args()
    bins = [str(cli_bin_dir(name)) for name in AGENTS]
    os.environ["PATH"] = ":".join([*bins, os.environ["PATH"]])
    print(f"{'cli':8} {'to first request':>18} {'staging (task dir + HF view)':>30} {'CLI start-up':>14}  view")
    with tempfile.TemporaryDirectory(prefix="ptflow-bench-cli-") as tmp:
        snapshot = hf_cache(Path(tmp) / "hf", args.mib)
        os.environ["TMPDIR"] = str(Path(tmp) / "node-tmp")
        Path(os.environ["TMPDIR"]).mkdir()
        for cli in AGENTS:
            runs = [one(cli, Path(tempfile.mkdtemp(dir=tmp)), Path(tmp) / "hf", snapshot) for _ in range(args.repeats)]
            med = {k: statistics.median(r[k] for r in runs) for k in ("first_request", "staging", "cli")}
            spread = max(r["first_request"] for r in runs) - min(r["first_request"] for r in runs)
            print(f"{cli:8} {med['first_request']:>12.2f} s ±{spread / 2:.2f} {med['staging']:>28.2f} s "
                  f"{med['cli']:>12.2f} s  {runs[0]['view']}")  # fmt: skip
    print(f"(median of {args.repeats}; base model repo {args.mib} MiB; load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
