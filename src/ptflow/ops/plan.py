"""``ptflow plan``: what a run will do and request, read from Snakemake's own dry-run (no second planner).

Every planned job of ``snakemake -n`` is parsed with its rule, wildcards, outputs, reason and resources; the
figures (GPU-, node- and CPU-hours per partition and account, at attempt 1) are resources x runtime of exactly
those jobs, and cells get a state from the plan plus the files (done, to run, failed before, stale).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ptflow.cluster import slurm
from ptflow.config.layout import Layout
from ptflow.config.model import Cell, Config
from ptflow.ops.status import rule_log_failed, valid_eval_json

DONE, TO_RUN, FAILED_BEFORE, STALE = "done", "to run", "failed before", "stale"
CELL_STATES = (DONE, TO_RUN, FAILED_BEFORE, STALE)

_RULE = re.compile(r"^(local)?rule (\w+):\s*$")
_FIELD = re.compile(r"^\s{4}(\w+): (.*)$")
_STATS_ROW = re.compile(r"^(\w+)\s+(\d+)\s*$")


@dataclass
class PlannedJob:
    rule: str
    jobid: str
    local: bool
    wildcards: dict[str, str] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    reason: str = ""
    resources: dict[str, str] = field(default_factory=dict)
    threads: int = 1

    @property
    def runtime_min(self) -> float:
        try:
            return float(self.resources.get("runtime", 0))
        except ValueError:
            return 0.0

    @property
    def nodes(self) -> int:
        try:
            return int(self.resources.get("nodes", 1))
        except ValueError:
            return 1

    @property
    def gpus(self) -> int:
        """GPUs of the whole job: gres ``gpu[:type]:N`` is per node (x nodes); resource ``gpu`` is a total."""
        per_node = slurm.gpus_in_gres(self.resources.get("gres", ""))
        if per_node:
            return per_node * self.nodes
        try:
            return int(self.resources.get("gpu", 0))
        except ValueError:
            return 0

    @property
    def cpus(self) -> int:
        """CPUs of the whole job: cpus per task (threads, or resource cpus_per_task) x tasks."""
        try:
            per_task = int(self.resources.get("cpus_per_task", self.threads))
        except ValueError:
            per_task = self.threads
        try:
            tasks = int(self.resources.get("tasks", 1)) or 1
        except ValueError:
            tasks = 1
        return per_task * tasks

    @property
    def submitted(self) -> bool:
        """Whether the job makes a request (local rules such as ``all`` and jobs without runtime do not)."""
        return not self.local and self.runtime_min > 0


def _split_resources(text: str) -> dict[str, str]:
    """``a=1, b=x, slurm_extra=--tmp=1024M --signal=..`` -> dict (values may contain ``=`` but not ``, ``)."""
    out = {}
    for item in re.split(r",\s(?=\w+=)", text):
        key, _, value = item.partition("=")
        out[key.strip()] = value.strip()
    return out


def parse_dry_run(text: str) -> tuple[list[PlannedJob], dict[str, int]]:
    """The jobs of a dry-run log, and its ``Job stats`` table (rule -> count)."""
    jobs: list[PlannedJob] = []
    cur: PlannedJob | None = None
    for line in text.splitlines():
        m = _RULE.match(line)
        if m:
            cur = PlannedJob(rule=m.group(2), jobid="", local=bool(m.group(1)))
            jobs.append(cur)
            continue
        if cur is None:
            continue
        f = _FIELD.match(line)
        if not f:
            if line.strip() and not line.startswith("    "):
                cur = None
            continue
        key, value = f.group(1), f.group(2).strip()
        if key == "jobid":
            cur.jobid = value
        elif key == "input":
            cur.inputs = [p.strip() for p in value.split(", ")]
        elif key == "output":
            cur.outputs = [p.strip() for p in value.split(", ")]
        elif key == "reason":
            cur.reason = value
        elif key == "wildcards":
            cur.wildcards = {k: v for k, _, v in (w.partition("=") for w in value.split(", "))}
        elif key == "resources":
            cur.resources = _split_resources(value)
        elif key == "threads":
            cur.threads = int(value)
    stats: dict[str, int] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Job stats:":
            for row in lines[i + 3 :]:
                m = _STATS_ROW.match(row.strip())
                if not m:
                    break
                if m.group(1) != "total":
                    stats[m.group(1)] = int(m.group(2))
            break
    # The same job appears once per dry-run; dedupe by jobid in case a log repeats a block.
    seen, unique = set(), []
    for j in jobs:
        if j.jobid and j.jobid in seen:
            continue
        seen.add(j.jobid)
        unique.append(j)
    return unique, stats


def dry_run(snakemake_args: list[str], cwd: Path | None = None, env: dict | None = None) -> str:
    """Run ``snakemake -n`` with the user's arguments (``--quiet`` removed: it hides the per-job blocks)."""
    import logging

    args = [a for a in snakemake_args if a not in ("-q", "--quiet") and not a.startswith("--quiet=")]
    argv = [str(Path(sys.executable).with_name("snakemake")), "--dry-run", *args]
    logging.getLogger("ptflow.plan").info("run: %s", argv)
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(
            f"snakemake --dry-run failed ({proc.returncode}): fix the error below and retry\n{text[-4000:]}"
        )
    return text


