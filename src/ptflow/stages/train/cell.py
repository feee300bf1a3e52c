"""The train stage: run one cell's trainer into its checkpoint dir on scratch, then write the manifest.

The checkpoint directory is deliberately *not* a Snakemake output: Snakemake deletes a job's outputs before it
runs, which would destroy the checkpoints a requeued or resumed training needs. The manifest (in results) is the
output, written last and atomically, so it exists only for a complete checkpoint and records the sha256 of every
weight file; evaluation checks those before trusting the directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
from pathlib import Path

from ptflow.files import write_json_atomic

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


def weight_files(checkpoint: Path) -> list[Path]:
    return sorted(p for p in checkpoint.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def describe_checkpoint(checkpoint: Path) -> dict:
    weights = weight_files(checkpoint)
    if not weights:
        raise RuntimeError(f"trainer finished but {checkpoint} holds no weight files ({', '.join(WEIGHT_SUFFIXES)})")
    return {
        "bytes": sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file()),
        "weights": [{"path": p.relative_to(checkpoint).as_posix(), "sha256": sha256_file(p)} for p in weights],
    }


def verify_checkpoint(manifest: dict) -> Path:
    """The checkpoint a manifest names, after checking its weights are those that were written."""
    ckpt = Path(manifest["checkpoint"])
    for w in manifest["weights"]:
        p = ckpt / w["path"]
        if not p.is_file():
            raise FileNotFoundError(
                f"checkpoint file {p} named in the manifest is missing (scratch purged?); "
                "delete the manifest to retrain this cell"
            )
        if sha256_file(p) != w["sha256"]:
            raise RuntimeError(
                f"checkpoint file {p} differs from the manifest's sha256; it was changed after "
                "training — delete the manifest to retrain this cell"
            )
    return ckpt


def _run_trainer(
    kind: str,
    start_model: str,
    train_parquet: str | None,
    out: Path,
    params: dict,
    log,
    runtime=None,
    cell=None,
    agent: dict | None = None,
    warn_seconds: int | None = None,
) -> dict:
    if kind == "trl-sft":
        from ptflow.stages.train.sft import train_sft

        return train_sft(start_model, train_parquet, out, log=log, **params)
    if kind == "trl-grpo":
        from ptflow.stages.train.grpo import train_grpo

        return train_grpo(start_model, train_parquet, out, log=log, **params)
    if kind == "verl":  # multi-node: a Ray cluster over the job's allocation (ptflow.launch.ray)
        from ptflow.stages.train.verl import train_verl

        return train_verl(
            start_model, train_parquet, out, params=params, runtime=runtime, warn_seconds=warn_seconds, log=log
        )
    if kind == "nemo-distill":
        from ptflow.stages.train.nemo import train_nemo

        return train_nemo(
            str(cell), start_model, out, params=params, runtime=runtime, warn_seconds=warn_seconds, log=log
        )
    if kind == "cli-agent":  # a coding agent under a time budget (PostTrainBench); ptflow.stages.train.agent_cell
        from ptflow.stages.train.agent_cell import train_agent_cell

        return train_agent_cell(start_model, train_parquet, out, agent=agent, cell=cell, runtime=runtime, log=log)
    if (
        kind == "skyrl"
    ):  # CPU runtime server job beside this GPU trainer (ptflow.launch.skyrl); `agent` holds site + coord dir
        from ptflow.launch.skyrl import train_skyrl

        return train_skyrl(start_model, out, params=params, coord_dir=agent["coord_dir"], site=agent["site"], log=log)
    raise ValueError(f"agent kind {kind!r} has no trainer in this workflow yet")


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
    result = _run_trainer(kind, start_model, train_parquet, staging, params, log, runtime, cell, agent, warn_seconds)
    seconds = time.time() - started
    # Swap the finished model in: a crash before this leaves only the .partial dir, which the next run clears.
    shutil.rmtree(ckpt, ignore_errors=True)
    os.replace(staging, ckpt)
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
