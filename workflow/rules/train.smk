# Stage 3: one training per (model, eval, agent). The checkpoint goes to scratch; the manifest is the output.
# Two rules, disjoint by agent: `train` is a job the slurm plugin submits; `train_supervised` runs on the login node
# as a supervisor that submits the GPU job itself (sites with infra_retries; kinds with a helper job such as SkyRL's
# runtime server), resubmits it and records status.json (ptflow.cluster.supervise).


rule train:
    input:
        unpack(get_train_input),
    output:
        LAYOUT.manifest("{model}", "{eval}", "{agent}"),
    log:
        LAYOUT.log("train", "{model}", "{eval}", "{agent}"),
    wildcard_constraints:
        agent=agent_constraint(supervised=False),
    # trainings are the long chain (sft, then grpo from it, then their evaluations): start them before evaluations
    # that could wait, or the last training starts late and the run ends long after the rest (embedded default)
    priority: 1
    conda:
        CONDA_ENV
    threads: threads_of("train", supervised_agents(False))
    resources:
        **resources_of("train", supervised_agents(False)),
    params:
        job=get_train_params,
    script:
        "../scripts/train.py"


rule train_supervised:
    input:
        unpack(get_train_input),
    output:
        LAYOUT.manifest("{model}", "{eval}", "{agent}"),
    log:
        LAYOUT.log("train", "{model}", "{eval}", "{agent}"),
    wildcard_constraints:
        agent=agent_constraint(supervised=True),
    priority: 1
    localrule: is_local("train_supervised")
    conda:
        CONDA_ENV
    # one thread on the login node (Snakemake caps more at --local-cores and would run fewer at once); the job it
    # submits gets the site's CPUs (its request, in params)
    threads: 1
    resources:
        **supervised_held_of("train_supervised"),
        # the supervisor scales the job it submits by the rule's attempt, which scripts see only here
        attempt=get_attempt,
    params:
        job=get_train_params,
    script:
        "../scripts/train.py"
