"""The planned jobs of ``ptflow plan``, read from Snakemake's own dry-run (no second planner), with their Slurm jobs.

Every planned job of ``snakemake -n`` is parsed with its rule, wildcards, inputs, outputs and reason
(:func:`parse_dry_run`, which refuses a dry-run it reads wrongly); its Slurm jobs come from the site the way the rule
gets them (:func:`job_requests`, ``ptflow.config.rules``: the rule's stage, per agent for the train rules), including
the GPU job a login-node supervisor submits for ``train_supervised`` (a dry-run prints no threads and nothing of
those). What they add up to is ``ptflow.ops.plan_estimate``'s; the plan itself is ``ptflow.ops.plan``'s.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ptflow.cluster import images
from ptflow.config.matrix import Config
from ptflow.config.request import Request as SiteRequest
from ptflow.config.rules import ADOPT_REQUEST, LOGIN_NODE_RULES, RULE_REQUESTS, SUPERVISOR_RULES, TRAIN_RULES
from ptflow.config.sites import Site

_RULE = re.compile(r"^(local)?(?:rule|checkpoint) (\w+):\s*$")  # a checkpoint is a job too
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
    # minutes: the time limit, under the name the site's requests and the Slurm plugin give it (and `ptflow plan
    # --json`); everywhere else in ptflow "runtime" is where software runs (a container runtime or a venv)
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
    if rule in ("evaluate", "evaluate_seed") and cfg.agent_for(wildcards["agent"]).spec.evaluates_in_train_job:
        request = ADOPT_REQUEST  # evaluated in the train job's allocation (each seed); this job adopts it (CPU)
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
        f"ptflow.ops.plan_jobs.parse_dry_run read {len(jobs)} job block(s) ({sum(not j.jobid for j in jobs)} without a "
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
