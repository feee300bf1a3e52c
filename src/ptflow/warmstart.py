"""Warm starts for the jobs of a local run: a job continues in a process forked from one that has imported torch,
transformers, TRL and inspect-ai already, instead of importing them itself (~5-10 s of CPU per job: on the embedded
default's 2 cores its 29 jobs spent more time importing than training and evaluating).

Three kinds of process, all on this machine, all of this user (the socket lives in a 0700 directory):

- the **broker** (``python -m ptflow.warmstart serve``), started by the Snakemake driver of a local run
  (:func:`start`; site key ``warm_start``). It imports nothing heavy. A job tells it its Python and its whole
  environment; it answers with the socket of the **zygote** for exactly that environment, forking a new zygote the
  first time it meets one (at most ``MAX_ZYGOTES``; beyond, the job runs cold). It exits when the driver is gone.
- a **zygote** sets the job's environment *before* importing the modules (libraries read variables such as
  ``HF_HUB_OFFLINE`` or ``HF_HOME`` once, at import time: a module imported under another environment would behave
  differently), then forks one child per job.
- the **child** takes over the job's stdin/stdout/stderr, working directory, ``sys.path`` and argv, and runs the job's
  script as ``__main__``. The job's own process waits, passes signals on, and exits with the child's status; if the
  job's process dies, the child's process group is killed.

A zygote's imports take seconds, and the jobs that first ask for it wait. A **companion** says which environment a
script started by jobs will have (the evaluation kit: the job's environment with the data variables set and the
venv's bin on PATH, :func:`changed_env`): when the broker forks a zygote for a job environment, it forks the
companion's at once, so its imports run beside the first jobs instead of in front of the first evaluations. A
prediction that turns out wrong costs one zygote's imports; the companion's jobs then get their own zygote.

Jobs reach it two ways: a workflow script calls :func:`hand_over` first thing (Snakemake's generated script then runs
again, from the top, in the child), and a job that starts a Python script of its own (the evaluation kit) runs it
through :func:`script_argv`. Without a broker, or when it cannot be reached, or for another Python, a job simply runs
cold: the warm start changes where a job's code runs, never what it does.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from ptflow.jobenv import FACTS_ENV

SOCKET_ENV = "PTFLOW_WARM_SOCKET"
MAX_ZYGOTES = 4  # distinct job environments of one run (the local default has two: scripts and the evaluation kit)
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_in_child = False  # set in a forked child: the job's own hand_over() call there must not hand over again


def changed_env(env: dict, changes: dict) -> dict:
    """``env`` with a companion's ``changes``: ``set`` variables, then ``prepend`` each to its path-like variable."""
    out = dict(env)
    out.update(changes.get("set", {}))
    for name, entry in changes.get("prepend", {}).items():
        out[name] = os.pathsep.join([entry, out.get(name, "")])
    return out


def companion_message(job: dict, changes: dict) -> dict | None:
    """The message that a script started by ``job`` with ``changes`` to its environment will send (through
    :func:`script_argv`: module path as this ``python -m ptflow.warmstart`` process has it), or None for a job that
    is already such a script."""
    if all(job["env"].get(k) == v for k, v in changes.get("set", {}).items()):
        return None
    return {**job, "env": changed_env(job["env"], changes), "path": sys.path[1:]}


# ---- the job's side ----


def script_argv(script: str | os.PathLike, args: list[str], env: dict | None = None) -> list[str]:
    """The command that runs ``python script args``: through the warm launcher when ``env`` (default: this process's)
    names a broker, else exactly that command."""
    if not (env if env is not None else os.environ).get(SOCKET_ENV):
        return [sys.executable, str(script), *args]
    return [sys.executable, "-m", "ptflow.warmstart", "run", str(script), *args]


def hand_over() -> None:
    """Continue this job in a warm child and exit with its status; return at once when there is none to go to."""
    if _in_child:
        return
    status = _run_warm(sys.argv, sys.path)
    if status is not None:
        os._exit(status)


def _launch(script: str, args: list[str]) -> None:
    """``python -m ptflow.warmstart run script args``: ``python script args``, warm when possible."""
    argv = [script, *args]
    # what `python script` would have on sys.path: the script's directory first, not this launcher's
    path = [os.path.dirname(os.path.abspath(script)), *sys.path[1:]]
    status = _run_warm(argv, path)
    if status is None:
        os.execv(sys.executable, [sys.executable, *argv])
    os._exit(status)


