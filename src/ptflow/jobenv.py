"""A job's environment and output: what every job the workflow starts inherits, and its rule log.

Jobs do not depend on the user's shell start-up files (the Alps guide's conda auto-activation, the "I have no
name!" prompt of a user without a passwd entry in the container):

- every script ptflow starts is a non-interactive ``bash --noprofile --norc`` with ``BASH_ENV`` and ``ENV`` removed
  from its environment (:func:`clean_shell_env`), so no ``~/.bashrc``, profile or ``$BASH_ENV`` file is read;
- tools are called by absolute path where a venv or image provides them (``ptflow.cluster.runtime``), so a conda
  ``base`` on PATH cannot shadow them;
- the user's name comes from ``$USER``, then the passwd entry, then ``u<uid>`` (:func:`user_name`), and the home from
  ``$HOME`` or the passwd entry (:func:`home_dir`): a missing passwd entry never stops a job.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from ptflow.keys import DRAIN_SECONDS, start_log_masker


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


def user_name() -> str:
    """``$USER``, else the passwd entry's name, else ``u<uid>`` (a container without the user's passwd entry)."""
    import pwd

    if os.environ.get("USER"):
        return os.environ["USER"]
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"u{os.getuid()}"


def home_dir() -> str:
    """The passwd entry's home, else ``$HOME`` (Slurm may set HOME to something else in a job: PostTrainBench's
    apptainer ``--home`` trouble), else the current directory."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.environ.get("HOME") or os.getcwd()


def thread_env(threads: int) -> dict[str, str]:
    """The variables that hold a process's OpenMP/MKL threads (torch's CPU threads among them) to the job's CPUs:
    by default OpenMP takes every core it sees, and threads past the job's CPUs spin against each other."""
    return dict.fromkeys(("OMP_NUM_THREADS", "MKL_NUM_THREADS"), str(threads))


# Files a non-interactive shell reads at start (bash: $BASH_ENV; sh/dash: $ENV for interactive ones only).
SHELL_STARTUP_VARS = ("BASH_ENV", "ENV")
CLEAN_BASH = ("bash", "--noprofile", "--norc")


def clean_shell_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) without the variables that make a shell read start-up files."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k not in SHELL_STARTUP_VARS}


NODE_TMP_FALLBACK = "/tmp"


def node_tmp(env: dict[str, str] | None = None) -> str:
    """Node-local scratch as PostTrainBench's Slurm guide picks it: ``$TMPDIR`` (Slurm points it at the node's local
    SSD) when set and existing, else ``/tmp``."""
    value = (os.environ if env is None else env).get("TMPDIR")
    return value if value and os.path.isdir(value) else NODE_TMP_FALLBACK


def require_free_space(path: str, need_mb: int | None, what: str) -> int:
    """Free MB at ``path``; one clear error when fewer than ``need_mb`` (e.g. 400 GB for a PostTrainBench cell)."""
    import shutil

    free_mb = shutil.disk_usage(path).free // 2**20
    if need_mb and free_mb < need_mb:
        raise OSError(
            f"{what}: {path} has {free_mb} MB free, the site requests tmp_mb={need_mb}; ask for nodes with more "
            "local disk (sbatch --tmp), point TMPDIR at a larger node-local disk, or lower tmp_mb"
        )
    return free_mb


# ---- failure facts: what a job met, recorded where ``ptflow.results.causes`` reads it (never from log words) ----

FACTS_ENV = "PTFLOW_FACTS_FILE"  # the facts file of the running job's rule log (children inherit it)
FACTS_SUFFIX = ".facts.json"


def facts_path(rule_log_path: str | Path) -> Path:
    """The facts file beside a rule log: ``results/logs/train/m/e/a.log`` -> ``.../a.facts.json``."""
    path = Path(rule_log_path)
    return path.with_name(path.stem + FACTS_SUFFIX)


def record_fact(kind: str, **values) -> None:
    """Add one fact (``kind`` and JSON values: an HTTP status, an errno, a CLI's error type) to the running job's
    facts file, with the Slurm job id that met it; nothing outside a rule log (a direct call, a test)."""
    target = os.environ.get(FACTS_ENV)
    if not target:
        return
    import json

    from ptflow.files import write_json_atomic

    try:
        data = json.loads(Path(target).read_text())
    except (OSError, ValueError):
        data = {"job_id": os.environ.get("SLURM_JOB_ID", ""), "facts": []}
    data["facts"].append({"kind": kind, **values})
    with contextlib.suppress(OSError):  # a fact that cannot be written must not fail the job it describes
        write_json_atomic(target, data)


