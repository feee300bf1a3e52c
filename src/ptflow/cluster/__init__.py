"""The machine ptflow runs on: Slurm, container runtimes and images, the shared HF cache, supervision, preflight.

``slurm`` is the only module that runs Slurm's commands; ``runtime`` the only one that builds apptainer, pyxis,
EDF or venv command lines; ``images`` builds images; ``hfcache``/``hfview`` own the hub cache layout and the private
views of it; ``preflight`` checks a matrix against the live cluster; ``supervise`` and ``infra_retry`` resubmit after
infrastructure failures and saved stops; ``preempt`` owns time-limit warnings, stop signals and the resume state of
trainings; ``ownership`` says which Slurm jobs and which driver belong to a working directory; ``multinode`` reads
allocations back and spreads processes over them. It may import ``config`` and the foundation modules, never
``launch``, ``stages`` or ``ops``.
"""
