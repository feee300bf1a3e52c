"""What the workflow's rules call: one function per stage, from files in to files out.

``cache`` (HF cache, tiny models), ``data`` (synthetic data, verl parquet), ``train`` (one module per agent kind,
dispatched through ``ptflow.config.kinds``), ``evaluate`` (inspect-ai, eval.json), ``judge`` and ``report``.
Scripts in ``workflow/scripts`` are thin adapters over these. Stages may import ``config``, ``cluster`` and
``launch``; they never read Snakemake's globals and never import ``ops``.
"""
