"""Adapter: rule preprocess -> ptflow.stages.data.preprocess."""

import json
from pathlib import Path

from ptflow.cluster import hfcache
from ptflow.jobenv import rule_log
from ptflow.stages.data.preprocess import preprocess_gsm8k
from ptflow.warmstart import hand_over

hand_over()  # a local run: go on in a process that has the heavy libraries imported (ptflow.warmstart)

with rule_log(snakemake.log[0]) as log:
    spec = snakemake.params.spec
    entry = json.loads(Path(snakemake.input[0]).read_text())
    snapshot = hfcache.snapshot_path(snakemake.params.hf_home, entry["repo"], "dataset", entry["revision"])
    preprocess_gsm8k(snapshot, spec["dataset"]["repo"], snakemake.output.train, snakemake.output.test, log=log)
