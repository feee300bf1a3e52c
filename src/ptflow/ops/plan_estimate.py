"""What the planned jobs add up to: requests x time limit per partition, the longest chain, and on a Slurm site how
long the run takes under what the cluster lets one user hold at once.

The figures (GPU-, node- and CPU-hours per partition and account, at attempt 1) are the requests x time limit of exactly
the planned jobs (``ptflow.ops.plan_jobs``). The caps are the cluster's (``ptflow.cluster.limits``) and the Slurm
profile's ``jobs:``: per partition, the waves its jobs need alone (:func:`waves`); over the whole DAG, a
list-scheduling simulation under the shared caps (:func:`simulate`), each job lasting its ``expected_runtime`` (else
its time limit) plus the run's own latency per job (:data:`JOB_OVERHEAD_S`).
"""

from __future__ import annotations

import heapq
import math
import sys
from collections import Counter, defaultdict, deque
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from ptflow.cluster.limits import Limits
from ptflow.ops.plan_jobs import PlannedJob

# The driver's --jobs on Slurm: the profile's `jobs:` (read by profile_jobs), the cap where no cluster limit is lower.
SLURM_PROFILE = Path("profiles") / "slurm" / "config.yaml"
# Seconds a job adds to the run beyond its own minutes: its submission and the status check that sees it end before
# its dependents are submitted. bench/RESULTS.md measures job end -> dependent started at 6 s median (11 s max) with
# the profile's 10 s status interval (profiles/slurm/config.yaml); 15 s leaves room for a busier controller.
JOB_OVERHEAD_S = 15


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


def requests(jobs: list[PlannedJob]) -> list[PartitionTotals]:
    """Requests x time limit per (partition, account), at attempt 1; every Slurm job a planned job makes counts."""
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


def profile_jobs(workflow: Path) -> int | None:
    """The Slurm profile's ``jobs:`` (the driver's --jobs there); None where the workflow has no such profile (a
    Snakefile of the user's own)."""
    path = workflow / SLURM_PROFILE
    if not path.is_file():
        return None
    value = (yaml.safe_load(path.read_text()) or {}).get("jobs")
    return int(value) if value else None
