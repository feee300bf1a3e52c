"""A job's environment and output: what every job the workflow starts inherits, and its rule log."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def package_root() -> str:
    """The directory that holds the ``ptflow`` package: bound into containers so a job there imports this ptflow."""
    import ptflow

    return str(Path(ptflow.__path__[0]).resolve().parent)


def prepend_pythonpath(path: str) -> None:
    """Make ``path`` importable in every child process (jobs run scripts in fresh interpreters)."""
    current = os.environ.get("PYTHONPATH")
    parts = [path] + ([current] if current else [])
    os.environ["PYTHONPATH"] = os.pathsep.join(parts)


# Slurm's time-limit warning (`warn_seconds` in a site request -> sbatch --signal=USR1@N): one signal for all of ptflow.
WARNING_SIGNAL = "USR1"


def ignore_time_limit_warning() -> None:
    """Make this process, and every child it starts, ignore the time-limit warning (an ignored signal stays ignored
    across fork and exec). Slurm sends it to every process of every job step: unhandled, it would kill the plugin's
    job-step Snakemake and whatever a rule runs. Trainers that save on it catch it again
    (``ptflow.cluster.preempt.SaveOnWarning``)."""
    signal.signal(getattr(signal, f"SIG{WARNING_SIGNAL}"), signal.SIG_IGN)


def apply_site_env(env: dict[str, str]) -> None:
    """Variables a site sets for every job (e.g. FI_PROVIDER=tcp); jobs inherit them from this process."""
    os.environ.update(env)


@contextlib.contextmanager
def rule_log(path: str | Path) -> Iterator:
    """Redirect fds 1 and 2 into ``path`` (appending) and yield a ``log(msg)`` function that timestamps lines. Every
    rule script enters here first, so every job process ignores the time-limit warning unless it handles it."""
    ignore_time_limit_warning()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = os.dup(1), os.dup(2)
    os.dup2(fd, 1)
    os.dup2(fd, 2)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}", flush=True)

    try:
        yield log
    except (
        SystemExit
    ) as exc:  # a job that re-ran itself elsewhere (ptflow.cluster.runtime) exits with the child's status
        if exc.code not in (0, None):
            log(f"FAILED: exit {exc.code}")
        raise
    except BaseException as exc:
        log(f"FAILED: {type(exc).__name__}: {exc}")
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(fd)
        os.close(saved[0])
        os.close(saved[1])
