# Stage 0 (config key posttrainbench only): PostTrainBench's checkout at its commit, a file target. A checkpoint:
# the cells' params carry the git object ids of the paths each one uses, read from its marker once it exists.


checkpoint posttrainbench_checkout:
    output:
        L.posttrainbench_marker(),
    log:
        L.log("posttrainbench", "checkout"),
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
