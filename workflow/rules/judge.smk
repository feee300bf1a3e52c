# Stage 4b (cli-agent cells only): the agent's trace made readable and checked by the configured judge panel
# (contamination, disallowed models, and the fields its judges declare). Each run of each judge is a vote, its own
# file target (rule judge_run: a CPU job, the site's judge request, else aggregate's; an agentic judge runs its CLI
# in the agent's image). It needs the agent's work only (the manifest), so it starts when the agent ends, beside the
# evaluation. Rule judge decides the panel from the votes into judge.json beside eval.json (login node, seconds);
# without a judge it records "skipped".


rule judge_run:
    input:
        unpack(get_judge_run_input),
    output:
        LAYOUT.judge_vote_json("{model}", "{eval}", "{agent}", "{judge}", "{run}"),
    log:
        LAYOUT.log("judge_run", "{model}", "{eval}", "{agent}", "{judge}", "run{run}"),
    localrule: is_local("judge_run")
    conda:
        CONDA_ENV
    threads: threads_of("judge_run")
    resources:
        **resources_of("judge_run"),
    params:
        job=get_judge_run_params,
    script:
        "../scripts/judge_run.py"


rule judge:
    input:
        unpack(get_judge_input),
    output:
        LAYOUT.judge_json("{model}", "{eval}", "{agent}"),
    log:
        LAYOUT.log("judge", "{model}", "{eval}", "{agent}"),
    localrule: is_local("judge")
    conda:
        CONDA_ENV
    threads: threads_of("judge")
    resources:
        **resources_of("judge"),
    params:
        job=get_judge_params,
    script:
        "../scripts/judge.py"
