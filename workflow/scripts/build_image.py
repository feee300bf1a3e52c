"""Adapter: rule image -> ptflow.cluster.images.plan_build + run_build (a CPU job, never a GPU allocation)."""

import tempfile

from ptflow.cluster import images
from ptflow.config.sites import RuntimeSpec
from ptflow.jobenv import rule_log

with rule_log(snakemake.log[0]) as log:
    rt = RuntimeSpec.from_dict(snakemake.params.runtime)
    images.check_arch(rt)
    with tempfile.TemporaryDirectory(prefix=f"ptflow-image-{snakemake.wildcards.image}-") as work:
        plan = images.plan_build(
            rt,
            snakemake.params.name,
            snakemake.output.image,
            digest=snakemake.params.digest,
            recipe_root=snakemake.params.recipe_root,
            workdir=work,
            build_args=snakemake.params.spec.get("build_args"),
            job=images.BuildJob(minutes=snakemake.resources.get("runtime")),
        )
        images.run_build(
            plan,
            snakemake.output.record,
            {"digest": snakemake.params.digest, "spec": snakemake.params.spec, "arch": rt.arch},
            log=log,
        )
