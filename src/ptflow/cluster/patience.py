"""Slurm's client commands made patient: a controller that is away, a submit cap that is full, are waited out.

The slurm plugin (and ptflow's own supervisors) run ``sbatch``, ``squeue``, ``sacct`` and ``scontrol`` by name, and
the plugin's job step runs ``srun`` by name inside each job. ``install`` puts links to ``shims/`` (one per command the
machine has) first on PATH of the driver (inherited by every job it submits): each shim runs :func:`main` with the
command's name, which runs the real command and decides from Slurm's own answers, never from the wording of a
message:

- **The controller does not answer** (``scontrol ping`` exits non-zero: a maintenance restart, a flooded slurmctld):
  the command waits with backoff until it answers again, at most ``controller_wait`` seconds (site
  ``controller_wait_minutes``, default 30), then runs again. So no job is declared failed or lost while the controller
  is away; ``scontrol show config`` answers at once with its last answer meanwhile, so the plugin (which asks it,
  with a 10 s timeout, before every status check) never switches its status command to sacct.
- **sbatch, refused for a full submit cap** (its error names one of Slurm's submit-limit reasons,
  :data:`SUBMIT_LIMIT_REASONS`, e.g. ``QOSMaxSubmitJobPerUserLimit``; another run of the same user, a limit lowered
  mid-run): it waits for a slot and submits again, for as long as the user has jobs in the queue that will free one.
  Refused with an empty queue, the cap is 0: that is passed on at once.
- **sbatch, failed otherwise**: if the job is in the queue after all (the answer was lost: same ``--job-name`` and
  ``--comment``), its id is printed as sbatch would. If ``sbatch --test-only`` with the same arguments accepts it,
  the failure was transient and it is tried again until the deadline. Else the refusal is permanent (an invalid
  account or partition) and is passed on at once, unchanged.
- **srun, inside a job**: waits for the controller before it starts; a step that never started (the task prolog
  set through ``SLURM_TASK_PROLOG`` never ran) because the controller was away is started again once it answers —
  an infrastructure failure is not the cell's failure. A step that started is never run twice.

While a command waits it records why in ``$PTFLOW_SLURM_STATE/<pid>.json`` (the driver's heartbeat reads these and
says so, ``ptflow.ops.driver``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SHIM_DIR = Path(__file__).resolve().with_name("shims")
SHIMMED = ("sbatch", "squeue", "sacct", "scontrol", "srun")
WAIT_ENV = "PTFLOW_CONTROLLER_WAIT"  # seconds a command waits for the controller
STATE_ENV = "PTFLOW_SLURM_STATE"  # directory where waiting commands say so
PYTHON_ENV = "PTFLOW_PYTHON"  # the interpreter the shims run this module with
TOKEN_ENV = "PTFLOW_STEP_TOKEN"  # touched by the task prolog when a step's task starts
STEP_PROLOG = SHIM_DIR / "step_started.sh"
# Without WAIT_ENV the shim was not installed by a driver (install sets both, its jobs inherit them): no waiting for
# the controller then. The site default is Site.controller_wait_seconds.
DEFAULT_WAIT = 0
# Slurm's job-reason names for a submission past a submit cap (slurm.h / job_reason_string): sbatch prints the name as
# its own error line. A refusal for a cap that running jobs will free; any other accounting-policy refusal (a job too
# big for MaxTRESPerJob) is permanent.
SUBMIT_LIMIT_REASONS = frozenset(
    {
        "QOSMaxSubmitJobPerUserLimit",
        "QOSMaxSubmitJobPerAccountLimit",
        "QOSGrpSubmitJobsLimit",
        "AssocMaxSubmitJobLimit",
        "AssocGrpSubmitJobsLimit",
    }
)
BACKOFF = (2, 4, 8, 15, 30)  # seconds between tries; the last repeats
SLOT_BACKOFF = (5, 10, 20, 30, 60)


def is_shim(path: str | Path) -> bool:
    """Whether ``path`` is one of the shims, however it is reached (a ``..`` spelling, a link): taken for the real
    command, a shim would run itself forever."""
    return Path(os.path.realpath(path)).parent == SHIM_DIR


def install(wait_seconds: float, state_dir: Path, environ=os.environ) -> None:
    """Put a shim first on PATH of this process (and so of every command and job it starts) for each Slurm command
    this machine has: ``<state_dir>/bin/<name>`` links to ``shims/<name>``. A command the cluster lacks (no sacct
    without accounting) stays absent, so the plugin's own ``shutil.which`` checks still see the cluster as it is."""
    link_dir = Path(state_dir) / "bin"
    link_dir.mkdir(parents=True, exist_ok=True)
    parts = [p for p in environ.get("PATH", "").split(os.pathsep) if p and Path(p) not in (link_dir, SHIM_DIR)]
    plain = {**environ, "PATH": os.pathsep.join(parts)}
    for name in SHIMMED:
        link = link_dir / name
        link.unlink(missing_ok=True)
        if real_binary(name, plain):
            link.symlink_to(SHIM_DIR / name)
    environ["PATH"] = os.pathsep.join([str(link_dir), *parts])
    environ[WAIT_ENV] = str(int(wait_seconds))
    environ[STATE_ENV] = str(state_dir)
    environ[PYTHON_ENV] = sys.executable