def exception_facts(exc: BaseException) -> dict:
    """What an exception states as facts, along its chain (``raise ... from``, the exception being handled): its
    type, an OSError's errno (ESTALE: a stale NFS handle), an HTTP error's response status (huggingface_hub's
    HfHubHTTPError carries the ``requests`` response) with the module that raised it, and ``facts`` an exception
    of ptflow's carries."""
    import errno as errno_names

    out: dict = {"type": type(exc).__name__, "module": type(exc).__module__}
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno and "errno" not in out:
            out["errno"] = current.errno
            out["errno_name"] = errno_names.errorcode.get(current.errno, "")
        status = getattr(getattr(current, "response", None), "status_code", None)
        if isinstance(status, int) and "http_status" not in out:
            out["http_status"], out["http_module"] = status, type(current).__module__
        if isinstance(getattr(current, "facts", None), dict):
            out.update(current.facts)
        if isinstance(current, MemoryError) or type(current).__name__ == "OutOfMemoryError":  # torch's CUDA OOM
            out["out_of_memory"] = True
        current = current.__cause__ or current.__context__
    return out


def _start_facts(path: str | Path) -> None:
    """This job's facts file: an earlier attempt's removed (its facts were of another job), its name exported."""
    facts = facts_path(path)
    if os.environ.get(FACTS_ENV) != str(facts):  # a job re-run inside its container keeps the outer one's facts
        with contextlib.suppress(OSError):
            facts.unlink()
    os.environ[FACTS_ENV] = str(facts)


@contextlib.contextmanager
def rule_log(path: str | Path) -> Iterator:
    """Redirect fds 1 and 2 into ``path`` (appending) and yield a ``log(msg)`` function that timestamps lines. Every
    rule script enters here first, so every job process ignores the time-limit warning unless it handles it. Where
    the job's environment holds a key, fds 1 and 2 are a pipe through ``ptflow.keys``' masker into the log."""
    ignore_time_limit_warning()
    # The job process's exit skips the garbage collector's last passes over what its imports made: 0.6 CPU-s of a
    # process that imported torch, transformers and trl (2.3 -> 1.7 CPU-s, bench/RESULTS.md), paid by every training
    # and evaluation job. atexit's handlers run last-registered first, so this one runs after those registered later
    # (files, temp dirs: weakref.finalize and explicit closes do not depend on the collector).
    atexit.register(gc.freeze)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    _start_facts(path)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    # every key value in the job's environment is masked in the log, whoever writes it (ptflow.keys)
    masking = start_log_masker(fd)
    saved = os.dup(1), os.dup(2)
    os.dup2(masking[0] if masking else fd, 1)
    os.dup2(masking[0] if masking else fd, 2)

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
        record_fact("exception", **exception_facts(exc))  # what ptflow.results.causes classifies, not the line above
        if masking:  # the traceback goes to the job's own stderr (Snakemake's, Slurm's log): its message masked
            from ptflow.keys import Masker

            masker = Masker.for_env()
            exc.args = tuple(masker.mask(a) if isinstance(a, str) else a for a in exc.args)
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(fd)
        os.close(saved[0])
        os.close(saved[1])
        if masking:
            os.close(masking[0])
            try:  # the log is whole once the masker saw EOF (a child the job left behind may hold the pipe open)
                masking[1].wait(timeout=DRAIN_SECONDS)
            except subprocess.TimeoutExpired:
                pass


class Signalled(BaseException):
    """SIGTERM/SIGINT/SIGHUP inside :func:`signals_raise` (a BaseException: no ``except Exception`` swallows it)."""


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM/SIGINT/SIGHUP (scancel, Ctrl-C, a closed terminal) become :class:`Signalled`, so the caller's
    ``finally`` blocks run (a supervisor cancels its jobs, the SkyRL trainer side its server). Only the main thread
    can install handlers; elsewhere nothing changes."""

    def handler(signum, _frame):
        raise Signalled(f"signal {signal.Signals(signum).name}")

    saved = {}
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            saved[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            pass
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)
