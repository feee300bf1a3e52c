# Stage 4: one inspect-ai evaluation per cell; eval.json is derived from inspect's log, kept beside it. An agent
# cell's train job evaluates in its own allocation after the agent; this job then adopts that result (a CPU job).


rule evaluate:
    input:
        unpack(get_evaluate_input),
    output:
        eval_json=LAYOUT.eval_json("{model}", "{eval}", "{agent}"),
        inspect=directory(LAYOUT.inspect_dir("{model}", "{eval}", "{agent}")),
    log:
        LAYOUT.log("evaluate", "{model}", "{eval}", "{agent}"),
    conda:
        CONDA_ENV
    # an agent cell whose train job evaluated in its own allocation: a CPU job that adopts that evaluation
    threads: evaluate_threads
    resources:
        **evaluate_resources,
    params:
        job=get_evaluate_params,
    script:
        "../scripts/evaluate.py"
