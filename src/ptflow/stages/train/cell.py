"""The train stage: run one cell's trainer into its checkpoint dir on scratch, then write the manifest.

The checkpoint directory is deliberately *not* a Snakemake output: Snakemake deletes a job's outputs before it
runs, which would destroy the checkpoints a requeued or resumed training needs. The manifest (in results) is the
output, written last and atomically, so it exists only for a complete checkpoint and records the sha256 of every
weight file; evaluation checks those before trusting the directory.

Every attempt (a Snakemake retry, a requeue of the same job, a supervised resubmission, a later run) writes the
final model into its own staging dir ``.<slot>.partial-<attempt id>`` beside the checkpoint dir and promotes it
with one rename; its resume state lives in the cell's ``ResumeDir`` (``ptflow.cluster.preempt``), which survives failed
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
from dataclasses import dataclass, replace
from pathlib import Path

from ptflow.cluster import hfcache
from ptflow.cluster.preempt import RESUME_EXIT, ResumeDir, StoppedToResume, attempt_id, write_stop_marker
from ptflow.config.kinds import KINDS
from ptflow.config.spend import CellSpend
from ptflow.files import promote_dir, write_json_atomic
from ptflow.specs import StageRuntime, TrainSpec
from ptflow.stages.checkpoint import describe_checkpoint, verify_checkpoint


@dataclass(frozen=True)
class TrainRun:
    """This job's files and context, what the rule's inputs, outputs and resources give (the spec has the rest): the
    model it starts from, the train split, where the manifest goes, the parent cell's manifest (a chained cell),
    the checkout marker (a PostTrainBench cell), the CPU threads, the GPUs the job asked for (None: what torch sees;
    see trl_common.device_args), the time-limit warning's lead (ptflow.cluster.preempt, for trainers that save
    before the end) and the log."""

    start_model: str
    train_parquet: str | None
    manifest_path: str
    parent_manifest: str | None = None
    checkout_marker: str | None = None
    threads: int = 1
    gpus: int | None = None
    warn_seconds: int | None = None
    log: Callable[[str], None] = print
    spend: CellSpend | None = None  # an agent cell's spend settings (in rule train's params value)


@dataclass(frozen=True)
class Training:
    """What every trainer gets: the job's spec and files, where to write (a staging dir that becomes the checkpoint
    only when the trainer returns), the cell's resume state on scratch and this attempt's id there
    (``resume.attempts()`` holds the earlier ones)."""

    spec: TrainSpec
    run: TrainRun
    out: Path
    resume: ResumeDir | None = None
    attempt: str | None = None

    @property
    def params(self) -> dict:
        return self.spec.params

    @property
    def start_model(self) -> str:
        return self.run.start_model

    @property
    def train_parquet(self) -> str | None:
        return self.run.train_parquet

    @property
    def runtime(self) -> StageRuntime | None:
        """The train job's runtime (``ptflow.specs.StageRuntime``); None: this Python, this machine."""
        return self.spec.runtime

    @property
    def warn_seconds(self) -> int | None:
        return self.run.warn_seconds

    @property
    def log(self) -> Callable[[str], None]:
        return self.run.log


def trainer_of(kind: str) -> Callable[[Training], dict]:
    """The ``run(training)`` of an agent kind, from the registry (``ptflow.config.kinds``)."""
    spec = KINDS[kind]
    if spec.trainer is None:
        raise ValueError(f"agent kind {kind!r} trains nothing (it has no train job)")
    module, _, func = spec.trainer.partition(":")
    return getattr(importlib.import_module(module), func)


def start_model(spec: TrainSpec, parent_manifest: str | None) -> str:
    """Where the cell starts: the parent cell's verified checkpoint (a chained cell), else the base model's snapshot
    in the HF cache."""
    if parent_manifest:
        return str(verify_checkpoint(json.loads(Path(parent_manifest).read_text())))
    return str(hfcache.snapshot_path(spec.hf_home, spec.cell.model, "model", spec.model_revision))


def train_in_job(spec: TrainSpec, run: TrainRun) -> int:
    """:func:`train_cell` as the train job runs it: 0 once the manifest is written; a saved stop (time-limit warning,
    SIGTERM, internal timeout) is no training error: its marker (for a supervisor to resubmit) beside the manifest,
    and ``RESUME_EXIT`` (Snakemake's retry, or the next run, resumes the same way)."""
    try:
        train_cell(spec, run)
    except StoppedToResume as exc:
        write_stop_marker(
            Path(run.manifest_path).parent / "slurm",
            os.environ.get("SLURM_JOB_ID"),
            {"step": exc.step, "reason": exc.reason, "message": str(exc)},
        )
        run.log(f"stopped to be resumed: {exc}")
        return RESUME_EXIT
    return 0


