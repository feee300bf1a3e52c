# Stage 4: one inspect-ai evaluation per cell; eval.json is derived from inspect's log, kept beside it.


rule evaluate:
    input:
        unpack(get_evaluate_input),
    output:
        eval_json=L.eval_json("{model}", "{eval}", "{agent}"),
        inspect=directory(L.inspect_dir("{model}", "{eval}", "{agent}")),
    log:
        L.log("evaluate", "{model}", "{eval}", "{agent}"),
    conda:
        CONDA_ENV
    threads: threads_of("evaluate")
    resources:
        **resources_of("evaluate"),
    params:
        job=get_evaluate_params,
    script:
        "../scripts/evaluate.py"
