"""Adapter: rule evaluate -> the train job's staged evaluation adopted (ptflow.stages.evaluate.in_train_job), else
ptflow.jobs.evaluation.run_evaluation."""

import os
import sys

from ptflow.cluster.runtime import reexec_in_runtime
from ptflow.jobenv import rule_log
from ptflow.jobs.evaluation import job_deadline, ladder_progress, run_evaluation
from ptflow.specs import EvaluateSpec
from ptflow.stages.evaluate import in_train_job
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)

with rule_log(snakemake.log[0]) as log:
    job = EvaluateSpec.from_params(snakemake.params.job)
    out = snakemake.output
    manifest = snakemake.input.get("manifest")
    why_not = in_train_job.why_not_adoptable(out.eval_json, snakemake.params.job, manifest)
    if why_not is None:
        in_train_job.adopt(out.eval_json, out.inspect, log=log)
        sys.exit(0)
    if manifest:
        log(f"evaluating in this job: {why_not}")
    deadline = job_deadline(os.environ.get("SLURM_JOB_ID"))  # asked here, on the host: the runtime may lack scontrol
    # container or site venv (returns at once on the local default), with a view of the HF cache holding the model
    # repos the evaluation reads: the base or instruct model; none for a trained model (on scratch)
    reexec_in_runtime(job.runtime, log, hf_models=[] if manifest else [job.evaluated_model_id])
    run_evaluation(
        job,
        eval_json=out.eval_json,
        inspect_dir=out.inspect,
        manifest=manifest,
        checkout=snakemake.input.get("checkout"),
        test_parquet=snakemake.input.get("test"),
        threads=snakemake.threads,
        progress=str(ladder_progress(out.eval_json)),  # a checkout eval's ladder goes on where a job stopped
        deadline=deadline,
        log=log,
    )