def train_cell(spec: TrainSpec, run: TrainRun) -> dict:
    """Train one cell and write its manifest; returns the manifest."""
    if run.threads:
        import torch

        torch.set_num_threads(run.threads)
    ckpt = Path(spec.checkpoint_dir).resolve()
    if int(os.environ.get("RANK", "0")) != 0:
        return _other_rank(spec, run, ckpt)
    this_attempt = attempt_id()
    staging = ckpt.with_name(f".{ckpt.name}.partial-{this_attempt}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    resume = ResumeDir.for_checkpoint(ckpt, spec.config_hash)
    cell = spec.cell.to_params()
    run.log(f"training {cell} kind={spec.kind} params={json.dumps(spec.params, sort_keys=True)} from {run.start_model}")
    started = time.time()
    earlier = resume.attempts()
    if earlier:
        run.log(f"attempt {len(earlier) + 1} of this training (earlier: {', '.join(a['id'] for a in earlier)})")
    resume.record_attempt(
        {"id": this_attempt, "started": started, "host": socket.gethostname(), "slurm_job_id": _job_id()}
    )
    result = _train(Training(spec, run, staging, resume, this_attempt))
    seconds = time.time() - started
    attempts = resume.record_attempt(
        {"id": this_attempt, "ended": time.time(), "completed": True, "resumed_from": result.get("resumed_from")}
    )
    # Swap the finished model in: a crash before this leaves only this attempt's .partial dir.
    promote_dir(staging, ckpt)
    for stale in ckpt.parent.glob(f".{ckpt.name}.partial-*"):  # crashed attempts' leftovers
        shutil.rmtree(stale, ignore_errors=True)
    manifest = _manifest(spec, run, ckpt, result, seconds, attempts)
    write_json_atomic(run.manifest_path, manifest)
    resume.clear()  # the checkpoint is in place: its resume state (optimizer included) is not needed any more
    if result.get("final_model") is False:
        run.log(f"no final model for {cell}: manifest {run.manifest_path} records it (evaluation will say so)")
        return manifest
    run.log(f"checkpoint {ckpt}: step {manifest['step']}, {manifest['bytes']} bytes, {seconds:.1f} s")
    return manifest


def _train(training: Training) -> dict:
    """The kind's trainer on rank 0; a failed or stopped attempt is recorded and its staging dir removed."""
    try:
        return trainer_of(training.spec.kind)(training)
    except StoppedToResume as exc:
        training.resume.record_attempt(
            {"id": training.attempt, "ended": time.time(), "stopped": exc.reason, "saved_step": exc.step}
        )
        shutil.rmtree(training.out, ignore_errors=True)
        raise
    except Exception as exc:
        training.resume.record_attempt(
            {"id": training.attempt, "ended": time.time(), "error": f"{type(exc).__name__}: {exc}"[:300]}
        )
        shutil.rmtree(training.out, ignore_errors=True)
        raise


def _manifest(spec: TrainSpec, run: TrainRun, ckpt: Path, result: dict, seconds: float, attempts: list) -> dict:
    return {
        **spec.cell.to_params(),
        "kind": spec.kind,
        "params": spec.params,
        "checkpoint": str(ckpt),
        "step": result.get("step"),
        "train_loss": result.get("train_loss"),
        # RL kinds (trl-grpo): the mean reward over the run, what a learning curve is read against
        **({"reward_mean": result["reward_mean"]} if result.get("reward_mean") is not None else {}),
        "config_hash": spec.config_hash,
        "start_model": run.start_model,
        "from_manifest": run.parent_manifest,
        "train_seconds": round(seconds, 3),
        "host": socket.gethostname(),
        "slurm_job_id": _job_id(),
        "attempts": attempts,
        # cli-agent: a budget that ran out is not an error; a cell without final_model says so (no weights)
        **({"final_model": False, "bytes": 0, "weights": []} if result.get("final_model") is False else {}),
        **({"agent_run": result["agent_run"]} if "agent_run" in result else {}),
        **(describe_checkpoint(ckpt) if result.get("final_model") is not False else {}),
    }


def _other_rank(spec: TrainSpec, run: TrainRun, ckpt: Path) -> dict:
    """A rank other than 0 of a distributed run (torchrun on several nodes or GPUs): it trains with the others and
    writes nothing of its own (rank 0 saves checkpoints, promotes the model and writes the manifest)."""
    staging = ckpt.with_name(f".{ckpt.name}.partial-{attempt_id()}")
    resume = ResumeDir.for_checkpoint(ckpt, spec.config_hash)
    # (no time-limit warning of its own: rank 0 decides when to save)
    try:
        return trainer_of(spec.kind)(Training(spec, replace(run, warn_seconds=None), staging, resume))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _job_id() -> str | None:
    return os.environ.get("SLURM_JOB_ID")
