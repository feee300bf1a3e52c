"""The train stage: run one cell's trainer into its checkpoint dir on scratch, then write the manifest.

The checkpoint directory is deliberately *not* a Snakemake output: Snakemake deletes a job's outputs before it
runs, which would destroy the checkpoints a requeued or resumed training needs. The manifest (in results) is the
output, written last and atomically, so it exists only for a complete checkpoint and records the sha256 of every
weight file; evaluation checks those before trusting the directory.

Every attempt (a Snakemake retry, a requeue of the same job, a supervised resubmission, a later run) writes the
final model into its own staging dir ``.<agent>.partial-<attempt>`` beside the checkpoint dir and promotes it with
one rename; its resume state lives in the cell's ``ResumeDir`` (``ptflow.cluster.preempt``), which survives failed
attempts and is removed once the checkpoint is in place. The manifest lists every attempt (``attempts``).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ptflow.cluster.preempt import ResumeDir, StoppedToResume, attempt_id
from ptflow.config.kinds import KINDS
from ptflow.files import promote_dir, write_json_atomic
from ptflow.stages.checkpoint import describe_checkpoint


@dataclass
class TrainJob:
    """What every trainer gets: the cell, its kind's params, where to start and where to write (a staging dir that
    becomes the checkpoint only when the trainer returns), the job's runtime and time-limit warning, the cell's
    resume state on scratch and this attempt's id there (``resume.attempts()`` holds the earlier ones)."""

    cell: dict
    kind: str
    params: dict
    start_model: str
    train_parquet: str | None
    out: Path
    log: Callable[[str], None] = print
    runtime: dict | None = None  # ptflow.cluster.runtime.JobRuntime as a dict; None: this Python, this machine
    agent: dict | None = None  # kind-specific settings from common.smk (agent CLI, SkyRL server)
    warn_seconds: int | None = None
    resume: ResumeDir | None = None
    attempt: str | None = None


def trainer_of(kind: str) -> Callable[[TrainJob], dict]:
    """The ``run(job)`` of an agent kind, from the registry (``ptflow.config.kinds``)."""
    spec = KINDS[kind]
    if spec.trainer is None:
        raise ValueError(f"agent kind {kind!r} trains nothing (it has no train job)")
    module, _, func = spec.trainer.partition(":")
    return getattr(importlib.import_module(module), func)


def train_cell(
    *,
    cell: dict,
    kind: str,
    params: dict,
    start_model: str,
    train_parquet: str | None,
    checkpoint_dir: str,
    config_hash: str,
    manifest_path: str,
    parent_manifest: str | None = None,
    threads: int = 1,
    log=print,
    runtime: dict | None = None,
    agent: dict | None = None,
    warn_seconds: int | None = None,
) -> dict:
    """Train one cell and write its manifest; returns the manifest. ``warn_seconds``: the job's time-limit warning
    (ptflow.cluster.preempt), for trainers that save before the end."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    ckpt = Path(checkpoint_dir).resolve()
    this_attempt = attempt_id()
    if int(os.environ.get("RANK", "0")) != 0:
        return _other_rank(cell, kind, params, start_model, train_parquet, ckpt, config_hash, log, runtime, agent)
    staging = ckpt.with_name(f".{ckpt.name}.partial-{this_attempt}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    resume = ResumeDir.for_checkpoint(ckpt, config_hash)
    log(f"training {cell} kind={kind} params={json.dumps(params, sort_keys=True)} from {start_model}")
    started = time.time()
    earlier = resume.attempts()
    if earlier:
        log(f"attempt {len(earlier) + 1} of this training (earlier: {', '.join(a['id'] for a in earlier)})")
    resume.record_attempt(
        {"id": this_attempt, "started": started, "host": socket.gethostname(), "slurm_job_id": _job_id()}
    )
    job = TrainJob(
        cell, kind, params, start_model, train_parquet, staging, log, runtime, agent, warn_seconds, resume, this_attempt
    )
    try:
        result = trainer_of(kind)(job)
    except StoppedToResume as exc:
        resume.record_attempt({"id": this_attempt, "ended": time.time(), "stopped": exc.reason, "saved_step": exc.step})
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except Exception as exc:
        resume.record_attempt({"id": this_attempt, "ended": time.time(), "error": f"{type(exc).__name__}: {exc}"[:300]})
        shutil.rmtree(staging, ignore_errors=True)
        raise
    seconds = time.time() - started
    attempts = resume.record_attempt(
        {"id": this_attempt, "ended": time.time(), "completed": True, "resumed_from": result.get("resumed_from")}
    )
    # Swap the finished model in: a crash before this leaves only this attempt's .partial dir.
    promote_dir(staging, ckpt)
    for stale in ckpt.parent.glob(f".{ckpt.name}.partial-*"):  # crashed attempts' leftovers
        shutil.rmtree(stale, ignore_errors=True)
    manifest = {
        **cell,
        "kind": kind,
        "params": params,
        "checkpoint": str(ckpt),
        "step": result.get("step"),
        "train_loss": result.get("train_loss"),
        # RL kinds (trl-grpo): the mean reward over the run, what a learning curve is read against
        **({"reward_mean": result["reward_mean"]} if result.get("reward_mean") is not None else {}),
        "config_hash": config_hash,
        "start_model": start_model,
        "from_manifest": parent_manifest,
        "train_seconds": round(seconds, 3),
        "host": socket.gethostname(),
        "slurm_job_id": _job_id(),
        "attempts": attempts,
        # cli-agent: a budget that ran out is not an error; a cell without final_model says so (no weights)
        **({"final_model": False, "bytes": 0, "weights": []} if result.get("final_model") is False else {}),
        **({"agent_run": result["agent_run"]} if "agent_run" in result else {}),
        **(describe_checkpoint(ckpt) if result.get("final_model") is not False else {}),
    }
    write_json_atomic(manifest_path, manifest)
    resume.clear()  # the checkpoint is in place: its resume state (optimizer included) is not needed any more
    if result.get("final_model") is False:
        log(f"no final model for {cell}: manifest {manifest_path} records it (evaluation will say so)")
        return manifest
    log(f"checkpoint {ckpt}: step {manifest['step']}, {manifest['bytes']} bytes, {seconds:.1f} s")
    return manifest


def _other_rank(cell, kind, params, start_model, train_parquet, ckpt, config_hash, log, runtime, agent) -> dict:
    """A rank other than 0 of a distributed run (torchrun on several nodes or GPUs): it trains with the others and
    writes nothing of its own (rank 0 saves checkpoints, promotes the model and writes the manifest)."""
    staging = ckpt.with_name(f".{ckpt.name}.partial-{attempt_id()}")
    resume = ResumeDir.for_checkpoint(ckpt, config_hash)
    job = TrainJob(cell, kind, params, start_model, train_parquet, staging, log, runtime, agent, None, resume, None)
    try:
        return trainer_of(kind)(job)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _job_id() -> str | None:
    return os.environ.get("SLURM_JOB_ID")
