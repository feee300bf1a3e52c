"""SkyRL two-job training: a CPU job of the SkyRL server beside the GPU trainer job, coordinated through files.

The FASRC recipe's interface, kept: a **coordination dir** ``<cell>/.skyrl_jobs/<YYYYmmdd>_<HHMMSS>_<server job>/``
holding ``runtime_url.txt``, ``runtime_api_key.txt`` (mode 600, new per server), ``runtime_ready.flag``,
``training_complete.flag``, the jobs' logs (``runtime_<id>.out/.err``, ``training_<id>.out``), the server's job
script and ``config.json`` (a copy of the settings used, secrets absent).

No GPU waits on the server. The train rule of a SkyRL cell is a login-node supervisor (``ptflow.cluster.supervise``)
whose :class:`ServerCompanion`:

1. submits the server job first, held, on its own (CPU) request ``resources.runtime_server``; creates the
   coordination dir named after its id and the key; releases it;
2. has the GPU trainer job submitted with ``--dependency=after:<server>``: Slurm starts the trainer only once the
   server has started, so the trainer's allocation waits for nothing but ``runtime_ready.flag`` (the server's own
   start-up, seconds) — never for the server's place in the queue;
3. reuses a live server for a resubmitted trainer, submits a new one otherwise;
4. on every exit writes ``training_complete.flag`` (the server stops by itself) and scancels the server after
   ``SERVER_GRACE`` seconds.

Inside the trainer job (:func:`run_trainer_side`): wait for ``runtime_ready.flag`` (``ready_timeout``), record how
long (``waited_for_runtime_s`` in ``trainer.json``), run the trainer with ``SKYRL_RUNTIME_URL`` / ``SKYRL_API_KEY``
in its environment (never argv), stop it if the server job ends, and write ``training_complete.flag`` on every exit
(normal, error, SIGTERM/SIGINT/SIGHUP): the server never outlives its trainer.

Launch modes: ``params.runtime_url`` reuses a running server (its key in ``$SKYRL_API_KEY``; no server job); the
command line (``python -m ptflow.launch.skyrl --help``) has ``--runtime-only`` (start a server and print how to use
it) and ``--dry-run`` (print the sbatch commands, submit nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import secrets
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ptflow import templates
from ptflow.cluster import ownership, slurm
from ptflow.cluster.runtime import runtime_argv
from ptflow.config.request import Request
from ptflow.config.sites import RuntimeSpec, Site
from ptflow.files import write_json_atomic, write_text_atomic
from ptflow.jobenv import signals_raise
from ptflow.keys import refuse_secrets
from ptflow.launch import skyrl_server as rs

DEFAULT_READY_TIMEOUT = 600
KEY_ENV = "SKYRL_API_KEY"
URL_ENV = "SKYRL_RUNTIME_URL"
COORD_ENV = "PTFLOW_SKYRL_COORD"  # the trainer job's coordination dir, set by the supervisor
SERVER_GRACE = 20  # seconds the server gets to see training_complete.flag before scancel
JOBS_DIR = ".skyrl_jobs"


class SkyRLError(RuntimeError):
    """The SkyRL server could not be started, died, or never became ready."""


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
    def script(self) -> Path:
        return self.root / "runtime_server.sbatch"

    @property
    def server_json(self) -> Path:
        return self.root / "server.json"

    def server_log(self, job_id: str | None = None) -> Path:
        """The server job's stdout (``runtime_<id>.out``; the newest one without an id)."""
        if job_id:
            return self.root / f"runtime_{job_id}.out"
        logs = sorted(self.root.glob("runtime_*.out"), key=lambda p: p.stat().st_mtime)
        return logs[-1] if logs else self.root / "runtime_unknown.out"

    def trainer_log(self, job_id: str | None) -> Path:
        return self.root / f"training_{job_id or 'local'}.out"

    def key(self) -> str:
        return self.key_file.read_text().strip()

    def server_job(self) -> str | None:
        try:
            import json

            return json.loads(self.server_json.read_text()).get("job_id")
        except (OSError, ValueError):
            return None


