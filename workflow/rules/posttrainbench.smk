# Stage 0 (config key posttrainbench only): PostTrainBench's checkout at its commit, a file target. A checkpoint:
# the cells' params carry the git object ids of the paths each one uses, read from its marker once it exists.


checkpoint posttrainbench_checkout:
    output:
        LAYOUT.posttrainbench_marker(),
    log:
        LAYOUT.log("posttrainbench", "checkout"),
    localrule: is_local("posttrainbench_checkout")
    conda:
        CONDA_ENV
    threads: threads_of("posttrainbench_checkout")
    resources:
        **resources_of("posttrainbench_checkout"),
    params:
        spec=ptb_checkout_spec(),
    script:
        "../scripts/posttrainbench_checkout.py"


# The checkout's resources.json into HF_HOME (a CPU job, where the network is): with the checkout's own download
# script in the site's standard image (apptainer sites that build it from the checkout), else ptflow's cache code
# over the same list. Its marker names each repo and the commit fetched; the checkout's evaluations (offline) need it.
rule posttrainbench_cache:
    input:
        unpack(get_ptb_cache_input),
    output:
        LAYOUT.posttrainbench_cache_marker(),
    log:
        LAYOUT.log("posttrainbench", "hf_cache"),
    conda:
        CONDA_ENV
    threads: threads_of("posttrainbench_cache")
    resources:
        **resources_of("posttrainbench_cache"),
    params:
        job=get_ptb_cache_params,
    script:
        "../scripts/posttrainbench_cache.py"