def real_binary(name: str, environ=os.environ) -> str | None:
    """``name`` on PATH, the shims left out."""
    for d in environ.get("PATH", "").split(os.pathsep):
        cand = Path(d) / name
        if d and cand.is_file() and os.access(cand, os.X_OK) and not is_shim(cand):
            return str(cand)
    return None


def controller_up(timeout: float = 30) -> bool:
    """``scontrol ping``: exit 0 when the (primary or backup) controller answers."""
    scontrol = real_binary("scontrol")
    if scontrol is None:
        return False
    try:
        return subprocess.run([scontrol, "ping"], capture_output=True, timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False


class Waits:
    """This process's record of what it waits for (one JSON file, removed when it stops waiting)."""

    def __init__(self, command: str):
        self.command = command
        state = os.environ.get(STATE_ENV)
        self.path = Path(state) / f"{os.getpid()}.json" if state else None
        self.since: float | None = None

    def begin(self, why: str, detail: str = "") -> None:
        if self.since is None:
            self.since = time.time()
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        record = {"command": self.command, "why": why, "detail": detail, "since": self.since}
        tmp.write_text(json.dumps({**record, "host": socket.gethostname(), "pid": os.getpid()}))
        os.replace(tmp, self.path)

    def end(self) -> None:
        self.since = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def is_stale(record: dict, now: float) -> bool:
    """A record whose command is gone: killed on this host (a caller's timeout sends SIGKILL, no clean-up), or, on
    another host, older than any wait for the controller may last."""
    if record.get("host") == socket.gethostname() and record.get("pid"):
        try:
            os.kill(int(record["pid"]), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    limit = float(os.environ.get(WAIT_ENV) or DEFAULT_WAIT) + 300
    return record.get("why") != "submit cap" and now - float(record.get("since", now)) > limit


def _sleep(backoff: tuple[int, ...], tries: int, deadline: float | None = None) -> None:
    pause = backoff[min(tries, len(backoff) - 1)]
    if deadline is not None:
        pause = max(0.0, min(pause, deadline - time.monotonic()))
    time.sleep(pause)


def wait_for_controller(waits: Waits, deadline: float) -> bool:
    """Until the controller answers (True) or the deadline passes (False)."""
    tries = 0
    while not controller_up():
        if time.monotonic() >= deadline:
            return False
        waits.begin("controller", "scontrol ping fails")
        _sleep(BACKOFF, tries, deadline)
        tries += 1
    return True


def _emit(proc: subprocess.CompletedProcess) -> int:
    sys.stdout.buffer.write(proc.stdout)
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(proc.stderr)
    sys.stderr.buffer.flush()
    return proc.returncode


def config_cache(argv: list[str]) -> Path | None:
    """Where ``scontrol show config``'s last answer is kept: the plugin asks it before every status check (MinJobAge,
    with a 10 s timeout) and switches its status command to sacct when it gets none."""
    state = os.environ.get(STATE_ENV)
    return Path(state) / "scontrol-show-config.txt" if state and argv[1:] == ["show", "config"] else None


def run_query(argv: list[str], deadline: float, waits: Waits) -> int:
    """squeue, sacct, scontrol: run again while the controller is away; a real error (controller up) passes. While it
    is away, ``scontrol show config`` answers at once with the configuration it last gave (a restart keeps it)."""
    cache = config_cache(argv)
    while True:
        proc = subprocess.run(argv, capture_output=True)
        if proc.returncode == 0:
            if cache is not None:
                cache.parent.mkdir(parents=True, exist_ok=True)
                tmp = cache.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_bytes(proc.stdout)
                os.replace(tmp, cache)
            return _emit(proc)
        if argv[1:2] == ["ping"] or controller_up():
            return _emit(proc)
        if cache is not None and cache.is_file():
            sys.stdout.buffer.write(cache.read_bytes())
            sys.stdout.buffer.flush()
            return 0
        if not wait_for_controller(waits, deadline):
            return _emit(proc)


# ---- sbatch ----


def option(args: list[str], *names: str) -> str | None:
    """The value of an sbatch option given as ``--name value``, ``--name=value`` or ``-J value``."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if name.startswith("--") and arg.startswith(name + "="):
                return arg[len(name) + 1 :]
    return None


def submit_limit_reason(stderr: bytes) -> str | None:
    """The submit-limit reason name sbatch printed, if any (a word of its error output, not a phrase)."""
    words = set(stderr.decode(errors="replace").replace(":", " ").split())
    found = words & SUBMIT_LIMIT_REASONS
    return min(found) if found else None


def queued_jobs(user: str) -> list[tuple[str, str, str]]:
    """(id, name, comment) of the user's jobs in the queue; [] when squeue cannot say."""
    squeue = real_binary("squeue")
    if squeue is None:
        return []
    proc = subprocess.run([squeue, "-h", "-u", user, "-o", "%i|%j|%k"], capture_output=True, text=True)
    if proc.returncode != 0:
        return []
    return [tuple(line.split("|", 2)) for line in proc.stdout.splitlines() if line.count("|") >= 2]


def already_submitted(args: list[str], user: str) -> str | None:
    """The id of a queued job with this submission's name and comment (sbatch's answer lost, the job made)."""
    name, comment = option(args, "--job-name", "-J"), option(args, "--comment")
    if not name or not comment:
        return None
    for jobid, jname, jcomment in queued_jobs(user):
        if jname == name and jcomment == comment:
            return jobid
    return None


def script_from_stdin(args: list[str], stdin=None) -> bool:
    """Whether sbatch would read its script from stdin (kept, to give each try the same): no ``--wrap``, no script
    file among the arguments (``/dev/stdin`` is stdin), and stdin is not a terminal. A caller that passes a script
    file while its own stdin stays open (a supervisor under ssh) must not have that stdin read to its end."""
    stdin = sys.stdin if stdin is None else stdin
    if stdin is None or stdin.isatty():
        return False
    if any(a == "--wrap" or a.startswith("--wrap=") for a in args):
        return False
    return not any(a != "/dev/stdin" and os.path.isfile(a) for a in args)


def _submitted(args: list[str], jobid: str) -> int:
    sys.stdout.write(f"{jobid}\n" if "--parsable" in args else f"Submitted batch job {jobid}\n")
    sys.stdout.flush()
    return 0


def run_sbatch(real: str, args: list[str], stdin: bytes | None, deadline: float, waits: Waits, user: str) -> int:
    slot_tries = transient_tries = 0
    while True:
        proc = subprocess.run([real, *args], input=stdin, capture_output=True)
        if proc.returncode == 0:
            return _emit(proc)
        was_away = not controller_up()
        if was_away and not wait_for_controller(waits, deadline):
            return _emit(proc)
        jobid = already_submitted(args, user)
        if jobid:
            return _submitted(args, jobid)
        reason = submit_limit_reason(proc.stderr)
        if reason:
            if not queued_jobs(user):
                return _emit(proc)  # nothing queued will free a slot: the cap is 0 for this submission
            waits.begin("submit cap", reason)
            _sleep(SLOT_BACKOFF, slot_tries)
            slot_tries += 1
            continue
        if time.monotonic() >= deadline:
            return _emit(proc)
        if not was_away:
            # A controller back from a restart may still refuse work for a moment: try again before judging.
            test = subprocess.run([real, "--test-only", *args], input=stdin, capture_output=True)
            if test.returncode != 0:
                return _emit(proc)  # refused for good (invalid account, partition, request): at once, unchanged
        waits.begin("transient", f"sbatch failed (exit {proc.returncode}); the job is valid (sbatch --test-only)")
        _sleep(BACKOFF, transient_tries, deadline)
        transient_tries += 1


# ---- srun ----


def run_srun(real: str, args: list[str], deadline: float, waits: Waits) -> int:
    token_dir = Path(os.environ.get(STATE_ENV) or ".") / "steps"
    while True:
        if not wait_for_controller(waits, deadline):
            break
        waits.end()
        token_dir.mkdir(parents=True, exist_ok=True)
        token = token_dir / f"{os.environ.get('SLURM_JOB_ID', 'nojob')}.{os.getpid()}.{time.monotonic_ns()}"
        env = dict(os.environ)
        if env.get("SLURM_TASK_PROLOG", str(STEP_PROLOG)) == str(STEP_PROLOG):
            env["SLURM_TASK_PROLOG"] = str(STEP_PROLOG)
        env[TOKEN_ENV] = str(token)
        child = subprocess.Popen([real, *args], env=env)
        previous = {s: signal.signal(s, lambda num, _f, c=child: c.send_signal(num)) for s in _FORWARDED}
        try:
            rc = child.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        started = token.exists()
        token.unlink(missing_ok=True)
        if rc == 0 or started or controller_up() or time.monotonic() >= deadline:
            return rc
        # the step never started and the controller is away: an infrastructure failure, started again once it answers
        waits.begin("controller", f"srun could not start its step (exit {rc})")
    return os.execv(real, [real, *args])  # the deadline passed: srun's own answer, whatever it is


_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCONT, signal.SIGUSR2)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    name, args = Path(argv[0]).name, argv[1:]
    real = real_binary(name)
    if real is None:
        sys.stderr.write(f"ptflow: {name} not found on PATH (besides ptflow's shims in {SHIM_DIR})\n")
        return 127
    deadline = time.monotonic() + float(os.environ.get(WAIT_ENV) or DEFAULT_WAIT)
    waits = Waits(name)
    try:
        if name == "sbatch":
            stdin = sys.stdin.buffer.read() if script_from_stdin(args) else None
            from ptflow.jobenv import user_name

            return run_sbatch(real, args, stdin, deadline, waits, user_name())
        if name == "srun":
            return run_srun(real, args, deadline, waits)
        return run_query([real, *args], deadline, waits)
    finally:
        waits.end()


if __name__ == "__main__":
    sys.exit(main())
