"""Adapter: rule judge (the judge panel's decision over a cell's votes) -> ptflow.stages.judge.panel.decide_cell."""

from ptflow.jobenv import rule_log
from ptflow.specs import JudgePanelSpec
from ptflow.stages.judge.panel import decide_cell

with rule_log(snakemake.log[0]) as log:
    job = JudgePanelSpec.from_params(snakemake.params.job)
    decide_cell(job, snakemake.input.manifest, list(snakemake.input.votes), snakemake.output[0], log)
