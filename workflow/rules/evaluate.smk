# Stage 4: one inspect-ai evaluation per cell; eval.json is derived from inspect's log, kept beside it. An agent
# cell's train job evaluates in its own allocation after the agent; this job then adopts that result (a CPU job).
# A seeded eval (matrix.seeds / evals[].seeds) is evaluated once per seed instead (evaluate_seed, each seed its own
# file: a later seed reads the first's), and its cells' eval.json is the mean over the seeds (seed_mean).


rule evaluate:
    input:
        unpack(get_evaluate_input),
    output:
        eval_json=LAYOUT.eval_json("{model}", "{eval}", "{agent}"),
        inspect=directory(LAYOUT.inspect_dir("{model}", "{eval}", "{agent}")),
    log:
        LAYOUT.log("evaluate", "{model}", "{eval}", "{agent}"),
    wildcard_constraints:
        eval=eval_constraint(seeded=False),
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


rule evaluate_seed:
    input:
        unpack(get_evaluate_seed_input),
    output:
        eval_json=LAYOUT.seed_eval_json("{model}", "{eval}", "{agent}", "{seed}"),
        inspect=directory(
            LAYOUT.seed_inspect_dir("{model}", "{eval}", "{agent}", "{seed}")
        ),
    log:
        LAYOUT.log("evaluate", "{model}", "{eval}", "{agent}", "{seed}"),
    wildcard_constraints:
        eval=eval_constraint(seeded=True),
        seed=r"\d+",
    conda:
        CONDA_ENV
    # adopting the seed's evaluation its cell's train job made, or skipped by the first seed: a CPU job
    threads: evaluate_seed_threads
    resources:
        **evaluate_seed_resources,
    params:
        job=get_evaluate_seed_params,
        seed_changes_data=get_seed_changes_data,
    script:
        "../scripts/evaluate_seed.py"


rule seed_mean:
    input:
        get_seed_mean_input,
    output:
        LAYOUT.eval_json("{model}", "{eval}", "{agent}"),
    log:
        LAYOUT.log("seed_mean", "{model}", "{eval}", "{agent}"),
    wildcard_constraints:
        eval=eval_constraint(seeded=True),
    localrule: is_local("seed_mean")
    conda:
        CONDA_ENV
    threads: threads_of("seed_mean")
    resources:
        **resources_of("seed_mean"),
    script:
        "../scripts/seed_mean.py"
