"""The ``ptflow`` command for operating a matrix: plan, status, cancel, logs and remote runs over SSH.

It reads the configuration through ``ptflow.config.load`` exactly as the workflow does, and asks Slurm only through
``ptflow.cluster.slurm``. It may import every other package; nothing imports it.
"""
