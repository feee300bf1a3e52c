# Software environments as outputs (site runtime.envs): the verl venv over the ngc-ray-vllm image (Alps guide, step
# 8) and NeMo-RL's uv environment (JUWELS plan, step 2), built in a CPU job (resources.env, else resources.image)
# with their import check; the train jobs of the agents each one is `for` depend on it (RuleInputs.envs).


rule env:
    input:
        unpack(get_env_build_input),
    output:
        LAYOUT.env_record("{env}"),
    log:
        LAYOUT.log("env", "{env}"),
    wildcard_constraints:
        env=naming.SAFE_ID_PATTERN,
    conda:
        CONDA_ENV
    threads: threads_of("env")
    resources:
        **resources_of("env"),
    params:
        spec=get_env_build_spec,
        runtime=RUNTIME.to_dict(),
    script:
        "../scripts/env.py"
