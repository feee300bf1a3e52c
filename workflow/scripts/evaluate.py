"""Adapter: rule evaluate -> ptflow.stages.evaluate.run.evaluate_cell."""

import json
from pathlib import Path

from ptflow.cluster import hfcache
from ptflow.cluster.runtime import reexec_in_runtime
from ptflow.jobenv import rule_log
from ptflow.stages.checkpoint import verify_checkpoint
from ptflow.stages.evaluate.run import evaluate_cell, no_model_eval

with rule_log(snakemake.log[0]) as log:
    job = snakemake.params.job
    reexec_in_runtime(job.get("runtime"), log)  # container or site venv; returns at once on the local default
    train_seconds = None
    manifest = None
    if "manifest" in snakemake.input.keys():
        manifest = json.loads(Path(snakemake.input.manifest).read_text())
    if manifest is not None and manifest.get("final_model") is False:  # cli-agent left no model: say so
        no_model_eval(
            cell=job["cell"],
            task=job["task"],
            manifest=manifest,
            eval_json=snakemake.output.eval_json,
            inspect_dir=snakemake.output.inspect,
            log=log,
        )
    elif manifest is not None:
        model_path = str(verify_checkpoint(manifest))
        checkpoint = {
            "path": model_path,
            "kind": "trained",
            "commit_or_hash": manifest["config_hash"],
            "step": manifest["step"],
        }
        train_seconds = manifest["train_seconds"]
    else:  # the base model, or (agents of kind instruct) its instruct counterpart
        evaluated = job.get("evaluated_model") or {"id": job["cell"]["model"], "revision": job["model_revision"]}
        snap = hfcache.snapshot_path(job["hf_home"], evaluated["id"], "model", evaluated["revision"])
        model_path = str(snap)
        kind = "instruct" if "evaluated_model" in job else "base"
        checkpoint = {"path": model_path, "kind": kind, "commit_or_hash": snap.name, "step": None}
    if manifest is None or manifest.get("final_model") is not False:
        evaluate_cell(
            cell=job["cell"],
            task=job["task"],
            model_path=model_path,
            test_parquet=snakemake.input.get("test"),
            checkpoint=checkpoint,
            max_new_tokens=job["max_new_tokens"],
            retry_max_new_tokens=tuple(job["retry_max_new_tokens"]),
            inspect_dir=snakemake.output.inspect,
            eval_json=snakemake.output.eval_json,
            train_seconds=train_seconds,
            threads=snakemake.threads,
            log=log,
            agent_run=manifest.get("agent_run") if manifest else None,
        )
