"""``ptflow plan``: what a run will do and request, read from Snakemake's own dry-run (no second planner).

:func:`make_plan` reads the dry-run's jobs and prices each with the Slurm jobs it makes (``ptflow.ops.plan_jobs``),
adds them up per partition and, on a Slurm site, into waves and a wall-clock estimate under the cluster's caps
(``ptflow.ops.plan_estimate``), and gives every cell a state from the plan plus the files (done, to run, failed
before, stale). An agent with ``repeats`` gets what its runs cost (:func:`repeat_costs`): every run is its own cell
(``<agent>@run<k>``) with its own jobs, so they are in the jobs already; the plan says how many are theirs. A seeded
eval gets what its seeds cost the same way (:func:`seed_costs`): each seed of a cell is its own ``evaluate_seed`` job.
:func:`render` writes the plan for a reader; :meth:`Plan.to_json` for a program.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ptflow.cluster.limits import Limits
from ptflow.config import naming
from ptflow.config.layout import Layout
from ptflow.config.matrix import Cell, Config
from ptflow.config.rules import TRAIN_RULES
from ptflow.config.sites import Site
from ptflow.ops.plan_estimate import (
    JOB_OVERHEAD_S,
    Caps,
    Estimate,
    PartitionTotals,
    Waves,
    longest_chain,
    requests,
    simulate,
    waves,
)
from ptflow.ops.plan_jobs import JobRequest, PlannedJob, job_requests, parse_dry_run
from ptflow.results.cell_state import rule_log_failed, valid_eval_json

DONE, TO_RUN, FAILED_BEFORE, STALE = "done", "to run", "failed before", "stale"
CELL_STATES = (DONE, TO_RUN, FAILED_BEFORE, STALE)
# the rules that make a cell's eval.json: evaluate, or for a seeded eval each seed's evaluation and their mean
EVALUATION_RULES = ("evaluate", "evaluate_seed", "seed_mean")
PRICED_PER_AGENT = (*TRAIN_RULES, "evaluate", "evaluate_seed")  # rules whose request depends on the agent slot


@dataclass(frozen=True)
class DimensionCost:
    """What one more dimension of the matrix costs in planned jobs: an agent's repeats (``runs`` of each of its
    cells, every job of those cells) or an eval's seeds (``seeds`` per cell, its ``evaluate_seed`` jobs: a seed whose
    file is up to date is not planned; the cells' ``seed_mean`` runs on the login node and costs nothing), the cells
    they belong to and their GPU-hours (requests x time limit, as the totals count)."""

    name: str  # the agent or the eval
    unit: str  # "runs" (of each cell) or "seeds" (per cell)
    count: int
    cells: int
    jobs: int
    gpu_hours: float

    @classmethod
    def of(cls, name: str, unit: str, count: int, jobs: list[PlannedJob]) -> DimensionCost:
        cells = {(j.wildcards["model"], j.wildcards["eval"], j.wildcards["agent"]) for j in jobs
                 if {"model", "eval", "agent"} <= j.wildcards.keys()}  # fmt: skip
        hours = sum(req.gpus * req.runtime / 60 for j in jobs if j.submitted for req in j.requests)
        return cls(name, unit, count, len(cells), len(jobs), round(hours, 4))

    def line(self) -> str:
        what, jobs = ("runs of each cell", "jobs") if self.unit == "runs" else ("seeds per cell", "evaluate_seed jobs")
        return (
            f"{self.name}: {self.count} {what} ({self.cells} cells, {self.jobs} {jobs}, {self.gpu_hours:.2f} GPU-hours)"
        )

    def to_json(self) -> dict:
        return {self.unit: self.count, "cells": self.cells, "jobs": self.jobs, "gpu_hours": self.gpu_hours}


def repeat_costs(cfg: Config, jobs: list[PlannedJob]) -> list[DimensionCost]:
    """What each agent with ``repeats`` > 1 costs, in the config's order: the planned jobs whose agent wildcard is
    the agent's id (run 1) or ``<id>@run<k>`` (an id holds no '@')."""

    def agent_of(job: PlannedJob) -> str:
        return job.wildcards.get("agent", "").partition(naming.RUN_SEPARATOR)[0]

    return [
        DimensionCost.of(a.id, "runs", a.repeats, [j for j in jobs if agent_of(j) == a.id])
        for a in cfg.agents.values()
        if a.repeats > 1
    ]


