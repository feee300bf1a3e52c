"""Adapter: rule judge_run (one vote of the judge panel) -> ptflow.stages.judge.vote.judge_job."""

from ptflow.jobenv import rule_log
from ptflow.specs import JudgeSpec
from ptflow.stages.judge.vote import judge_job
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)

with rule_log(snakemake.log[0]) as log:
    job = JudgeSpec.from_params(snakemake.params.job)
    judge_job(job, snakemake.input.manifest, snakemake.input.get("checkout"), snakemake.output[0], log)
