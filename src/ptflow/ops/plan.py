"""``ptflow plan``: what a run will do and request, read from Snakemake's own dry-run (no second planner).

Every planned job of ``snakemake -n`` is parsed with its rule, wildcards, outputs and reason; its Slurm jobs come
from the site the way the rule gets them (``ptflow.config.rules``: the rule's stage, per agent for the train rules),
including the GPU job a login-node supervisor submits for ``train_supervised`` (a dry-run prints no threads and
nothing of those). The figures (GPU-, node- and CPU-hours per partition and account, at attempt 1) are those
requests x runtime of exactly the planned jobs, and cells get a state from the plan plus the files (done, to run,
failed before, stale).

On a Slurm site it also says how long the run takes under what the cluster lets one user hold at once
(``ptflow.cluster.limits``, and the Slurm profile's ``jobs:``): per partition, the waves its jobs need alone; over
the whole DAG, a list-scheduling simulation under the shared caps, each job lasting its ``expected_runtime`` (else
its time limit) plus the run's own latency per job.
"""

from __future__ import annotations

import heapq
import math
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from ptflow.cluster import images
from ptflow.cluster.limits import Limits
from ptflow.config.layout import Layout
from ptflow.config.matrix import Cell, Config
from ptflow.config.rules import ADOPT_REQUEST, LOGIN_NODE_RULES, RULE_REQUESTS, SUPERVISOR_RULES, TRAIN_RULES
from ptflow.config.sites import Request as SiteRequest
from ptflow.config.sites import Site
from ptflow.ops.status import rule_log_failed, valid_eval_json

DONE, TO_RUN, FAILED_BEFORE, STALE = "done", "to run", "failed before", "stale"
CELL_STATES = (DONE, TO_RUN, FAILED_BEFORE, STALE)

_RULE = re.compile(r"^(local)?(?:rule|checkpoint) (\w+):\s*$")  # a checkpoint is a job too
_FIELD = re.compile(r"^\s{4}(\w+): (.*)$")
_STATS_ROW = re.compile(r"^(\w+)\s+(\d+)\s*$")

# The driver's --jobs on Slurm: the profile's `jobs:` (read by profile_jobs), the cap where no cluster limit is lower.
SLURM_PROFILE = Path("profiles") / "slurm" / "config.yaml"
# Seconds a job adds to the run beyond its own runtime: its submission and the status check that sees it end before
# its dependents are submitted. bench/RESULTS.md measures job end -> dependent started at 6 s median (11 s max) with
# the profile's 10 s status interval (profiles/slurm/config.yaml); 15 s leaves room for a busier controller.
JOB_OVERHEAD_S = 15


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
    expected_runtime: float | None = None  # the site's minutes for a usual job of the stage (at most runtime)

    @property
    def minutes(self) -> float:
        """How long the job is counted to run: the site's expected_runtime, else its time limit."""
        return float(self.expected_runtime or self.runtime)

    @property
    def minutes_from(self) -> str:
        return "expected_runtime" if self.expected_runtime else "runtime"

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
            expected_runtime=req.get("expected_runtime"),
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
    """The Slurm jobs a planned job makes: the request of its rule (per agent for the train rules), submitted
    by the plugin; for supervisor rules (ptflow.config.rules) the same request submitted by the supervisor, after the
    helper requests of the agent's kind (``site_requests``). ``all`` and the other login-node rules make none."""
    request = RULE_REQUESTS.get(rule)
    if request is None or (rule in LOGIN_NODE_RULES and rule not in SUPERVISOR_RULES):
        return []
    if rule == "image":
        request = images.image_request(site.runtime, wildcards["image"])
    if rule == "evaluate" and cfg.agent_for(wildcards["agent"]).spec.evaluates_in_train_job:
        request = ADOPT_REQUEST  # evaluated in the train job's allocation; this job adopts it (a CPU job)
    agent = cfg.agent_for(wildcards["agent"]) if rule in TRAIN_RULES else None
    # labelled by the site file's request that sizes it (a judge job by `aggregate` where the site has no `judge`)
    label = site.request_name(request)
    if rule not in SUPERVISOR_RULES:
        return [JobRequest.of(label, site.request(request, agent))]
    own = JobRequest.of(label, site.request(request, agent), by="supervisor")
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
    check_read(text, unique, stats)
    return unique, stats


