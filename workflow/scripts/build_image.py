"""Adapter: rule image -> ptflow.cluster.image_build.plan_build + run_build (a CPU job, never a GPU allocation)."""

import tempfile

from ptflow.cluster import image_build
from ptflow.config.sites import RuntimeSpec
from ptflow.jobenv import rule_log

with rule_log(snakemake.log[0]) as log:
    rt = RuntimeSpec.from_dict(snakemake.params.runtime)
    image_build.check_arch(rt)
    with tempfile.TemporaryDirectory(prefix=f"ptflow-image-{snakemake.wildcards.image}-") as work:
        plan = image_build.plan_build(
            rt,
            snakemake.params.name,
            snakemake.output.image,
            digest=snakemake.params.digest,
            recipe_root=snakemake.params.recipe_root,
            workdir=work,
            build_args=snakemake.params.spec.get("build_args"),
            job=image_build.BuildJob(minutes=snakemake.resources.get("runtime")),
        )
        image_build.run_build(
            plan,
            snakemake.output.record,
            {"digest": snakemake.params.digest, "spec": snakemake.params.spec, "arch": rt.arch},
            log=log,
        )