@dataclass
class Request:
    partition: str
    account: str
    jobs: int = 0
    gpu_hours: float = 0.0
    node_hours: float = 0.0
    cpu_hours: float = 0.0


@dataclass
class Plan:
    jobs: list[PlannedJob]
    stats: dict[str, int]
    cells: dict[str, dict]  # cell key -> {state, jobs: [rules], reason}
    requests: list[Request]
    longest_chain: list[PlannedJob]

    @property
    def jobs_per_rule(self) -> dict[str, int]:
        return dict(Counter(j.rule for j in self.jobs))

    def cell_counts(self) -> dict[str, int]:
        out = dict.fromkeys(CELL_STATES, 0)
        for c in self.cells.values():
            out[c["state"]] += 1
        return out

    def totals(self) -> dict[str, float]:
        return {
            "jobs": sum(r.jobs for r in self.requests),
            "gpu_hours": round(sum(r.gpu_hours for r in self.requests), 4),
            "node_hours": round(sum(r.node_hours for r in self.requests), 4),
            "cpu_hours": round(sum(r.cpu_hours for r in self.requests), 4),
        }

    def chain_minutes(self) -> float:
        return sum(j.runtime_min for j in self.longest_chain)

    def to_json(self) -> dict:
        return {
            "jobs_per_rule": self.jobs_per_rule,
            "dry_run_job_stats": self.stats,
            "cells": self.cells,
            "cell_counts": self.cell_counts(),
            "requests": [
                {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(r).items()} for r in self.requests
            ],
            "totals": self.totals(),
            "longest_chain": {
                "minutes": self.chain_minutes(),
                "jobs": [
                    {"rule": j.rule, "wildcards": j.wildcards, "runtime": j.runtime_min} for j in self.longest_chain
                ],
            },
            "jobs": [asdict(j) for j in self.jobs],
        }


def requests(jobs: list[PlannedJob]) -> list[Request]:
    """Resources x runtime per (partition, account), attempt 1 (the dry-run shows attempt-1 resources)."""
    acc: dict[tuple[str, str], Request] = {}
    for j in jobs:
        if not j.submitted:
            continue
        part = j.resources.get("slurm_partition", "(default)")
        account = j.resources.get("slurm_account", "(default)")
        r = acc.setdefault((part, account), Request(part, account))
        hours = j.runtime_min / 60
        r.jobs += 1
        r.gpu_hours += j.gpus * hours
        r.node_hours += j.nodes * hours
        r.cpu_hours += j.cpus * hours
    return sorted(acc.values(), key=lambda r: (r.partition, r.account))


def longest_chain(jobs: list[PlannedJob]) -> list[PlannedJob]:
    """The longest path (by runtime, then job count) through the planned jobs; edges = output -> input."""
    producer = {out: j for j in jobs for out in j.outputs}
    memo: dict[str, tuple[float, int, list[PlannedJob]]] = {}

    def best(j: PlannedJob) -> tuple[float, int, list[PlannedJob]]:
        if j.jobid in memo:
            return memo[j.jobid]
        parents = {producer[i].jobid: producer[i] for i in j.inputs if i in producer and producer[i] is not j}
        top: tuple[float, int, list[PlannedJob]] = (0.0, 0, [])
        for p in parents.values():
            cand = best(p)
            if (cand[0], cand[1]) > (top[0], top[1]):
                top = cand
        memo[j.jobid] = (top[0] + j.runtime_min, top[1] + 1, [*top[2], j])
        return memo[j.jobid]

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    paths = [best(j) for j in jobs if j.submitted]
    if not paths:
        return []
    return max(paths, key=lambda t: (t[0], t[1]))[2]