def check_read(text: str, jobs: list[PlannedJob], stats: dict[str, int]) -> None:
    """Refuse a plan read wrongly: where the dry-run counts its jobs (``Job stats:``), as many job blocks, each with
    its jobid, must have been read. The text is Snakemake's, not an API (tests/unit/test_snakemake_contract.py pins it
    for the installed version); a Snakemake that prints it otherwise stops ``ptflow plan`` here instead of giving
    wrong figures."""
    if "Job stats:" not in text:
        return
    counted = sum(stats.values())
    if stats and len(jobs) == counted and all(j.jobid for j in jobs):
        return
    from importlib.metadata import version

    raise RuntimeError(
        f"ptflow.ops.plan.parse_dry_run read {len(jobs)} job block(s) ({sum(not j.jobid for j in jobs)} without a "
        f"jobid) where the dry-run's Job stats count {counted}: snakemake {version('snakemake')} prints its dry-run "
        "otherwise than the 'rule X:' / '    jobid: N' / '    wildcards: k=v, ...' blocks and the 'Job stats:' "
        "table ptflow reads; no plan is better than a wrong one (run tests/unit/test_snakemake_contract.py)"
    )


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
class PartitionTotals:
    partition: str
    account: str
    jobs: int = 0
    gpu_allocations: int = 0  # jobs that hold a GPU: each one a wait in the GPU queue
    gpu_hours: float = 0.0
    node_hours: float = 0.0
    cpu_hours: float = 0.0