def write_key(coord: Coord) -> None:
    """A new API key, mode 600 from the start (never readable by others, not even while being written)."""
    coord.key_file.unlink(missing_ok=True)
    fd = os.open(coord.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")


def make_coord(root: str | Path) -> Coord:
    """A coordination dir (mode 700, stale flags removed) with a new API key (mode 600)."""
    coord = Coord(Path(root).resolve())
    coord.root.mkdir(parents=True, exist_ok=True)
    os.chmod(coord.root, 0o700)
    for p in (coord.url_file, coord.ready_flag, coord.complete_flag):
        p.unlink(missing_ok=True)
    write_key(coord)
    return coord


def stamp(now: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if now is None else now).strftime("%Y%m%d_%H%M%S")


@dataclass(frozen=True)
class ServerSite:
    """What the site says about the SkyRL server's job: its resolved request (``resources.runtime_server``), how its
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


def server_sbatch_options(
    server: ServerSite, base: Path, run_stamp: str, *, job_name: str, comment: str | None = None, extra=()
) -> list[str]:
    """The server job's flags: its site request as sbatch flags, one task, held (released once its coordination
    dir exists), its logs in that dir (``%j``: the id it gets), never requeued (a requeued server would come back
    with a new URL the trainer does not know)."""
    request = dataclasses.replace(server.request, requeue=False)
    coord = f"{base}/{run_stamp}_%j"
    return request.sbatch_options(
        job_name=job_name,
        output=f"{coord}/runtime_%j.out",
        extra=(
            f"--error={coord}/runtime_%j.err",
            "--hold",
            "--no-requeue",
            "--nodes=1",
            "--ntasks=1",
            *([f"--comment={comment}"] if comment else []),
            *extra,
        ),
    )


def server_command(server: ServerSite, params: dict) -> list[str]:
    """The server's argv in the site's runtime (the site venv's python, or this Python locally)."""
    rt = server.runtime
    python = "python" if (rt.is_container or rt.venv) else sys.executable
    cmd = [python, "-m", "ptflow.launch.skyrl_server"]  # the job script adds --coord "$COORD" --advertise
    if params.get("sandbox_image"):
        cmd += ["--wrap", f"podman --remote run --rm {params['sandbox_image']}"]
    return runtime_argv(rt, cmd, image=params.get("server_image"), gpus=0)


def render_server_script(server: ServerSite, base: Path, run_stamp: str, params: dict, path: Path) -> Path:
    """The server's job script; it finds its coordination dir from its own job id (``<base>/<stamp>_<id>``)."""
    try:
        refuse_secrets(server.env, str(path))
    except ValueError as exc:
        raise SkyRLError(str(exc)) from None
    command = server_command(server, params)
    text = templates.render(
        "skyrl_server.sbatch.j2",
        coord_base=str(base),
        stamp=run_stamp,
        env=server.env,
        server=command,
        podman_socket=bool(params.get("podman_socket")),
    )
    write_text_atomic(path, text)
    return path


def _tail(path: Path, n: int = 20) -> str:
    if not path.is_file():
        return f"({path} does not exist)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:])


def server_alive(job_id: str) -> tuple[bool, str]:
    rec = slurm.job_state(job_id)
    state = rec.base_state if rec else "UNKNOWN"
    return state not in slurm.TERMINAL_STATES, state


def wait_ready(
    coord: Coord, job_id: str | None, timeout: float = DEFAULT_READY_TIMEOUT, poll: float = 1.0, log=print
) -> str:
    """The server's URL once ``runtime_ready.flag`` exists; SkyRLError if its job ended or the timeout passed."""
    deadline = time.monotonic() + timeout
    while True:
        if coord.ready_flag.exists() and coord.url_file.exists():
            url = coord.url_file.read_text().strip()
            log(f"skyrl: runtime server {'job ' + job_id + ' ' if job_id else ''}ready at {url}")
            return url
        if job_id:
            alive, state = server_alive(job_id)
            if not alive:
                raise SkyRLError(
                    f"runtime server job {job_id} ended ({state}) before writing {coord.ready_flag}; "
                    f"its log {coord.server_log(job_id)} ends with:\n{_tail(coord.server_log(job_id))}"
                )
        else:
            state = "external"
        if time.monotonic() > deadline:
            raise SkyRLError(
                f"runtime server job {job_id} (state {state}) did not write {coord.ready_flag} within {timeout:.0f} s "
                f"(ready_timeout); raise ready_timeout, or see {coord.server_log(job_id)}"
            )
        time.sleep(poll)


def complete(coord: Coord) -> None:
    """``training_complete.flag``: the server shuts down when it sees it."""
    if not coord.complete_flag.exists():
        write_text_atomic(coord.complete_flag, f"{time.time():.3f}\n")


def stop_server(coord: Coord, job_id: str | None, log=print, grace: float = SERVER_GRACE) -> None:
    """Write training_complete.flag, give the server ``grace`` seconds to exit, then scancel it regardless."""
    complete(coord)
    if not job_id:
        return
    deadline = time.monotonic() + grace
    with contextlib.suppress(slurm.SlurmUnavailable):
        while time.monotonic() < deadline and server_alive(job_id)[0]:
            time.sleep(1)
    log(f"skyrl: scancel runtime server job {job_id}")
    slurm.cancel([job_id])


# ---- the login-node side: the supervisor's companion ----


class ServerCompanion:
    """The SkyRL server's job of one cell, as ``ptflow.cluster.supervise.supervise`` drives it."""

    def __init__(
        self,
        server: ServerSite,
        base: str | Path,
        params: dict,
        *,
        job_name: str,
        comment: str | None = None,
        server_extra: tuple[str, ...] = (),
        log=print,
    ):
        self.server = server
        self.base = Path(base).resolve()
        self.params = dict(params)
        self.job_name = job_name
        self.comment = comment
        self.server_extra = tuple(server_extra)  # further sbatch flags of the server job (bench: a simulated queue)
        self.log = log
        self.coord: Coord | None = None
        self.job_id: str | None = None

    @classmethod
    def for_cell(cls, server: dict, coord_base: str, params: dict, wildcards, log=print) -> ServerCompanion:
        """From a train job's spec (ptflow.specs.RuntimeServer): the site's server request and the cell's
        coordination base; ``params``: the training's."""
        return cls(
            ServerSite.from_dict(server),
            coord_base,
            params,
            job_name=ownership.owned_job_name(os.getcwd()),
            comment=ownership.job_comment("train", list(wildcards), role="skyrl-server"),
            log=log,
        )

    def submit_server(self) -> Coord:
        """Submit the server (held), make its coordination dir, release it."""
        self.base.mkdir(parents=True, exist_ok=True)
        run_stamp = stamp()
        script = render_server_script(
            self.server, self.base, run_stamp, self.params, self.base / f".runtime_server-{run_stamp}.sbatch"
        )
        opts = server_sbatch_options(
            self.server, self.base, run_stamp, job_name=self.job_name, comment=self.comment, extra=self.server_extra
        )
        argv = slurm.sbatch_argv(str(script), options=opts)
        self.log(f"skyrl: submitting runtime server (held): {shlex.join(argv)}")
        job_id = slurm.submit(argv)
        try:
            coord = make_coord(self.base / f"{run_stamp}_{job_id}")
            os.replace(script, coord.script)
            write_json_atomic(
                coord.server_json,
                {"job_id": job_id, "sbatch": argv, "request": self.server.request.values, "submitted": time.time()},
            )
            write_json_atomic(coord.root / "config.json", {"params": self.params, "server": self.server.to_dict()})
            slurm.release([job_id])
        except BaseException:
            slurm.cancel([job_id])
            raise
        self.coord, self.job_id = coord, job_id
        self.log(f"skyrl: runtime server job {job_id} released; coordination dir {coord.root}")
        return coord

    def external(self, url: str) -> Coord:
        """``params.runtime_url``: no server job; a coordination dir that says where the server is."""
        if not os.environ.get(KEY_ENV):
            raise SkyRLError(f"runtime_url {url} reuses a server: export {KEY_ENV} with that server's key")
        coord = Coord(self.base / f"{stamp()}_external")
        coord.root.mkdir(parents=True, exist_ok=True)
        os.chmod(coord.root, 0o700)
        write_text_atomic(coord.url_file, url + "\n")
        write_text_atomic(coord.ready_flag, f"{time.time():.3f} external\n")
        write_json_atomic(coord.root / "config.json", {"params": self.params, "runtime_url": url})
        self.coord = coord
        self.log(f"skyrl: reusing runtime server {url} (runtime_url); no server job submitted")
        return coord

    def prepare(self, attempt: int) -> tuple[list[str], dict]:
        """Before each trainer submission: a server (the live one, or a new one) and the trainer's dependency."""
        url = self.params.get("runtime_url")
        if url:
            coord = self.coord or self.external(url)
            return [], {COORD_ENV: str(coord.root)}
        if self.job_id and server_alive(self.job_id)[0] and not self.coord.complete_flag.exists():
            self.log(f"skyrl: attempt {attempt} reuses runtime server job {self.job_id}")
        else:
            self.submit_server()
        self.log(f"skyrl: the trainer job (attempt {attempt}) waits in the queue with --dependency=after:{self.job_id}")
        return [f"--dependency=after:{self.job_id}"], {COORD_ENV: str(self.coord.root)}

    def finish(self, log=print) -> None:
        if self.coord is not None:
            stop_server(self.coord, self.job_id, log=log)


# ---- the trainer-job side ----


def run_trainer(argv: list[str], env: dict, coord: Coord, job_id: str | None, log_path: Path, log=print, poll=2.0):
    """Run the trainer (output to ``log_path``); if the server job ends first, stop the trainer and fail."""
    log(f"skyrl: trainer: {shlex.join(argv)} (log {log_path})")
    with open(log_path, "ab") as out:
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
                            f"Server log {coord.server_log(job_id)}:\n{_tail(coord.server_log(job_id))}"
                        )
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return return_code


