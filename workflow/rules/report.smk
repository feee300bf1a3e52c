# Stage 5: the matrix scored as PostTrainBench scores it: summary.csv (one row per cell, fallbacks said), agents.csv
# (one row per agent), leaderboard.md, the heatmap of the Snakemake report and results/report/index.html.


rule aggregate:
    input:
        evals=get_eval_jsons(),
        judges=get_judge_jsons(),
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
    threads: get_threads("aggregate")
    resources:
        **get_resources("aggregate"),
    params:
        scoring=get_scoring(),
    script:
        "../scripts/aggregate.py"
