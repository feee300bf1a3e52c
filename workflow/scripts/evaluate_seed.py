"""Adapter: rule evaluate_seed -> ptflow.stages.evaluate.job.evaluate_seed_job (one evaluation seed of a cell)."""

from ptflow.jobenv import rule_log
from ptflow.specs import EvaluateSpec
from ptflow.stages.evaluate.job import evaluate_seed_job
from ptflow.stages.evaluate.run import EvalInputs, EvalOutputs
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)

with rule_log(snakemake.log[0]) as log:
    evaluate_seed_job(
        EvaluateSpec.from_params(snakemake.params.job),
        EvalInputs.of_rule(snakemake.input, snakemake.threads),
        EvalOutputs(snakemake.output.eval_json, snakemake.output.inspect),
        first_seed=snakemake.input.get("first_seed"),
        seed_changes_data=snakemake.params.seed_changes_data,
        log=log,
    )
