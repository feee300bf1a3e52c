# Container images and CSCS EDF files as outputs: built once per name and recipe in a CPU job (resources.image),
# never on a GPU allocation. Rules that run inside an image depend on it (RuleInputs.images).


rule image:
    input:
        recipe=get_image_recipe,
    output:
        image=f"{IMAGES_DIR}/{{image}}.{{suffix}}",
        record=f"{IMAGES_DIR}/{{image}}.{{suffix}}.json",
    log:
        LAYOUT.log("image", "{image}.{suffix}"),
    wildcard_constraints:
        image=naming.SAFE_ID_PATTERN,
        suffix="sif|sqsh",
    conda:
        CONDA_ENV
    threads: get_image_threads
    resources:
        **image_resources(),
    params:
        name=get_image_name,
        spec=get_image_spec,
        digest=get_image_digest,
        reconvert=get_image_reconvert,
        runtime=get_image_runtime,
        recipe_root=workflow.basedir,
    script:
        "../scripts/build_image.py"


rule edf:
    input:
        image=get_edf_image,
    output:
        f"{IMAGES_DIR}/edf/{{image}}.toml",
    log:
        LAYOUT.log("image", "edf", "{image}"),
    wildcard_constraints:
        image=naming.SAFE_ID_PATTERN,
    localrule: is_local("edf")
    conda:
        CONDA_ENV
    threads: threads_of("edf")
    resources:
        **resources_of("edf"),
    params:
        name=get_edf_name,
        mounts=list(RUNTIME.mounts),
        env=SITE.env,
    script:
        "../scripts/edf.py"