def _run_warm(argv: list[str], path: list[str]) -> int | None:
    """Run ``argv`` in a warm child; its exit status, or None when no warm child could take it."""
    broker = os.environ.get(SOCKET_ENV)
    if not broker:
        return None
    try:
        # sys.path past the script's own directory: what the zygote imports with (PYTHONPATH, site-packages)
        message = {"prefix": sys.prefix, "executable": sys.executable, "env": dict(os.environ), "path": path[1:]}
        answer = _ask(broker, message)
        if not answer.startswith("zygote "):
            return None
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(answer.split(" ", 1)[1])
        sys.stdout.flush()
        sys.stderr.flush()
        own = {k: os.environ[k] for k in PER_JOB_ENV if k in os.environ}
        request = json.dumps({"cwd": os.getcwd(), "path": path, "argv": argv, "env": own}).encode()
        socket.send_fds(conn, [struct.pack("!Q", len(request))], [0, 1, 2])
        conn.sendall(request)
        reader = conn.makefile("r")
        started = reader.readline()  # "pid N" once the child has taken the job over
    except OSError:
        return None
    if not started.startswith("pid "):
        return None
    child = int(started.split()[1])

    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for sig in FORWARDED_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:  # an ignored signal (Slurm's USR1) stays ignored
            signal.signal(sig, forward)
    ended = reader.readline()  # "exit N" from the zygote once the child is reaped
    return int(ended.split()[1]) if ended.startswith("exit ") else 1


def _ask(path: str, message: dict) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(json.dumps(message).encode() + b"\n")
        return conn.makefile("r").readline().strip()


# ---- the broker ----


# Variables each job sets for itself and its children (its facts file, ptflow.jobenv): not part of the environment a
# zygote imports under, so jobs differing only there share one; the job's child sets them from its request.
PER_JOB_ENV = (FACTS_ENV,)


def shared_env(env: dict) -> dict:
    return {k: v for k, v in env.items() if k not in PER_JOB_ENV}


def environment_key(message: dict) -> str:
    """Jobs share a zygote only when their Python, environment (but the per-job variables) and module path are the
    same."""
    identity = [message["prefix"], sorted(shared_env(message["env"]).items()), message["path"]]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]


def serve(directory: str, parent: int, modules: list[str]) -> None:
    """The broker: route each job to the zygote of its environment until the ``parent`` process is gone."""
    companions_file = Path(directory, "companions.json")
    companions = json.loads(companions_file.read_text()) if companions_file.exists() else []
    broker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    broker.bind(os.path.join(directory, "socket"))
    broker.listen(64)
    broker.settimeout(1.0)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    zygotes: dict[str, tuple[str, int]] = {}
    envs: list[dict] = []
    try:
        while _alive(parent):
            _reap()
            try:
                conn, _ = broker.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(30)
                try:
                    message = json.loads(conn.makefile("r").readline())
                except (OSError, ValueError):
                    continue
                if message.get("prefix") != sys.prefix or message.get("executable") != sys.executable:
                    answer = "decline"  # another Python (a conda env, a container): its job runs cold
                else:
                    key = environment_key(message)
                    if key not in zygotes and len(zygotes) < MAX_ZYGOTES:
                        _add_zygote(zygotes, envs, broker, directory, message, modules, "a new job environment")
                        for companion in companions:  # their scripts' zygotes, ahead of the first such script
                            ahead = companion_message(message, companion["changes"])
                            fits = ahead is not None and len(zygotes) < MAX_ZYGOTES
                            if fits and environment_key(ahead) not in zygotes:
                                _add_zygote(zygotes, envs, broker, directory, ahead, modules, companion["name"])
                    answer = f"zygote {zygotes[key][0]}" if key in zygotes else "decline"
                with contextlib.suppress(OSError):
                    conn.sendall(answer.encode() + b"\n")
    finally:
        # no kill: each zygote sees the broker gone, takes no new jobs and exits once its running jobs are done
        broker.close()
        for sock in Path(directory).glob("*"):
            sock.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            Path(directory).rmdir()


def _add_zygote(zygotes: dict, envs: list, broker, directory: str, message: dict, modules: list[str], what: str):
    key = environment_key(message)
    sock = os.path.join(directory, f"zygote-{key}")
    zygotes[key] = (sock, _fork_zygote(broker, sock, message, modules))
    print(f"warm start: zygote {len(zygotes)} for {what} ({key}){_differences(message, envs)}", flush=True)
    envs.append(message)


def _differences(job: dict, earlier: list[dict]) -> str:
    """What sets a new job environment apart from the nearest earlier one: variable names (values may be secrets)
    and sys.path entries."""
    if not earlier:
        return ""
    env = shared_env(job["env"])
    diffs = [
        sorted(k for k in env.keys() | shared_env(e["env"]).keys() if env.get(k) != e["env"].get(k))
        + [f"sys.path {p}" for p in sorted(set(job["path"]) ^ set(e["path"]))]
        + (["sys.path order"] if set(job["path"]) == set(e["path"]) and job["path"] != e["path"] else [])
        for e in earlier
    ]
    return "; differs in: " + ", ".join(min(diffs, key=len))


def _fork_zygote(broker: socket.socket, path: str, job: dict, modules: list[str]) -> int:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)  # jobs that come while the imports run wait in the backlog
    pid = os.fork()
    if pid:
        listener.close()
        return pid
    status = 1
    try:
        broker.close()
        _zygote(listener, job, modules)
        status = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