def run_trainer_side(coord_dir: str | Path, trainer_argv: list[str], *, params: dict | None = None, log=print) -> dict:
    """Inside the GPU trainer job: wait for the server's ready flag, train, and write training_complete.flag on
    every exit. Returns ``{"server_job", "runtime_url", "returncode", "waited_for_runtime_s"}``."""
    params = dict(params or {})
    started = time.time()
    coord = Coord(Path(coord_dir).resolve())
    job_id = coord.server_job()
    own_job = os.environ.get("SLURM_JOB_ID")
    timeout = float(params.get("ready_timeout", DEFAULT_READY_TIMEOUT))
    env = dict(os.environ)
    with signals_raise():
        try:
            url = wait_ready(coord, job_id, timeout, log=log)
            waited = time.time() - started
            log(f"skyrl: the trainer's allocation waited {waited:.1f} s for runtime_ready.flag")
            if coord.key_file.is_file():  # a server of ours; with runtime_url the key is in the environment already
                env[KEY_ENV] = coord.key()
            env[URL_ENV] = url
            write_json_atomic(
                coord.root / f"trainer_{own_job or 'local'}.json",
                {
                    "argv": trainer_argv,
                    "runtime_url": url,
                    "server_job": job_id,
                    "trainer_job": own_job,
                    "started": started,
                    "waited_for_runtime_s": round(waited, 3),
                },
            )
            rc = run_trainer(trainer_argv, env, coord, job_id, coord.trainer_log(own_job), log=log)
            if rc != 0 and job_id:
                # A trainer failing at the moment its server dies sees the symptom (a killed command, a refused
                # connection) before this side sees the job end: name the cause when the job ended.
                for _ in range(15):
                    alive, state = server_alive(job_id)
                    if not alive:
                        raise SkyRLError(
                            f"runtime server job {job_id} ended ({state}) while training ran; the trainer failed "
                            f"with exit {rc} as a consequence. Server log {coord.server_log(job_id)}:\n"
                            f"{_tail(coord.server_log(job_id))}\nTrainer log:\n{_tail(coord.trainer_log(own_job))}"
                        )
                    time.sleep(1)
            if rc != 0:
                raise SkyRLError(
                    f"trainer {shlex.join(trainer_argv[:4])}… exited {rc}; its log {coord.trainer_log(own_job)} "
                    f"ends with:\n{_tail(coord.trainer_log(own_job))}"
                )
            return {"server_job": job_id, "runtime_url": url, "returncode": rc, "waited_for_runtime_s": waited}
        finally:
            complete(coord)  # the server stops on every exit of the trainer


