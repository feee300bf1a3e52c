"""Resubmission after infrastructure failures (sites with ``infra_retries``, e.g. pyxis/TAO clusters).

- :func:`write_status` — ``status.json`` in the job's results dir, atomically.
- :func:`classify` — Slurm state + log lines → ``infra`` (retry elsewhere) / ``training`` (no retry) / ``ok``.
- :func:`run_with_retries` — a ptflow-side resubmission loop: up to ``max_retries`` (10) resubmissions for infra
  failures, each with ``--exclude`` of every node blamed so far; up to ``max_resumes`` resubmissions of a job that
  saved and stopped to be resumed (the internal timeout, the time-limit warning: its stop marker,
  ``ptflow.cluster.preempt.write_stop_marker``); a training error stops at once.

Why a ptflow-side loop and not Snakemake's ``retries``: Snakemake retries every failure the same number of times
(a Python traceback would be resubmitted 10 times, each waiting in a 4-hour-partition queue) and it cannot read log
lines: plugin 2.8.0 does exclude nodes of NODE_FAIL jobs from later submissions, but a bad GPU that makes the job
*fail* gets no ``--exclude``. A node failure kills the rule's own allocation, so the loop must run outside the
training allocation: it submits the GPU job with sbatch and watches it (from a light supervising process).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ptflow.cluster import slurm
from ptflow.config.sites import DEFAULT_MAX_RESUMES
from ptflow.files import write_json_atomic
from ptflow.jobenv import clean_shell_env

MAX_RETRIES = 10
INFRA_STATES = {"NODE_FAIL": "node failure", "BOOT_FAIL": "node failed to boot"}

# Log lines that show a bad node or GPU (not the training code). Named group `node` where a node can be read.
INFRA_PATTERNS: list[tuple[str, re.Pattern]] = [
    (name, re.compile(rx, re.IGNORECASE))
    for name, rx in (
        ("Xid error", r"\bNVRM: Xid\b.*|\bXid \d+\b.*"),
        ("GPU fell off the bus", r"GPU has fallen off the bus"),
        ("uncorrectable ECC error", r"uncorrectable ECC error|ECC errors? (detected|encountered)"),
        ("no usable GPU", r"CUDA-capable device\(s\) (is|are) busy or unavailable|No CUDA GPUs are available"),
        ("NVML failure", r"Failed to initialize NVML|NVML: (Driver/library version mismatch|Unknown Error)"),
        ("pyxis/enroot failure", r"pyxis: (?:couldn't|failed|error).*|\[ERROR\].*enroot|enroot-.*: error"),
        ("Slurm node failure", r"srun: error: Node failure on (?P<node>[\w.-]+)|slurmstepd: error: .*node fail"),
        (
            "NCCL network failure",
            r"NCCL WARN .*(unhandled system error|remote process exited|Connection (reset|closed))",
        ),
        ("bad node", r"(?:bad|unhealthy) node[: ]+(?P<node>[\w.-]+)"),
    )
]
NODE_IN_LINE = re.compile(r"(?:on (?:host|node)\s+|^srun: error: |host=)(?P<node>[A-Za-z][\w.-]*)")


MAX_RESUMES = DEFAULT_MAX_RESUMES  # the site's max_resumes where it sets none


@dataclass
class Verdict:
    kind: str  # ok | infra | resume | training
    reason: str
    nodes: list[str] = field(default_factory=list)  # nodes to avoid next time (infra only)

    @property
    def retry(self) -> bool:
        return self.kind in ("infra", "resume")


def classify(state: str, log_text: str = "", job_nodes: Sequence[str] = (), stopped: dict | None = None) -> Verdict:
    """``state`` is the job's Slurm state (``COMPLETED``, ``FAILED``, ``NODE_FAIL`` …), ``log_text`` its log,
    ``stopped`` its stop marker (it saved and stopped to be resumed), if it wrote one."""
    base = (state or "").split()[0] if state else ""
    if stopped is not None and base != "COMPLETED":
        step = stopped.get("step")
        return Verdict("resume", f"saved {'step ' + str(step) if step is not None else 'its state'} and stopped "
                       f"({stopped.get('reason', 'to be resumed')})")  # fmt: skip
    if base in INFRA_STATES:
        return Verdict("infra", f"Slurm state {base} ({INFRA_STATES[base]})", list(job_nodes))
    for line in log_text.splitlines():
        for name, rx in INFRA_PATTERNS:
            m = rx.search(line)
            if not m:
                continue
            node = m.groupdict().get("node")
            if not node:
                nm = NODE_IN_LINE.search(line)
                node = nm.group("node") if nm else None
            nodes = [node] if node and node in job_nodes or (node and not job_nodes) else list(job_nodes)
            return Verdict("infra", f"{name}: {line.strip()[:200]}", nodes)
    if base == "COMPLETED":
        return Verdict("ok", "completed")
    return Verdict("training", f"Slurm state {base or 'unknown'} with no sign of a bad node or GPU in the log")


# ---- status.json ----


def write_status(results_dir: str | Path, status: str, **fields) -> Path:
    path = Path(results_dir) / "status.json"
    write_json_atomic(path, {"status": status, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **fields})
    return path


# ---- resubmission loop ----


class TrainingFailed(RuntimeError):
    pass


class RetriesExhausted(RuntimeError):
    pass


class ResumesExhausted(RetriesExhausted):
    pass


def run_with_retries(
    submit: Callable[[int, list[str]], str],
    log_of: Callable[[str], str],
    results_dir: str | Path,
    *,
    max_retries: int = MAX_RETRIES,
    max_resumes: int = MAX_RESUMES,
    stopped: Callable[[str], dict | None] = lambda job_id: None,
    wait: Callable[[str], slurm.JobRecord] = slurm.wait_job,
    log=print,
) -> dict:
    """``submit(attempt, exclude) -> job id``; ``log_of(job id) -> log text``; ``stopped(job id)`` -> the job's stop
    marker or None. Returns the final status dict; ``status.json`` says at every point which attempt runs, how many
    infra retries and resumes there were, and why each attempt ended."""
    exclude: list[str] = []
    history = []
    retries = resumes = 0
    attempt = 0
    while True:
        attempt += 1
        job_id = submit(attempt, list(exclude))
        counts = {"retries": retries, "resumes": resumes, "max_retries": max_retries, "max_resumes": max_resumes}
        write_status(results_dir, "running", attempt=attempt, job_id=job_id, exclude=exclude, history=history, **counts)
        rec = wait(job_id)
        nodes = slurm.hostnames(rec.nodes) if rec.nodes else []
        verdict = classify(rec.state, log_of(job_id), nodes, stopped(job_id))
        history.append(
            {"attempt": attempt, "job_id": job_id, "state": rec.base_state, "nodes": nodes, **asdict(verdict)}
        )
        log(
            f"supervisor: attempt {attempt} job {job_id} {rec.base_state} on {','.join(nodes)}: "
            f"{verdict.kind} ({verdict.reason})"
        )
        counts = {"retries": retries, "resumes": resumes, "max_retries": max_retries, "max_resumes": max_resumes}
        if verdict.kind == "ok":
            write_status(
                results_dir, "succeeded", attempt=attempt, job_id=job_id, exclude=exclude, history=history, **counts
            )
            return {"status": "succeeded", "attempts": attempt, "history": history, "exclude": exclude, **counts}
        if verdict.kind == "training":
            write_status(
                results_dir, "failed", failure="training", attempt=attempt, job_id=job_id, history=history, **counts
            )
            raise TrainingFailed(
                f"job {job_id} failed in training ({verdict.reason}); not retried — fix the error in its log"
            )
        if verdict.kind == "resume":
            if resumes >= max_resumes:
                write_status(results_dir, "failed", failure="resumes", attempt=attempt, history=history, **counts)
                raise ResumesExhausted(
                    f"job {job_id} saved and stopped again after {resumes} resumes ({verdict.reason}); the training "
                    f"needs more time than max_resumes={max_resumes} resubmissions give — raise max_resumes in the "
                    "site file or give the stage a longer runtime"
                )
            resumes += 1
            continue
        if retries >= max_retries:
            write_status(
                results_dir, "failed", failure="infra", attempt=attempt, history=history, exclude=exclude, **counts
            )
            raise RetriesExhausted(
                f"{max_retries} resubmissions after infrastructure failures ({history[-1]['reason']}); excluded "
                f"{','.join(exclude) or 'none'} — check the cluster's node health or raise max_retries"
            )
        retries += 1
        exclude += [n for n in verdict.nodes if n not in exclude]


def sbatch_submitter(script: str | Path, options: Sequence[str], env: dict | None = None, prepare=None):
    """A ``submit`` for :func:`run_with_retries`: sbatch ``script`` with ``--exclude`` of the blamed nodes and
    ``PTFLOW_ATTEMPT`` in the job's environment. ``prepare(attempt) -> (options, env)`` adds to both per attempt
    (a SkyRL trainer's dependency on its SkyRL server's job)."""

    def submit(attempt: int, exclude: list[str]) -> str:
        more_opts, more_env = prepare(attempt) if prepare else ([], {})
        opts = list(options) + list(more_opts) + ([f"--exclude={','.join(exclude)}"] if exclude else [])
        # without BASH_ENV/ENV: the #!/bin/bash batch script must not read a shell start-up file (jobenv)
        job_env = {**clean_shell_env(env), **more_env, "PTFLOW_ATTEMPT": str(attempt)}
        return slurm.submit(slurm.sbatch_argv(str(script), options=opts), env=job_env)

    return submit
