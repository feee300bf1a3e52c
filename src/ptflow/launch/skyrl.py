"""SkyRL two-job training: a CPU runtime server job beside the GPU trainer, coordinated through files.

Snakemake's slurm plugin cannot run a service on another partition beside its consumer (NOTES: ``service()``
outputs force one group = one allocation), so the train rule's process does it itself:

1. a per-run **coordination dir** holding ``api_key`` (mode 600, generated per run), ``runtime_url.txt``,
   ``runtime_ready.flag``, ``training_complete.flag``, ``server.sbatch`` (rendered from
   ``workflow/templates/skyrl_server.sbatch.j2``), ``server.log``, ``trainer.log`` and ``server.json`` /
   ``trainer.json`` (config copies, secrets absent);
2. ``sbatch`` of the server job with the site's ``runtime_server`` request (partition, CPUs, memory, time);
3. wait for ``runtime_ready.flag`` (``ready_timeout``, 600 s default), failing at once if the server job ended;
4. run the trainer with ``SKYRL_RUNTIME_URL`` / ``SKYRL_API_KEY`` in its environment (never argv), watching the
   server job while it runs: a server that dies mid-run fails the training clearly;
5. write ``training_complete.flag`` (the server exits by itself) and ``scancel`` the server job on every exit
   path (try/finally plus SIGTERM/SIGINT/SIGHUP handlers turning signals into exceptions).

``runtime_url`` reuses an existing server instead (its key from ``SKYRL_API_KEY`` in the environment).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ptflow import templates
from ptflow.cluster import slurm
from ptflow.cluster.runtime import runtime_argv
from ptflow.config.sites import Request, RuntimeSpec, Site
from ptflow.files import write_json_atomic, write_text_atomic
from ptflow.keys import refuse_secrets
from ptflow.launch import skyrl_server as rs

DEFAULT_READY_TIMEOUT = 600
KEY_ENV = "SKYRL_API_KEY"
URL_ENV = "SKYRL_RUNTIME_URL"
SERVER_GRACE = 20  # seconds the server gets to see training_complete.flag before scancel


class SkyRLError(RuntimeError):
    """The runtime server could not be started, died, or never became ready."""


@dataclass
class Coord:
    root: Path

    @property
    def key_file(self) -> Path:
        return self.root / rs.KEY_FILE

    @property
    def url_file(self) -> Path:
        return self.root / rs.URL_FILE

    @property
    def ready_flag(self) -> Path:
        return self.root / rs.READY_FLAG

    @property
    def complete_flag(self) -> Path:
        return self.root / rs.COMPLETE_FLAG

    @property
    def server_log(self) -> Path:
        return self.root / "server.log"

    @property
    def trainer_log(self) -> Path:
        return self.root / "trainer.log"

    @property
    def script(self) -> Path:
        return self.root / "server.sbatch"

    def key(self) -> str:
        return self.key_file.read_text().strip()


def make_coord(root: str | Path) -> Coord:
    """A fresh coordination dir (stale flags of an earlier attempt removed) with a new API key, mode 600."""
    coord = Coord(Path(root).resolve())
    coord.root.mkdir(parents=True, exist_ok=True)
    os.chmod(coord.root, 0o700)
    for p in (coord.url_file, coord.ready_flag, coord.complete_flag, coord.key_file):
        p.unlink(missing_ok=True)
    fd = os.open(coord.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")
    return coord


@dataclass(frozen=True)
class ServerSite:
    """What the site says about the runtime server job: its resolved request (``resources.runtime_server``), how its
    command runs (the site's runtime, no GPUs) and the environment every job of the site gets. A train rule's params
    carry it as a dict."""

    request: Request
    runtime: RuntimeSpec
    env: dict

    @classmethod
    def from_site(cls, site: Site) -> ServerSite:
        if not site.has_request("runtime_server"):
            raise SkyRLError(
                f"site {site.name} has no resources.runtime_server request; add one (a CPU partition, threads, "
                "mem_mb, runtime — see config/sites/fasrc.yaml) to run skyrl agents there"
            )
        return cls(site.request("runtime_server"), site.runtime, site.env)

    def to_dict(self) -> dict:
        return {"request": self.request.to_dict(), "runtime": self.runtime.to_dict(), "env": dict(self.env)}

    @classmethod
    def from_dict(cls, data: dict) -> ServerSite:
        return cls(Request.from_dict(data["request"]), RuntimeSpec.from_dict(data["runtime"]), dict(data["env"]))


def server_sbatch_options(server: ServerSite, coord: Coord, job_name: str) -> list[str]:
    """The server job's flags: its site request as sbatch flags, one task, its log appended, never requeued (a
    requeued server would come back with a new URL the trainer does not know)."""
    request = dataclasses.replace(server.request, requeue=False)
    return request.sbatch_options(
        job_name=job_name,
        output=str(coord.server_log),
        extra=("--open-mode=append", "--no-requeue", "--nodes=1", "--ntasks=1"),
    )


def server_command(server: ServerSite, params: dict) -> list[str]:
    """The server's argv in the site's runtime (the site venv's python, or this Python locally)."""
    rt = server.runtime
    python = "python" if (rt.is_container or rt.venv) else sys.executable
    cmd = [python, "-m", "ptflow.launch.skyrl_server", "--coord", "{coord}"]
    if params.get("sandbox_image"):
        cmd += ["--wrap", f"podman --remote run --rm {params['sandbox_image']}"]
    return runtime_argv(rt, cmd, image=params.get("server_image"), gpus=0)


def render_server_script(server: ServerSite, coord: Coord, params: dict) -> Path:
    try:
        refuse_secrets(server.env, str(coord.script))
    except ValueError as exc:
        raise SkyRLError(str(exc)) from None
    command = [a.replace("{coord}", str(coord.root)) for a in server_command(server, params)]
    text = templates.render(
        "skyrl_server.sbatch.j2",
        coord=str(coord.root),
        env=server.env,
        server=command,
        podman_socket=bool(params.get("podman_socket")),
    )
    write_text_atomic(coord.script, text)
    return coord.script


def _tail(path: Path, n: int = 20) -> str:
    if not path.is_file():
        return f"({path} does not exist)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


def server_alive(job_id: str) -> tuple[bool, str]:
    rec = slurm.job_state(job_id)
    state = rec.base_state if rec else "UNKNOWN"
    return state not in slurm.TERMINAL_STATES, state


def wait_ready(coord: Coord, job_id: str, timeout: float = DEFAULT_READY_TIMEOUT, poll: float = 2.0, log=print) -> str:
    """The server's URL once ``runtime_ready.flag`` exists; SkyRLError if its job ended or the timeout passed."""
    deadline = time.monotonic() + timeout
    while True:
        if coord.ready_flag.exists() and coord.url_file.exists():
            url = coord.url_file.read_text().strip()
            log(f"skyrl: runtime server job {job_id} ready at {url}")
            return url
        alive, state = server_alive(job_id)
        if not alive:
            raise SkyRLError(
                f"runtime server job {job_id} ended ({state}) before writing {coord.ready_flag}; "
                f"its log {coord.server_log} ends with:\n{_tail(coord.server_log)}"
            )
        if time.monotonic() > deadline:
            raise SkyRLError(
                f"runtime server job {job_id} (state {state}) did not write {coord.ready_flag} within {timeout:.0f} s "
                f"(ready_timeout); raise ready_timeout if the {state} job waits in the queue, else see "
                f"{coord.server_log}"
            )
        time.sleep(poll)


class _Signalled(BaseException):
    pass


@contextlib.contextmanager
def _signals_raise():
    """SIGTERM/SIGINT/SIGHUP (scancel of the train job, Ctrl-C) become an exception so ``finally`` blocks run."""

    def handler(signum, _frame):
        raise _Signalled(f"signal {signum}")

    saved = {}
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            saved[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread: nothing to install
            pass
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def stop_server(coord: Coord, job_id: str | None, log=print, grace: float = SERVER_GRACE) -> None:
    """Write training_complete.flag, give the server ``grace`` seconds to exit, then scancel it regardless."""
    coord.complete_flag.write_text(f"{time.time():.3f}\n")
    if not job_id:
        return
    deadline = time.monotonic() + grace
    with contextlib.suppress(slurm.SlurmUnavailable):
        while time.monotonic() < deadline and server_alive(job_id)[0]:
            time.sleep(1)
    log(f"skyrl: scancel runtime server job {job_id}")
    slurm.cancel([job_id])


def run_trainer(argv: list[str], env: dict, coord: Coord, job_id: str | None, log=print, poll: float = 2.0) -> int:
    """Run the trainer (output to trainer.log); if the server job ends first, stop the trainer and fail."""
    log(f"skyrl: trainer: {shlex.join(argv)} (log {coord.trainer_log})")
    with open(coord.trainer_log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            while True:
                try:
                    return_code = proc.wait(timeout=poll)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if job_id:
                    alive, state = server_alive(job_id)
                    if not alive:
                        proc.terminate()
                        proc.wait(timeout=60)
                        raise SkyRLError(
                            f"runtime server job {job_id} ended ({state}) while training ran; trainer stopped. "
                            f"Server log {coord.server_log}:\n{_tail(coord.server_log)}"
                        )
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return return_code


def run_two_job(
    server: ServerSite,
    coord_dir: str | Path,
    trainer_argv: list[str],
    *,
    params: dict | None = None,
    job_name: str = "ptflow-skyrl-server",
    log=print,
) -> dict:
    """The whole two-job flow; returns ``{"server_job", "runtime_url", "returncode"}``. Raises SkyRLError on a
    server that died or never became ready, and on a trainer that failed."""
    params = dict(params or {})
    coord = make_coord(coord_dir)
    timeout = float(params.get("ready_timeout", DEFAULT_READY_TIMEOUT))
    env = {**os.environ, **server.env}
    job_id = None
    with _signals_raise():
        try:
            if params.get("runtime_url"):
                url = params["runtime_url"]
                if not os.environ.get(KEY_ENV):
                    raise SkyRLError(f"runtime_url {url} reuses a server: export {KEY_ENV} with that server's key")
                log(f"skyrl: reusing runtime server {url} (runtime_url); no server job submitted")
            else:
                script = render_server_script(server, coord, params)
                argv = slurm.sbatch_argv(str(script), options=server_sbatch_options(server, coord, job_name))
                write_json_atomic(coord.root / "server.json", {"sbatch": argv, "request": server.request.values})
                log(f"skyrl: submitting runtime server: {shlex.join(argv)}")
                job_id = slurm.submit(argv)
                log(f"skyrl: runtime server job {job_id}; waiting up to {timeout:.0f} s for {coord.ready_flag}")
                url = wait_ready(coord, job_id, timeout, log=log)
                env[KEY_ENV] = coord.key()
            env[URL_ENV] = url
            write_json_atomic(
                coord.root / "trainer.json", {"argv": trainer_argv, "runtime_url": url, "server_job": job_id}
            )
            rc = run_trainer(trainer_argv, env, coord, job_id, log=log)
            if rc != 0 and job_id:
                # A trainer failing at the moment its server dies sees the symptom (a killed command, a refused
                # connection) before this launcher sees the job end: name the cause when the job ended.
                for _ in range(15):
                    alive, state = server_alive(job_id)
                    if not alive:
                        raise SkyRLError(
                            f"runtime server job {job_id} ended ({state}) while training ran; the trainer failed "
                            f"with exit {rc} as a consequence. Server log {coord.server_log}:\n"
                            f"{_tail(coord.server_log)}\nTrainer log {coord.trainer_log}:\n{_tail(coord.trainer_log)}"
                        )
                    time.sleep(1)
            if rc != 0:
                raise SkyRLError(
                    f"trainer {shlex.join(trainer_argv[:4])}… exited {rc}; its log {coord.trainer_log} ends with:\n"
                    f"{_tail(coord.trainer_log)}"
                )
            return {"server_job": job_id, "runtime_url": url, "returncode": rc}
        finally:
            stop_server(coord, job_id, log=log)