# ---- command line: --runtime-only, --dry-run ----


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ptflow.launch.skyrl",
        description="A SkyRL server outside the workflow: start one (--runtime-only) or show what a cell's "
        "train job would submit (--dry-run). Full runs go through snakemake (the train rule of a skyrl agent).",
    )
    ap.add_argument("--site", required=True, help="site name or path (needs resources.runtime_server)")
    ap.add_argument("--sites-dir", help="where site names are looked up (default: the workflow's config/sites)")
    ap.add_argument("--coord-base", default=JOBS_DIR, help=f"where coordination dirs go (default ./{JOBS_DIR})")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--runtime-only", action="store_true", help="submit the server, wait until ready, print its URL")
    mode.add_argument("--dry-run", action="store_true", help="print the sbatch commands; submit and write nothing")
    ap.add_argument("--runtime-url", help="an existing server (its key in $SKYRL_API_KEY): no server job")
    ap.add_argument("--ready-timeout", type=float, default=DEFAULT_READY_TIMEOUT)
    ap.add_argument("--podman-socket", action="store_true")
    ap.add_argument("--sandbox-image")
    args = ap.parse_args(argv)
    from ptflow.config.load import find_workflow
    from ptflow.config.sites import load_site

    sites_dir = args.sites_dir or find_workflow() / "config" / "sites"
    server = ServerSite.from_site(load_site(args.site, sites_dir))
    params = {"podman_socket": args.podman_socket, "sandbox_image": args.sandbox_image}
    base = Path(args.coord_base).resolve()
    name = ownership.owned_job_name(os.getcwd())
    if args.dry_run:
        if args.runtime_url:
            print(f"# runtime_url {args.runtime_url}: no server job; the trainer job is submitted without dependency")
            return 0
        opts = server_sbatch_options(server, base, "<stamp>", job_name=name)
        print("# 1. runtime server (CPU), held until its coordination dir exists, then released:")
        print(shlex.join(slurm.sbatch_argv(f"{base}/<stamp>_<server id>/runtime_server.sbatch", options=opts)))
        print("# 2. the cell's GPU trainer job (train rule), starting only once the server runs:")
        print("sbatch ... --dependency=after:<server id> <cell>/slurm/train.sbatch")
        return 0
    if args.runtime_url:
        ap.error("--runtime-url with --runtime-only: the server runs already; use it as params.runtime_url")
    companion = ServerCompanion(server, base, params, job_name=name, log=print)
    coord = companion.submit_server()
    url = wait_ready(coord, companion.job_id, args.ready_timeout)
    print(f"runtime server job {companion.job_id} serves {url}")
    print(f"  key: export {KEY_ENV}=$(cat {coord.key_file})   then set params.runtime_url: {url}")
    print(f"  stop: touch {coord.complete_flag}   (or scancel {companion.job_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
