# Stage 2: each eval's dataset as verl RL parquet (train and test).


rule preprocess:
    input:
        get_preprocess_input,
    output:
        train=LAYOUT.data("{eval}", "train"),
        test=LAYOUT.data("{eval}", "test"),
    log:
        LAYOUT.log("preprocess", "{eval}"),
    conda:
        CONDA_ENV
    threads: threads_of("preprocess")
    resources:
        **resources_of("preprocess"),
    params:
        spec=get_eval_spec,
        hf_home=HF_HOME,
    script:
        "../scripts/preprocess.py"
