# Stage 5: the matrix scored as PostTrainBench scores it: summary.csv (one row per cell, fallbacks said), agents.csv
# (one row per agent), leaderboard.md, the heatmap of the Snakemake report and results/report/index.html.


rule aggregate:
    input:
        **aggregate_checkout_input(),
        evals=eval_jsons(),
        judges=judge_jsons(),
    output:
        summary=L.summary(),
        agents=L.agents_csv(),
        leaderboard=L.leaderboard(),
        heatmap=report(
            L.heatmap(),
            caption="../report/heatmap.rst",
            category="Results",
        ),
        report=L.report_index(),
    log:
        L.log("aggregate", "aggregate"),
    conda:
        CONDA_ENV
    threads: threads_of("aggregate")
    resources:
        **resources_of("aggregate"),
    params:
        scoring=scoring_params(),
    script:
        "../scripts/aggregate.py"
