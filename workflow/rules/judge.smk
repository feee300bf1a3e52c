# Stage 4b (cli-agent cells only): the agent's trace made readable and checked by the configured judge LLM CLI
# (contamination, disallowed models). judge.json goes beside eval.json; without a judge it records "skipped".
# A local rule: the judge calls an LLM API, which the login node reaches and compute nodes may not.


rule judge:
    input:
        unpack(get_judge_input),
    output:
        L.judge_json("{model}", "{eval}", "{agent}"),
    log:
        L.log("judge", "{model}", "{eval}", "{agent}"),
    localrule: is_local("judge")
    conda:
        CONDA_ENV
    threads: get_threads("judge")
    resources:
        **get_resources("judge"),
    params:
        job=get_judge_params,
    script:
        "../scripts/judge.py"
