"""The train stage: run one cell's trainer into its checkpoint dir on scratch, then write the manifest.

The checkpoint directory is deliberately *not* a Snakemake output: Snakemake deletes a job's outputs before it
runs, which would destroy the checkpoints a requeued or resumed training needs. The manifest (in results) is the
output, written last and atomically, so it exists only for a complete checkpoint and records the sha256 of every
weight file; evaluation checks those before trusting the directory.
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

from ptflow.config.kinds import KINDS
from ptflow.files import promote_dir, write_json_atomic
from ptflow.stages.checkpoint import describe_checkpoint


@dataclass
class TrainJob:
    """What every trainer gets: the cell, its kind's params, where to start and where to write (a staging dir that
    becomes the checkpoint only when the trainer returns), the job's runtime and time-limit warning."""

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
    staging = ckpt.with_name(f".{ckpt.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    log(f"training {cell} kind={kind} params={json.dumps(params, sort_keys=True)} from {start_model}")
    started = time.time()
    job = TrainJob(cell, kind, params, start_model, train_parquet, staging, log, runtime, agent, warn_seconds)
    result = trainer_of(kind)(job)
    seconds = time.time() - started
    # Swap the finished model in: a crash before this leaves only the .partial dir, which the next run clears.
    promote_dir(staging, ckpt)
    manifest = {
        **cell,
        "kind": kind,
        "params": params,
        "checkpoint": str(ckpt),
        "step": result.get("step"),
        "train_loss": result.get("train_loss"),
        "config_hash": config_hash,
        "start_model": start_model,
        "from_manifest": parent_manifest,
        "train_seconds": round(seconds, 3),
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        # cli-agent: a budget that ran out is not an error; a cell without final_model says so (no weights)
        **({"final_model": False, "bytes": 0, "weights": []} if result.get("final_model") is False else {}),
        **({"agent_run": result["agent_run"]} if "agent_run" in result else {}),
        **(describe_checkpoint(ckpt) if result.get("final_model") is not False else {}),
    }
    write_json_atomic(manifest_path, manifest)
    if result.get("final_model") is False:
        log(f"no final model for {cell}: manifest {manifest_path} records it (evaluation will say so)")
        return manifest
    log(f"checkpoint {ckpt}: step {manifest['step']}, {manifest['bytes']} bytes, {seconds:.1f} s")
    return manifest