def seed_costs(cfg: Config, jobs: list[PlannedJob]) -> list[DimensionCost]:
    """What each seeded eval (``matrix.seeds`` / ``evals[].seeds``) costs, in the config's order."""
    return [
        DimensionCost.of(ev.id, "seeds", len(ev.seeds),
                         [j for j in jobs if j.rule == "evaluate_seed" and j.wildcards.get("eval") == ev.id])
        for ev in cfg.evals.values()
        if ev.seeded
    ]  # fmt: skip


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
    repeats: list[DimensionCost] = field(default_factory=list)  # the agents with repeats, what their runs cost
    seeds: list[DimensionCost] = field(default_factory=list)  # the seeded evals, what their seeds cost

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
            "repeats": {r.name: r.to_json() for r in self.repeats},
            "seeds": {s.name: s.to_json() for s in self.seeds},
            "job_overhead_s": JOB_OVERHEAD_S,
            "jobs": [asdict(j) for j in self.jobs],
        }


def cell_states(cfg: Config, layout: Layout, workdir: Path, jobs: list[PlannedJob]) -> dict[str, dict]:
    """Per cell: done (nothing planned, valid eval.json), to run, failed before, stale (outputs exist, out of date)."""
    planned: dict[Cell, list[PlannedJob]] = defaultdict(list)
    for j in jobs:
        w = j.wildcards
        if (j.rule in TRAIN_RULES or j.rule in EVALUATION_RULES) and {"model", "eval", "agent"} <= w.keys():
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
        seeds = cfg.evals[cell.eval].seeds or ()  # a seeded eval's evaluations log per seed
        logs = [existing(layout.log(r, cell.model, cell.eval, cell.agent)) for r in ("train", "evaluate")]
        logs += [existing(layout.log("evaluate", cell.model, cell.eval, cell.agent, str(s))) for s in seeds]
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


def make_plan(cfg: Config, site: Site, layout: Layout, workdir: Path, dry_run_text: str, limits: Limits | None = None,
              driver_jobs: int | None = None) -> Plan:  # fmt: skip
    """The plan of a dry-run's text; on a Slurm site with its waves and wall-clock estimate under ``limits`` (the
    cluster's caps) and ``driver_jobs`` (the profile's --jobs, :func:`profile_jobs`)."""
    jobs, stats = parse_dry_run(dry_run_text)  # a finished workflow's dry-run has no job blocks: no jobs
    # A job's requests depend on its rule, the agent slot of a train or evaluation rule (an agent cell's evaluate and
    # evaluate_seed jobs adopt) and an image's stage only: priced once per such key, not once per job (10,000 cells
    # have a few hundred keys). JobRequest is frozen: the lists are shared.
    priced: dict[tuple, list[JobRequest]] = {}
    for j in jobs:
        w = j.wildcards
        key = (j.rule, w.get("agent") if j.rule in PRICED_PER_AGENT else None, w.get("image"))
        if key not in priced:
            priced[key] = job_requests(site, cfg, j.rule, w)
        j.requests = priced[key]
    plan = Plan(jobs, stats, cell_states(cfg, layout, workdir, jobs), requests(jobs), longest_chain(jobs))
    plan.repeats = repeat_costs(cfg, jobs)
    plan.seeds = seed_costs(cfg, jobs)
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
    if plan.repeats:
        lines += ["", "Repeats (each run its own cell and jobs, counted above)"]
        lines += [f"  {r.line()}" for r in plan.repeats]
    if plan.seeds:
        lines += ["", "Evaluation seeds (each seed of a cell its own evaluate_seed job, counted above)"]
        lines += [f"  {s.line()}" for s in plan.seeds]
    lines += ["", "Request (attempt 1; the site's requests x time limit; CPUs = cpus-per-task x tasks)"]
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
    lines += ["", f"Longest chain: {len(chain)} jobs, {plan.chain_minutes():.0f} min of requested time limits"]
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
        "Waves per partition (each row alone under the caps; a wave is one job's expected_runtime, else time limit)",
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
    lines.append(
        f"  each job its expected_runtime (else its time limit) + {JOB_OVERHEAD_S} s of submission and status checks"
    )
    return lines
