# Stage 5: the matrix scored as PostTrainBench scores it: summary.csv (one row per cell, fallbacks said), agents.csv
# (one row per agent), leaderboard.md, the heatmap of the Snakemake report and results/report/index.html.


rule aggregate:
    input:
        **aggregate_checkout_input(),
        **overrides_input(),
        evals=eval_jsons(),
        judges=judge_jsons(),
        rescores=rescore_jsons(),
    output:
        summary=LAYOUT.summary(),
        agents=LAYOUT.agents_csv(),
        leaderboard=LAYOUT.leaderboard(),
        heatmap=report(
            LAYOUT.heatmap(),
            caption="../report/heatmap.rst",
            category="Results",
        ),
        report=LAYOUT.report_index(),
    log:
        LAYOUT.log("aggregate", "aggregate"),
    conda:
        CONDA_ENV
    threads: threads_of("aggregate")
    resources:
        **resources_of("aggregate"),
    params:
        scoring=scoring_params(),
    script:
        "../scripts/aggregate.py"
