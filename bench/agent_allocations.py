"""Agent cells on the Slurm test cluster behind a busy GPU queue, for this tree and an earlier commit: printed, not
asserted.

The queue wait W is ``sbatch --begin=now+W`` on the site's train and evaluate requests (tests/slurm/localtest.yaml
otherwise): every GPU job waits W after its submission, as it would behind other users' jobs. The matrix: the tiny
model, eval ``add``, the baseline and two scripted agents (tests/e2e/agents_scripted.yaml's ``scripted``), through the
Slurm profile. Per tree: per agent cell the Slurm jobs that held a GPU (the plugin's logs name each job's rule and
cell; sacct says what it held), the seconds from the agent's end to its evaluation's start (log timestamps: the train
log's agent line, then the train log's "evaluating in the train job's allocation" or the evaluate log's first line),
and the run's makespan (Snakemake's start to its exit).

--before REV (default 7594167, the last commit that evaluated an agent cell in an evaluate job of its own) runs from
a git worktree of that commit, its package first on PYTHONPATH.

    PTFLOW_SLURM_EXISTING=1 .venv/bin/python bench/agent_allocations.py [--wait 60] [--before REV]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import time
import uuid
from datetime import datetime
from pathlib import Path

import yaml
from _slurm import REPO, WORK_ROOT, SnakemakeRun, attach

CELLS = Path("results") / "cells" / "ptflow--tiny-llama-h64" / "add"
AGENTS = ("scripted", "scripted-2")
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] (.*)$")


def stamps(log: Path) -> list[tuple[float, str]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = STAMP.match(line)
        if m:
            out.append((datetime.fromisoformat(m.group(1)).timestamp(), m.group(2)))
    return out


def overlay(work: Path) -> Path:
    raw = yaml.safe_load((REPO / "tests" / "e2e" / "agents_scripted.yaml").read_text())
    scripted = next(a for a in raw["agents"] if a["id"] == "scripted")
    raw["agents"] = [{"id": "baseline", "kind": "baseline"}, scripted, {**scripted, "id": "scripted-2"}]
    path = work / "overlay.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def site(work: Path, wait: int) -> Path:
    raw = yaml.safe_load((REPO / "tests" / "slurm" / "localtest.yaml").read_text())
    for stage in ("train", "evaluate"):
        raw["resources"][stage]["extra"] = f"--begin=now+{wait}"
    path = work / "busy.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def gpu_jobs(work: Path, env: dict, agent: str) -> list[str]:
    """Rules of this cell's Slurm jobs that held a GPU (sacct AllocTRES)."""
    held = []
    for rule in ("train", "evaluate"):
        for log in (work / ".snakemake" / "slurm_logs" / f"rule_{rule}").rglob("*.log"):
            if f"agent={agent}" not in str(log) and agent not in log.parent.name.split("_"):
                continue
            tres = subprocess.run(["sacct", "-nPX", "-j", log.stem, "-o", "AllocTRES"], capture_output=True,
                                  text=True, env=env).stdout  # fmt: skip
            if "gres/gpu" in tres:
                held.append(rule)
    return held


def run_tree(tree: Path, cluster, wait: int) -> dict:
    work = WORK_ROOT / f"bench-alloc-{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True)
    env = {**cluster.env, "PTFLOW_FAKE_KEY": "fake-key", "PYTHONPATH": f"{tree / 'src'}:{tree}"}
    args = ["--configfile", str(overlay(work)), "--config", f"site={site(work, wait)}"]
    t0 = time.monotonic()
    run = SnakemakeRun(work, env, args, snakefile=tree / "Snakefile")
    try:
        rc = run.wait(timeout=1800)
    finally:
        run.stop()
    out = {"rc": rc, "makespan_s": round(time.monotonic() - t0), "cells": {}}
    logs = work / "results" / "logs"
    for agent in AGENTS:
        train = stamps(logs / "train" / "ptflow--tiny-llama-h64" / "add" / f"{agent}.log")
        ended = next((t for t, m in train if m.startswith(f"agent {agent}: ")), None)
        here = next((t for t, m in train if m.startswith("evaluating in the train job's allocation")), None)
        evaluate = stamps(logs / "evaluate" / "ptflow--tiny-llama-h64" / "add" / f"{agent}.log")
        started = here if here is not None else (evaluate[0][0] if evaluate else None)
        out["cells"][agent] = {
            "gpu_jobs": gpu_jobs(work, cluster.env, agent),
            "agent_end_to_evaluation_s": None if ended is None or started is None else round(started - ended),
        }
    if rc != 0:
        print(run.tail())
    shutil.rmtree(work, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wait", type=int, default=60, help="seconds each GPU job waits in the queue (W)")
    ap.add_argument("--before", default="7594167")
    ap.add_argument("--this-tree-only", action="store_true", help="measure this tree alone")
    args = ap.parse_args()
    cluster, started = attach()
    before = Path(f"/tmp/ptflow-before-{args.before}")
    if not before.exists() and not args.this_tree_only:
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(before), args.before], check=True)
    trees = [("this tree", REPO)] if args.this_tree_only else [("before " + args.before, before), ("this tree", REPO)]
    try:
        for name, tree in trees:
            result = run_tree(tree, cluster, args.wait)
            print(f"{name}: W = {args.wait} s, makespan {result['makespan_s']} s (exit {result['rc']})")
            for agent, cell in result["cells"].items():
                print(f"  {agent}: GPU jobs {len(cell['gpu_jobs'])} ({', '.join(cell['gpu_jobs'])}), agent end -> "
                      f"evaluation start {cell['agent_end_to_evaluation_s']} s")  # fmt: skip
    finally:
        if before.exists():
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)], check=False)
        if started:
            cluster.stop()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
