"""The read side over finished cells: what the cells' jobs left under ``results/``, read, scored and written out.

``cells`` reads one cell's eval.json (and its judge.json, trace), ``settings``, ``references`` and ``scoring`` turn
the cells into PostTrainBench's score, ``tables`` writes summary.csv, agents.csv and leaderboard.md, ``report`` is
the aggregate rule's stage (with ``report_site``, the static HTML report), ``ptb_score`` the leaderboard's own score
of a checkout run and ``ptb_export`` the cells in PostTrainBench's results layout; ``cell_state`` decides a cell's
state from its files and its jobs' Slurm records, for ``ptflow status``. Nothing here starts a job: it may import
``config``, ``specs``, ``cluster``'s read-only helpers, and ``stages`` only where it reads a stage's file format;
``ops`` imports it.
"""
