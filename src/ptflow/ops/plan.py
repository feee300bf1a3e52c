"""``ptflow plan``: what a run will do and request, read from Snakemake's own dry-run (no second planner).

Every planned job of ``snakemake -n`` is parsed with its rule, wildcards, outputs and reason; its Slurm jobs come
from the site the way the rule gets them (``ptflow.config.rules``: the rule's stage, per agent for the train rules),
including the GPU job a login-node supervisor submits for ``train_supervised`` (a dry-run prints no threads and
nothing of those). The figures (GPU-, node- and CPU-hours per partition and account, at attempt 1) are those
requests x runtime of exactly the planned jobs, and cells get a state from the plan plus the files (done, to run,
failed before, stale).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ptflow.cluster import images
from ptflow.config.layout import Layout
from ptflow.config.model import Cell, Config
from ptflow.config.rules import LOGIN_NODE_RULES, RULE_STAGES, SUPERVISOR_RULES, TRAIN_RULES
from ptflow.config.sites import Request as SiteRequest
from ptflow.config.sites import Site
from ptflow.ops.status import rule_log_failed, valid_eval_json

DONE, TO_RUN, FAILED_BEFORE, STALE = "done", "to run", "failed before", "stale"
CELL_STATES = (DONE, TO_RUN, FAILED_BEFORE, STALE)

_RULE = re.compile(r"^(local)?rule (\w+):\s*$")
_FIELD = re.compile(r"^\s{4}(\w+): (.*)$")
_STATS_ROW = re.compile(r"^(\w+)\s+(\d+)\s*$")


@dataclass(frozen=True)
class JobRequest:
    """One Slurm job's request as sbatch gets it: partition, account, whole-job CPUs (--cpus-per-task x --ntasks)
    and GPUs (gres per node x nodes), nodes, memory per node (MB) and time limit (minutes); ``stage`` is the site
    request it is, ``by`` who submits it (the slurm plugin, or ptflow's login-node supervisor)."""

    stage: str
    partition: str
    account: str
    cpus: int
    gpus: int
    nodes: int
    mem_mb: int | None
    runtime: int
    by: str = "plugin"

    @classmethod
    def of(cls, stage: str, req: SiteRequest, by: str = "plugin") -> JobRequest:
        res = req.snakemake_resources()
        return cls(
            stage=stage,
            partition=res.get("slurm_partition") or "(default)",
            account=req.account or "(default)",
            cpus=req.cpus,
            gpus=req.gpus_total,
            nodes=req.nodes,
            mem_mb=res.get("mem_mb"),
            runtime=int(res.get("runtime") or 0),
            by=by,
        )


@dataclass
class PlannedJob:
    rule: str
    jobid: str
    wildcards: dict[str, str] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    reason: str = ""
    # The Slurm jobs it makes, at attempt 1, from the site the way the rule gets them (job_requests): the dry-run
    # prints no threads, nothing of what a login-node supervisor submits, and not reliably which rules are local
    # (Snakemake 9 prints `rule edf:` for a localrule under the slurm executor). Its own request first.
    requests: list[JobRequest] = field(default_factory=list)

    @property
    def runtime_min(self) -> float:
        return float(self.requests[0].runtime) if self.requests else 0.0

    @property
    def submitted(self) -> bool:
        """Whether the job makes a request (``all`` and edf do not; nor requests without runtime)."""
        return self.runtime_min > 0


def job_requests(site: Site, cfg: Config, rule: str, wildcards: dict[str, str]) -> list[JobRequest]:
    """The Slurm jobs a planned job makes: the request of its rule's stage (per agent for the train rules), submitted
    by the plugin; for supervisor rules (ptflow.config.rules) the same request submitted by the supervisor, after the
    helper requests of the agent's kind (``site_requests``). ``all`` and the other login-node rules make none."""
    stage = RULE_STAGES.get(rule)
    if stage is None or (rule in LOGIN_NODE_RULES and rule not in SUPERVISOR_RULES):
        return []
    if rule == "image":
        stage = images.image_stage(site.runtime, wildcards["image"])
    agent = cfg.agent_for(wildcards["agent"]) if rule in TRAIN_RULES else None
    if rule not in SUPERVISOR_RULES:
        return [JobRequest.of(stage, site.request(stage, agent))]
    own = JobRequest.of(stage, site.request(stage, agent), by="supervisor")
    helpers = [JobRequest.of(s, site.request(s), by="supervisor") for s in agent.spec.site_requests]
    return [own, *helpers]


def parse_dry_run(text: str) -> tuple[list[PlannedJob], dict[str, int]]:
    """The jobs of a dry-run log, and its ``Job stats`` table (rule -> count)."""
    jobs: list[PlannedJob] = []
    cur: PlannedJob | None = None
    lines = text.splitlines()
    for line in lines:
        m = None if line.startswith(" ") else _RULE.match(line)  # a job's fields are indented, its rule line is not
        if m:
            cur = PlannedJob(rule=m.group(2), jobid="")
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
    stats: dict[str, int] = {}
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
    # into a file, read once: a pipe read in 32 KiB turns is ~80,000 polls for the megabytes of 10,000 cells
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, text=True, cwd=cwd, env=env)
        out.seek(0)
        text = out.read()
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
    """Requests x runtime per (partition, account), at attempt 1; every Slurm job a planned job makes counts."""
    acc: dict[tuple[str, str], Request] = {}
    for j in jobs:
        if not j.submitted:
            continue
        for req in j.requests:
            r = acc.setdefault((req.partition, req.account), Request(req.partition, req.account))
            hours = req.runtime / 60
            r.jobs += 1
            r.gpu_hours += req.gpus * hours
            r.node_hours += req.nodes * hours
            r.cpu_hours += req.cpus * hours
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
        if (j.rule in TRAIN_RULES or j.rule == "evaluate") and {"model", "eval", "agent"} <= w.keys():
            planned[Cell(w["model"], w["eval"], w["agent"])].append(j)
    root = str(workdir)

    def existing(relative: str) -> Path | None:
        """The file, if it is one (a fresh matrix has none: os.path, not a Path per file, for 10,000 cells)."""
        path = os.path.join(root, relative)
        return Path(path) if os.path.isfile(path) else None

    out = {}
    for cell in cfg.cells:
        mine = planned.get(cell, [])
        eval_json = existing(layout.eval_json(cell.model, cell.eval, cell.agent))
        valid = eval_json is not None and valid_eval_json(eval_json, cell)
        reasons = "; ".join(f"{j.rule}: {j.reason}" for j in mine)
        logs = (existing(layout.log(r, cell.model, cell.eval, cell.agent)) for r in ("train", "evaluate"))
        failed = any(log is not None and rule_log_failed(log) for log in logs) or any(
            "Incomplete output files" in j.reason for j in mine
        )
        if not mine:
            state = DONE if valid else TO_RUN
        elif failed and not valid:
            state = FAILED_BEFORE
        elif valid or (
            existing(layout.manifest(cell.model, cell.eval, cell.agent)) and any(j.rule in TRAIN_RULES for j in mine)
        ):
            state = STALE  # outputs exist, but Snakemake's rerun triggers (params, code, inputs) plan them again
        else:
            state = TO_RUN
        out[cell.key] = {"state": state, "jobs": [j.rule for j in mine], "reason": reasons}
    return out


def make_plan(cfg: Config, site: Site, layout: Layout, workdir: Path, dry_run_text: str) -> Plan:
    jobs, stats = parse_dry_run(dry_run_text)  # a finished workflow's dry-run has no job blocks: no jobs
    # A job's requests depend on its rule, the agent slot of a train rule and an image's stage only: priced once per
    # such key, not once per job (10,000 cells have a few hundred keys). JobRequest is frozen: the lists are shared.
    priced: dict[tuple, list[JobRequest]] = {}
    for j in jobs:
        w = j.wildcards
        key = (j.rule, w.get("agent") if j.rule in TRAIN_RULES else None, w.get("image"))
        if key not in priced:
            priced[key] = job_requests(site, cfg, j.rule, w)
        j.requests = priced[key]
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
    lines += ["", "Request (attempt 1; the site's requests x runtime; CPUs = cpus-per-task x tasks)"]
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
