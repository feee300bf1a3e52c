"""The machine ptflow runs on: Slurm, container runtimes and images, the shared HF cache, supervision, preflight.

``slurm`` is the only module that runs Slurm's commands; ``runtime`` the only one that builds apptainer, pyxis,
EDF or venv command lines; ``images`` builds images; ``hfcache``/``hfview`` own the hub cache layout and the private
views of it; ``preflight`` checks a matrix against the live cluster; ``supervise`` and ``infra_retry`` resubmit after
infrastructure failures; ``preempt`` handles time-limit warnings; ``multinode`` reads allocations back and spreads
processes over them. It may import ``config`` and the foundation modules, never ``launch``, ``stages`` or ``ops``.
"""