def cell_states(cfg: Config, layout: Layout, workdir: Path, jobs: list[PlannedJob]) -> dict[str, dict]:
    """Per cell: done (nothing planned, valid eval.json), to run, failed before, stale (outputs exist, out of date)."""
    planned: dict[Cell, list[PlannedJob]] = defaultdict(list)
    for j in jobs:
        w = j.wildcards
        if j.rule == "train_supervised":  # the same training, run by a login-node supervisor
            j.rule = "train"
        if j.rule in ("train", "evaluate") and {"model", "eval", "agent"} <= w.keys():
            planned[Cell(w["model"], w["eval"], w["agent"])].append(j)
    out = {}
    for cell in cfg.cells:
        mine = planned.get(cell, [])
        eval_json = workdir / layout.eval_json(cell.model, cell.eval, cell.agent)
        manifest = workdir / layout.manifest(cell.model, cell.eval, cell.agent)
        valid = valid_eval_json(eval_json, cell)
        reasons = "; ".join(f"{j.rule}: {j.reason}" for j in mine)
        failed = any(
            rule_log_failed(workdir / layout.log(r, cell.model, cell.eval, cell.agent)) for r in ("train", "evaluate")
        ) or any("Incomplete output files" in j.reason for j in mine)
        if not mine:
            state = DONE if valid else TO_RUN
        elif failed and not valid:
            state = FAILED_BEFORE
        elif valid or (manifest.is_file() and any(j.rule == "train" for j in mine)):
            state = STALE  # outputs exist, but Snakemake's rerun triggers (params, code, inputs) plan them again
        else:
            state = TO_RUN
        out[cell.key] = {"state": state, "jobs": [j.rule for j in mine], "reason": reasons}
    return out


def make_plan(cfg: Config, layout: Layout, workdir: Path, dry_run_text: str) -> Plan:
    jobs, stats = parse_dry_run(dry_run_text)
    if "Nothing to be done" in dry_run_text:
        jobs, stats = [], {}
    return Plan(jobs, stats, cell_states(cfg, layout, workdir, jobs), requests(jobs), longest_chain(jobs))


def render(plan: Plan) -> str:
    lines = ["Cells"]
    for state, n in plan.cell_counts().items():
        lines.append(f"  {state:<14} {n}")
    for key, c in plan.cells.items():
        if c["state"] in (FAILED_BEFORE, STALE):
            lines.append(f"    {c['state']}: {key} ({c['reason'][:160]})")
    lines += ["", "Jobs per rule"]
    for rule, n in sorted(plan.jobs_per_rule.items()):
        lines.append(f"  {rule:<14} {n}")
    lines.append(f"  {'total':<14} {len(plan.jobs)}")
    lines += ["", "Request (attempt 1; resources x runtime)"]
    lines.append(f"  {'partition':<12} {'account':<12} {'jobs':>5} {'GPU-h':>10} {'node-h':>10} {'CPU-h':>10}")
    for r in plan.requests:
        figures = f"{r.gpu_hours:>10.2f} {r.node_hours:>10.2f} {r.cpu_hours:>10.2f}"
        lines.append(f"  {r.partition:<12} {r.account:<12} {r.jobs:>5} {figures}")
    t = plan.totals()
    figures = f"{t['gpu_hours']:>10.2f} {t['node_hours']:>10.2f} {t['cpu_hours']:>10.2f}"
    lines.append(f"  {'total':<12} {'':<12} {t['jobs']:>5} {figures}")
    chain = plan.longest_chain
    lines += ["", f"Longest chain: {len(chain)} jobs, {plan.chain_minutes():.0f} min of requested runtime"]
    for j in chain:
        wc = ",".join(f"{k}={v}" for k, v in j.wildcards.items())
        lines.append(f"  {j.rule}[{wc}] {j.runtime_min:.0f} min")
    return "\n".join(lines)
