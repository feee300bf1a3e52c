"""Adapter: rule edf -> ptflow.cluster.images.render_edf (CSCS EDF TOML naming the image and the site's mounts)."""

from ptflow.cluster.images import render_edf
from ptflow.files import write_text_atomic
from ptflow.jobenv import rule_log

with rule_log(snakemake.log[0]) as log:
    text = render_edf(
        snakemake.params.name,
        snakemake.input.image,
        snakemake.params.mounts,
        snakemake.output[0],
        env=snakemake.params.env,
    )
    write_text_atomic(snakemake.output[0], text)
    log(f"wrote {snakemake.output[0]}:\n{text}")
