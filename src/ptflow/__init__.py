"""ptflow: LLM post-training benchmark matrices as a Snakemake workflow on Slurm clusters.

Layers, each importing only those before it (``tests/unit/test_architecture.py`` keeps it so):

- foundation — ``files`` (atomic writes, hashes), ``keys`` (secret names), ``templates`` (what we render),
  ``jobenv`` (a job's environment and rule log), ``warmstart`` (local jobs forked from warm processes),
  ``snakemake_once`` (two of Snakemake's per-job computations, done once);
- ``config``  — the validated configuration: models, evals, agents, cells, agent kinds, sites, paths;
- ``specs``   — the job contract: one frozen value per rule's job, typed all the way down (its stage's runtime,
  its evaluation call, a checkout cell's files), what its params carry and its script, stage and cluster code take
  (``TrainSpec``, ``EvaluateSpec``, ...);
- ``cluster`` — the machine: Slurm commands, preflight, supervision and infra retries, container runtimes and
  images, the shared HF cache and private views of it, time-limit warnings, multi-node helpers;
- ``launch``  — programs spread over an allocation: the Ray launcher, SkyRL's two-job coordination;
- ``stages``  — the steps jobs run: cache, data, train (one module per agent kind), an agent-CLI cell (``agent``),
  evaluate (a cell's evaluation in its evaluate job or its train job's allocation), judge;
- ``standins`` — programs that stand in for what cannot run here, selectable on purpose (the scripted agent);
- ``jobs``    — the specs built from config, site and layout, and the rules' inputs, threads and resources
  (``workflow/rules/common.smk`` looks them up);
- ``results`` — the read side over finished cells: score, tables, report, PostTrainBench export, a cell's state
  from its files; it starts no job;
- ``ops``     — the ``ptflow`` command (plan, status, cancel, logs, remote) and the driver's hooks.

The words used here (job, spec, runtime, cell, stage, ...) have one meaning each, written once in
docs/concepts.md's glossary.
"""
