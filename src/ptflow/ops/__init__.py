"""Operating a matrix: the ``ptflow`` command (plan, status, cancel, logs, remote runs over SSH) and the driver's
start (``driver``: one driver per working directory, earlier runs' jobs adopted), which the workflow's ``onstart``
calls.

It reads the configuration through ``ptflow.config.load`` exactly as the workflow does, and asks Slurm only through
``ptflow.cluster.slurm``. It may import every other package; nothing in the package imports it.
"""