# ---- a zygote ----


def _zygote(listener: socket.socket, job: dict, modules: list[str]) -> None:
    broker = os.getppid()
    os.environ.clear()
    os.environ.update(shared_env(job["env"]))  # before the imports: what modules read at import time is the jobs' own
    sys.path[:] = job["path"]
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    t0 = time.monotonic()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a module this environment lacks means less warmth, not an error
            print(f"warm start: not preloaded: {name} ({type(exc).__name__}: {exc})", flush=True)
    print(f"warm start: {len(modules)} modules imported in {time.monotonic() - t0:.1f} s", flush=True)
    listener.settimeout(0.2)  # how soon a finished job's status reaches it
    jobs: dict[int, socket.socket] = {}
    while os.getppid() == broker or jobs:
        for pid, code in _reap():
            if pid in jobs:
                with contextlib.suppress(OSError), jobs.pop(pid) as conn:
                    conn.sendall(f"exit {code}\n".encode())
        if os.getppid() != broker:
            time.sleep(0.2)  # the broker is gone: no new jobs; report the running ones as they end
            continue
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:  # whatever happens, this process never returns into the zygote's loop
                listener.close()
                for other in jobs.values():
                    other.close()
                code = _child(conn)
            finally:
                os._exit(code)
        jobs[pid] = conn


def _child(conn: socket.socket) -> int:
    """In a job's child: take over the job's stdio, directory, sys.path and argv, then run its script."""
    global _in_child
    _in_child = True
    os.setsid()  # its own process group: the watchdog below stops everything the job started
    for sig in (signal.SIGCHLD, *FORWARDED_SIGNALS):
        signal.signal(sig, signal.SIG_DFL)
    header, fds, _, _ = socket.recv_fds(conn, 8, 3)
    size = struct.unpack("!Q", header)[0]
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return 1  # the job went away before it said what to run
        data += chunk
    job = json.loads(data)
    print(f"warm start: {os.path.basename(job['argv'][0])} runs warm (pid {os.getpid()})", flush=True)  # to the log
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(job["cwd"])
    for name in PER_JOB_ENV:  # the zygote's value is another job's (or none)
        os.environ.pop(name, None)
    os.environ.update(job.get("env", {}))
    sys.path[:] = job["path"]
    sys.argv[:] = job["argv"]
    conn.sendall(f"pid {os.getpid()}\n".encode())

    def watchdog():
        conn.recv(1)  # returns when the job's process is gone (it never writes)
        with contextlib.suppress(OSError):
            os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watchdog, daemon=True).start()
    status = 0
    try:
        import runpy

        runpy.run_path(job["argv"][0], run_name="__main__")
    except SystemExit as exc:  # as the interpreter does: None is success, a message is printed and fails
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    # what the interpreter does at exit: wait for the script's threads, run its atexit handlers, flush
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    return status


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _reap() -> list[tuple[int, int]]:
    """Finished children with their status as a shell reports it (128 + signal for a killed one)."""
    done = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done.append((pid, os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)))


# ---- the driver's side ----


def start(modules: list[str], log: str | os.PathLike, companions: list[dict] = ()) -> subprocess.Popen:
    """Start a broker for the jobs this process will start (they inherit ``PTFLOW_WARM_SOCKET``); its zygotes'
    messages go to ``log``. ``companions``: ``{"name": ..., "changes": ...}`` of scripts the jobs start with changes
    to their environment (:func:`changed_env`), whose zygotes the broker forks ahead."""
    directory = tempfile.mkdtemp(prefix="ptflow-warm-")  # 0700: only this user may hand jobs over
    if companions:
        Path(directory, "companions.json").write_text(json.dumps(list(companions)))
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ptflow.warmstart", "serve", directory, str(os.getpid()), *modules],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches Snakemake, which then stops it
        )
    path = os.path.join(directory, "socket")
    deadline = time.monotonic() + 10  # the broker binds at once; jobs started before that would only run cold
    while not os.path.exists(path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.environ[SOCKET_ENV] = path
    return proc


def stop(proc: subprocess.Popen) -> None:
    """Stop the broker when the run ends (it also stops by itself once the process that started it is gone); its
    zygotes follow once their running jobs are done."""
    directory = os.path.dirname(os.environ.pop(SOCKET_ENV, "") or ".")
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if Path(directory).name.startswith("ptflow-warm-"):  # the broker removes it; this is for one that was killed
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    # Through the module's own name, not this __main__ copy: a child's _in_child flag must be the one that the
    # job's `from ptflow.warmstart import hand_over` sees.
    from ptflow import warmstart

    if sys.argv[1] == "serve":
        warmstart.serve(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    elif sys.argv[1] == "run":
        warmstart._launch(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(f"usage: python -m ptflow.warmstart serve DIR PID MODULE... | run SCRIPT ARG...; got {sys.argv[1]!r}")
