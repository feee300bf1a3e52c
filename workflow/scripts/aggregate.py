"""Adapter: rule aggregate -> ptflow.stages.report.aggregate."""

from ptflow.jobenv import rule_log
from ptflow.stages.report import aggregate

with rule_log(snakemake.log[0]) as log:
    aggregate(
        list(snakemake.input.evals),
        list(snakemake.params.agents),
        snakemake.output.summary,
        snakemake.output.leaderboard,
        snakemake.output.heatmap,
    )
    log(f"aggregated {len(snakemake.input.evals)} cells")
