"""Adapter: rule aggregate -> ptflow.stages.report.aggregate (PostTrainBench's score, outputs and the HTML report)."""

from pathlib import Path

from ptflow.jobenv import rule_log
from ptflow.specs import ScoringSpec
from ptflow.stages.report import aggregate
from ptflow.stages.score import settings_from_config
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)

with rule_log(snakemake.log[0]) as log:
    scoring = ScoringSpec.from_params(snakemake.params.scoring)
    aggregate(
        list(snakemake.input.evals),
        settings_from_config(scoring.raw, scoring.reference, scoring.agent_gpus),
        expected=scoring.expected,
        model_ids=scoring.model_ids,
        summary_csv=snakemake.output.summary,
        agents_csv=snakemake.output.agents,
        leaderboard_md=snakemake.output.leaderboard,
        heatmap_png=snakemake.output.heatmap,
        report_dir=Path(snakemake.output.report).parent,
        checkout_marker=snakemake.input.get("checkout"),
        log=log,
    )
