"""Adapter: rule aggregate -> ptflow.results.report.aggregate (PostTrainBench's score, outputs and the HTML report)."""

from pathlib import Path

from ptflow.jobenv import rule_log
from ptflow.results.report import ReportOutputs, aggregate
from ptflow.specs import ScoringSpec
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)

with rule_log(snakemake.log[0]) as log:
    out = snakemake.output
    aggregate(
        list(snakemake.input.evals),
        ScoringSpec.from_params(snakemake.params.scoring),
        ReportOutputs(out.summary, out.agents, out.leaderboard, out.heatmap, Path(out.report).parent),
        checkout_marker=snakemake.input.get("checkout"),
        overrides=snakemake.input.get("overrides"),  # scoring.overrides: decisions that outrank the judges'
        log=log,
    )