@dataclass(frozen=True)
class Caps:
    """What one run may hold at once on a Slurm site, each with what sets it; None where nothing caps it. Slurm jobs:
    the smallest of the submit cap (queued + running), the running cap and the driver's --jobs (the profile's); GPUs
    and CPUs in use: the cluster's caps (every Slurm job declares gpus_total / cpus_total against them)."""

    jobs: int | None = None
    jobs_by: str = ""
    gpus: int | None = None
    gpus_by: str = ""
    cpus: int | None = None
    cpus_by: str = ""

    @classmethod
    def of(cls, limits: Limits | None, driver_jobs: int | None) -> Caps:
        """``limits`` and the driver's --jobs; a cluster limit equal to --jobs is named, being the one that holds."""
        limits = limits or Limits()
        counts = [(cap.value, key) for key in ("max_submit_jobs", "max_jobs") if (cap := limits.get(key))]
        if driver_jobs is not None:
            counts.append((driver_jobs, "profile jobs"))
        jobs, jobs_by = min(counts, key=lambda c: c[0], default=(None, ""))
        gpus, cpus = limits.max_gpus, limits.max_cpus
        return cls(
            jobs,
            jobs_by,
            gpus.value if gpus else None,
            "max_gpus" if gpus else "",
            cpus.value if cpus else None,
            "max_cpus" if cpus else "",
        )

    def slots(self, gpus: int, cpus: int) -> tuple[int | None, str]:
        """How many jobs holding ``gpus`` and ``cpus`` each may run at once (None: no cap; 0: not one, a job holds
        more than a cap), and the cap that says so."""
        bounds = [(self.jobs, self.jobs_by)]
        if gpus and self.gpus is not None:
            bounds.append((self.gpus // gpus, self.gpus_by))
        if cpus and self.cpus is not None:
            bounds.append((self.cpus // cpus, self.cpus_by))
        return min(((n, by) for n, by in bounds if n is not None), key=lambda b: b[0], default=(None, ""))

    def describe(self) -> str:
        return ", ".join(
            f"{value} {what} at once ({by})" if value is not None else f"{what} uncapped"
            for what, value, by in (
                ("jobs", self.jobs, self.jobs_by),
                ("GPUs", self.gpus, self.gpus_by),
                ("CPUs", self.cpus, self.cpus_by),
            )
        )


@dataclass(frozen=True)
class Waves:
    """A partition's Slurm jobs of one stage and size, as if alone under the caps: ``slots`` at once, so
    ceil(jobs / slots) waves, each as long as one job (``minutes``, from its ``minutes_from``)."""

    partition: str
    stage: str
    gpus: int
    cpus: int
    minutes: float
    minutes_from: str  # expected_runtime, or runtime (the time limit) where the site gives none
    jobs: int
    slots: int | None  # None: nothing caps them, one wave; 0: one job holds more than a cap, none ever starts
    slots_by: str

    @property
    def waves(self) -> int | None:
        if self.slots == 0:
            return None
        return 1 if self.slots is None else math.ceil(self.jobs / self.slots)

    @property
    def hours(self) -> float | None:
        return None if self.waves is None else self.waves * self.minutes / 60

    def to_json(self) -> dict:
        hours = self.hours
        return {**asdict(self), "waves": self.waves, "hours": None if hours is None else round(hours, 4)}


@dataclass(frozen=True)
class Estimate:
    """The simulated run: its length in minutes, its Slurm jobs, the most jobs, GPUs and CPUs it held at once; or,
    where a job could never start under the caps, why (``problem``) and no length."""

    minutes: float | None
    jobs: int
    peak_jobs: int = 0
    peak_gpus: int = 0
    peak_cpus: int = 0
    problem: str = ""


@dataclass
class Plan:
    jobs: list[PlannedJob]
    stats: dict[str, int]
    cells: dict[str, dict]  # cell key -> {state, jobs: [rules], reason}
    requests: list[PartitionTotals]
    longest_chain: list[PlannedJob]
    limits: Limits | None = None  # None: not a Slurm site
    caps: Caps | None = None  # None: not a Slurm site, no waves and no estimate
    waves: list[Waves] = field(default_factory=list)
    estimate: Estimate | None = None

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
            "gpu_allocations": sum(r.gpu_allocations for r in self.requests),
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
            "limits": self.limits.to_json() if self.limits else None,
            "caps": asdict(self.caps) if self.caps else None,
            "waves": [w.to_json() for w in self.waves],
            "estimate": asdict(self.estimate) if self.estimate else None,
            "job_overhead_s": JOB_OVERHEAD_S,
            "jobs": [asdict(j) for j in self.jobs],
        }


def requests(jobs: list[PlannedJob]) -> list[PartitionTotals]:
    """Requests x runtime per (partition, account), at attempt 1; every Slurm job a planned job makes counts."""
    acc: dict[tuple[str, str], PartitionTotals] = {}
    for j in jobs:
        if not j.submitted:
            continue
        for req in j.requests:
            r = acc.setdefault((req.partition, req.account), PartitionTotals(req.partition, req.account))
            hours = req.runtime / 60
            r.jobs += 1
            r.gpu_allocations += req.gpus > 0
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


def waves(jobs: list[PlannedJob], caps: Caps) -> list[Waves]:
    """Per partition, stage and job size (GPUs, CPUs, minutes): the waves its Slurm jobs need alone under ``caps``;
    a supervisor's jobs count as any other."""
    sizes = Counter(
        (r.partition, r.stage, r.gpus, r.cpus, r.minutes, r.minutes_from)
        for j in jobs
        if j.submitted
        for r in j.requests
    )
    return [Waves(*size, n, *caps.slots(size[2], size[3])) for size, n in sorted(sizes.items())]


def _fits(held: list[int], size: tuple[int, int, int], limit: list[float]) -> bool:
    return all(h + n <= c for h, n, c in zip(held, size, limit, strict=True))


def simulate(jobs: list[PlannedJob], caps: Caps) -> Estimate:
    """The run's length under ``caps``: list scheduling over the planned DAG (edges output -> input, as
    :func:`longest_chain`). A job is ready when its inputs' jobs have ended; whenever a job ends, the ready jobs that
    fit start, earliest ready first, a job that does not fit letting smaller ones past (Snakemake's scheduler starts
    any ready job the free resources allow). A planned job holds all its Slurm jobs at once (a supervised training
    with its helper jobs) for its own request's minutes plus :data:`JOB_OVERHEAD_S`; jobs that submit nothing take no
    time. Ready jobs are queued by size, so 10,000 cells cost a few sizes per start, not a scan of every ready job."""
    producer = {out: i for i, j in enumerate(jobs) for out in j.outputs}
    children: list[list[int]] = [[] for _ in jobs]
    waiting = [0] * len(jobs)
    for i, j in enumerate(jobs):
        parents = {producer[p] for p in j.inputs if p in producer and producer[p] != i}
        waiting[i] = len(parents)
        for p in parents:
            children[p].append(i)
    sizes: dict[int, tuple[int, int, int]] = {}  # per shared request list: (Slurm jobs, GPUs, CPUs)
    needs, durations = [], []
    for j in jobs:
        if not j.submitted:
            needs.append((0, 0, 0))
            durations.append(0.0)
            continue
        if id(j.requests) not in sizes:
            sizes[id(j.requests)] = (len(j.requests), sum(r.gpus for r in j.requests), sum(r.cpus for r in j.requests))
        needs.append(sizes[id(j.requests)])
        durations.append(j.requests[0].minutes + JOB_OVERHEAD_S / 60)
    total = sum(n[0] for n in needs)
    limit = [math.inf if c is None else c for c in (caps.jobs, caps.gpus, caps.cpus)]
    for need in set(needs):
        for n, cap, what, by in zip(need, limit, ("Slurm jobs", "GPUs", "CPUs"),
                                    (caps.jobs_by, caps.gpus_by, caps.cpus_by), strict=True):  # fmt: skip
            if n > cap:
                return Estimate(None, total, problem=f"one planned job holds {n} {what}, above {by} = {cap}")
    held, peaks = [0, 0, 0], [0, 0, 0]
    ready: dict[tuple[int, int, int], deque[tuple[int, int]]] = defaultdict(deque)  # size -> (ready order, job)
    for i in range(len(jobs)):
        if not waiting[i]:
            ready[needs[i]].append((i, i))
    order = len(jobs)
    running: list[tuple[float, int]] = []  # (end, job)
    now = 0.0
    while True:
        while fits := [q for size, q in ready.items() if q and _fits(held, size, limit)]:
            _, i = min(fits, key=lambda q: q[0][0]).popleft()
            held = [h + n for h, n in zip(held, needs[i], strict=True)]
            peaks = [max(p, h) for p, h in zip(peaks, held, strict=True)]
            heapq.heappush(running, (now + durations[i], i))
        if not running:
            return Estimate(now, total, *peaks)
        now, i = heapq.heappop(running)
        ended = [i]
        while running and running[0][0] == now:
            ended.append(heapq.heappop(running)[1])
        for i in ended:
            held = [h - n for h, n in zip(held, needs[i], strict=True)]
            for c in children[i]:
                waiting[c] -= 1
                if not waiting[c]:
                    ready[needs[c]].append((order, c))
                    order += 1


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


def profile_jobs(workflow: Path) -> int | None:
    """The Slurm profile's ``jobs:`` (the driver's --jobs there); None where the workflow has no such profile (a
    Snakefile of the user's own)."""
    path = workflow / SLURM_PROFILE
    if not path.is_file():
        return None
    value = (yaml.safe_load(path.read_text()) or {}).get("jobs")
    return int(value) if value else None


def make_plan(cfg: Config, site: Site, layout: Layout, workdir: Path, dry_run_text: str, limits: Limits | None = None,
              driver_jobs: int | None = None) -> Plan:  # fmt: skip
    """The plan of a dry-run's text; on a Slurm site with its waves and wall-clock estimate under ``limits`` (the
    cluster's caps) and ``driver_jobs`` (the profile's --jobs, :func:`profile_jobs`)."""
    jobs, stats = parse_dry_run(dry_run_text)  # a finished workflow's dry-run has no job blocks: no jobs
    # A job's requests depend on its rule, the agent slot of a train or evaluate rule (an agent cell's evaluate job
    # adopts) and an image's stage only: priced once per such key, not once per job (10,000 cells have a few hundred
    # keys). JobRequest is frozen: the lists are shared.
    priced: dict[tuple, list[JobRequest]] = {}
    for j in jobs:
        w = j.wildcards
        key = (j.rule, w.get("agent") if j.rule in TRAIN_RULES or j.rule == "evaluate" else None, w.get("image"))
        if key not in priced:
            priced[key] = job_requests(site, cfg, j.rule, w)
        j.requests = priced[key]
    plan = Plan(jobs, stats, cell_states(cfg, layout, workdir, jobs), requests(jobs), longest_chain(jobs))
    if site.scheduler == "slurm":
        plan.limits = limits
        plan.caps = Caps.of(limits, driver_jobs)
        plan.waves = waves(jobs, plan.caps)
        plan.estimate = simulate(jobs, plan.caps)
    return plan


def hours_minutes(minutes: float) -> str:
    total = round(minutes)
    return f"{total // 60} h {total % 60} min"


def _minutes(value: float) -> str:
    """Whole minutes, or one decimal below 10 (a 12 s job is 0.2 min, not 0)."""
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


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
    head = f"{'jobs':>5} {'w/ GPU':>6} {'GPU-h':>10} {'node-h':>10} {'CPU-h':>10}"
    lines.append(f"  {'partition':<12} {'account':<12} {head}")
    for r in plan.requests:
        figures = f"{r.gpu_allocations:>6} {r.gpu_hours:>10.2f} {r.node_hours:>10.2f} {r.cpu_hours:>10.2f}"
        lines.append(f"  {r.partition:<12} {r.account:<12} {r.jobs:>5} {figures}")
    t = plan.totals()
    figures = f"{t['gpu_allocations']:>6} {t['gpu_hours']:>10.2f} {t['node_hours']:>10.2f} {t['cpu_hours']:>10.2f}"
    lines.append(f"  {'total':<12} {'':<12} {t['jobs']:>5} {figures}")
    lines += render_time(plan)
    chain = plan.longest_chain
    lines += ["", f"Longest chain: {len(chain)} jobs, {plan.chain_minutes():.0f} min of requested runtime"]
    for j in chain:
        wc = ",".join(f"{k}={v}" for k, v in j.wildcards.items())
        lines.append(f"  {j.rule}[{wc}] {j.runtime_min:.0f} min")
    return "\n".join(lines)


def render_time(plan: Plan) -> list[str]:
    """The cluster's caps, each partition's waves and the wall-clock estimate under the caps (Slurm sites only)."""
    if plan.caps is None:
        return ["", "Wall-clock estimate: none (not a Slurm site: jobs run on this machine, under no cluster caps)"]
    limits = plan.limits
    lines = ["", "Cluster limits" + (f" ({limits.note})" if limits and limits.any and limits.note else "")]
    lines += [f"  {line}" for line in (limits.lines() if limits else ["none given"])]
    lines += [
        "",
        "Waves per partition (each row alone under the caps; a wave is one job's expected_runtime, else runtime)",
    ]
    head = f"{'jobs':>5} {'GPUs':>4} {'CPUs':>4} {'at once':>7} {'(cap)':<17} {'waves':>5} {'wave':>8} {'from':<16}"
    lines.append(f"  {'partition':<12} {'stage':<14} {head} {'hours':>8}")
    for w in plan.waves:
        at_once = {None: "all", 0: "never"}.get(w.slots, str(w.slots))
        waves, hours = ("-", "-") if w.waves is None else (str(w.waves), f"{w.hours:.2f}")
        size = f"{w.jobs:>5} {w.gpus:>4} {w.cpus:>4} {at_once:>7} {'(' + (w.slots_by or '-') + ')':<17}"
        wave = f"{_minutes(w.minutes):>4} min {w.minutes_from:<16}"
        lines.append(f"  {w.partition:<12} {w.stage:<14} {size} {waves:>5} {wave} {hours:>8}")
    est = plan.estimate
    if est.minutes is None:
        lines += ["", f"Wall-clock estimate under the caps: none ({est.problem}: it never starts)"]
    else:
        at_once = f"at most {est.peak_jobs} at once, {est.peak_gpus} GPUs at once"
        lines += ["", f"Wall-clock estimate under the caps: {hours_minutes(est.minutes)} ({est.jobs} jobs, {at_once})"]
    lines.append(f"  the planned jobs in dependency order under {plan.caps.describe()};")
    lines.append(f"  each job its expected_runtime (else runtime) + {JOB_OVERHEAD_S} s of submission and status checks")
    return lines
