# Stage 1: the HF cache. One marker per repo (so a new model fetches only itself) and one for the whole cache.


rule cache_dataset:
    output:
        LAYOUT.dataset_marker("{dataset}"),
    log:
        LAYOUT.log("cache", "datasets", "{dataset}"),
    conda:
        CONDA_ENV
    threads: threads_of("cache_dataset")
    resources:
        **resources_of("cache_dataset"),
    params:
        spec=get_dataset_spec,
        hf_home=HF_HOME,
    script:
        "../scripts/cache_dataset.py"


rule cache_model:
    input:
        datasets=get_tokenizer_datasets,
    output:
        LAYOUT.model_marker("{model}"),
    log:
        LAYOUT.log("cache", "models", "{model}"),
    conda:
        CONDA_ENV
    threads: threads_of("cache_model")
    resources:
        **resources_of("cache_model"),
    params:
        spec=get_model_spec,
        hf_home=HF_HOME,
    script:
        "../scripts/cache_model.py"


rule cache_eval_data:
    output:
        LAYOUT.eval_data_marker("{eval}"),
    log:
        LAYOUT.log("cache", "evals", "{eval}"),
    conda:
        CONDA_ENV
    threads: threads_of("cache_eval_data")
    resources:
        **resources_of("cache_eval_data"),
    params:
        spec=get_eval_data_spec,
        hf_home=HF_HOME,
        evals_cache=LAYOUT.evals_cache,
    script:
        "../scripts/cache_eval_data.py"


rule cache_resources:
    input:
        cache_resource_files(),
    output:
        LAYOUT.resources_marker(),
    log:
        LAYOUT.log("cache", "resources"),
    conda:
        CONDA_ENV
    threads: threads_of("cache_resources")
    resources:
        **resources_of("cache_resources"),
    params:
        files=cache_resource_files(),
        hf_home=HF_HOME,
        evals_cache=LAYOUT.evals_cache,
    script:
        "../scripts/cache_eval_data.py"


rule hf_cache:
    input:
        repos=cache_markers(),
        data=data_markers(),
    output:
        LAYOUT.cache_marker(),
    log:
        LAYOUT.log("cache", "hf_cache"),
    localrule: is_local("hf_cache")
    conda:
        CONDA_ENV
    threads: threads_of("hf_cache")
    resources:
        **resources_of("hf_cache"),
    params:
        hf_home=HF_HOME,
    script:
        "../scripts/hf_cache.py"
