"""Adapter: rule judge -> ptflow.stages.judge.judge_cell."""

import json
from pathlib import Path

from ptflow.jobenv import rule_log
from ptflow.specs import JudgeSpec
from ptflow.stages.judge import judge_cell
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)

with rule_log(snakemake.log[0]) as log:
    job = JudgeSpec.from_params(snakemake.params.job)
    judge_cell(
        cell=job.cell.to_params(with_run=False),
        manifest=json.loads(Path(snakemake.input.manifest).read_text()),
        judge=job.judge,
        judge_json=snakemake.output[0],
        keys=job.keys,
        runtime=job.runtime,
        checkout=(
            {**json.loads(Path(snakemake.input.checkout).read_text()), **job.posttrainbench}
            if job.posttrainbench
            else None
        ),
        log=log,
    )
