# Stage 4c: a cell's stored inspect log scored again by another scorer (evals[].rescore; exact_numeric for gsm8k and
# aime2025 by default: the last number compared by value, where PostTrainBench's pinned inspect compared with
# endswith). It reads eval.json and the log it names, runs no model and needs no GPU: a CPU job (the aggregate
# request). rescore/<scorer>.json goes beside eval.json; the leaderboard and report get a column of their own.


rule rescore:
    input:
        LAYOUT.eval_json("{model}", "{eval}", "{agent}"),
    output:
        LAYOUT.rescore_json("{model}", "{eval}", "{agent}", "{scorer}"),
    log:
        LAYOUT.log("rescore", "{model}", "{eval}", "{agent}", "{scorer}"),
    wildcard_constraints:
        scorer=rescorer_constraint(),
    conda:
        CONDA_ENV
    threads: threads_of("rescore")
    resources:
        **resources_of("rescore"),
    script:
        "../scripts/rescore.py"
