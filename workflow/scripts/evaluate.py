"""Adapter: rule evaluate -> ptflow.stages.evaluate.run.evaluate_cell (or no_model_eval)."""

import json
import os
from pathlib import Path

from ptflow.cluster import hfcache
from ptflow.cluster.runtime import inside_runtime, reexec_in_runtime
from ptflow.jobenv import rule_log
from ptflow.jobs.specs import EvaluateSpec
from ptflow.stages.checkpoint import verify_checkpoint
from ptflow.stages.evaluate.run import evaluate_cell, evaluate_checkout_cell, no_model_eval
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)

with rule_log(snakemake.log[0]) as log:
    job = EvaluateSpec.from_params(snakemake.params.job)
    cell = job.cell.to_params()
    reexec_in_runtime(job.runtime, log)  # container or site venv; returns at once on the local default
    # Inside the site's runtime HF_HOME is the job's private view of the shared cache (ptflow.cluster.runtime).
    hf_home = os.environ["HF_HOME"] if inside_runtime() and os.environ.get("HF_HOME") else job.hf_home
    manifest = None
    if "manifest" in snakemake.input.keys():
        manifest = json.loads(Path(snakemake.input.manifest).read_text())
    if manifest is not None and manifest.get("final_model") is False:  # cli-agent left no model: say so
        no_model_eval(
            cell=cell,
            call=job.call,
            manifest=manifest,
            eval_json=snakemake.output.eval_json,
            inspect_dir=snakemake.output.inspect,
            log=log,
        )
    else:
        if manifest is not None:
            model_path = str(verify_checkpoint(manifest))
            checkpoint = {
                "path": model_path,
                "kind": "trained",
                "commit_or_hash": manifest["config_hash"],
                "step": manifest["step"],
            }
        else:  # the base model, or (agents of kind instruct) its instruct counterpart
            evaluated = job.evaluated_model or {"id": job.cell.model, "revision": job.model_revision}
            snap = hfcache.snapshot_path(hf_home, evaluated["id"], "model", evaluated["revision"])
            model_path = str(snap)
            kind = "instruct" if job.evaluated_model else "base"
            checkpoint = {"path": model_path, "kind": kind, "commit_or_hash": snap.name, "step": None}
        if "checkout" in snakemake.input.keys():  # an eval of the PostTrainBench checkout
            evaluate_checkout_cell(
                cell=cell,
                call=job.call,
                checkout=json.loads(Path(snakemake.input.checkout).read_text()),
                model_path=model_path,
                checkpoint=checkpoint,
                inspect_dir=snakemake.output.inspect,
                eval_json=snakemake.output.eval_json,
                hf_home=hf_home,
                train_seconds=manifest["train_seconds"] if manifest else None,
                agent_run=manifest.get("agent_run") if manifest else None,
                log=log,
            )
        else:
            evaluate_cell(
                cell=cell,
                call=job.call,
                model_path=model_path,
                checkpoint=checkpoint,
                inspect_dir=snakemake.output.inspect,
                eval_json=snakemake.output.eval_json,
                hf_home=hf_home,
                evals_cache=job.evals_cache,
                test_parquet=snakemake.input.get("test"),
                train_seconds=manifest["train_seconds"] if manifest else None,
                threads=snakemake.threads,
                agent_run=manifest.get("agent_run") if manifest else None,
                log=log,
            )
