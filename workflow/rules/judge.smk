# Stage 4b (cli-agent cells only): the agent's trace made readable and checked by the configured judge
# (contamination, disallowed models). judge.json goes beside eval.json; without a judge it records "skipped".
# A CPU job (the site's judge request, else aggregate's): an agentic judge runs its CLI in the agent's image. It
# needs the agent's work only (the manifest), so it starts when the agent ends, beside the evaluation.


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
