# Stage 3: one training per (model, eval, agent). The checkpoint goes to scratch; the manifest is the output.


rule train:
    input:
        unpack(get_train_input),
    output:
        L.manifest("{model}", "{eval}", "{agent}"),
    log:
        L.log("train", "{model}", "{eval}", "{agent}"),
    # on sites with infra_retries: a login-node supervisor that submits and resubmits the GPU job itself
    localrule: is_supervised("train")
    conda:
        CONDA_ENV
    threads: get_threads("train")
    resources:
        **get_resources("train"),
    params:
        job=get_train_params,
    script:
        "../scripts/train.py"
