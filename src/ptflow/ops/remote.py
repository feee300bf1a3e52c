"""``ptflow remote``: drive the workflow on a cluster's login node over SSH from a workstation (TAO's pattern).

- preflight: ``ssh -o BatchMode=yes`` works (no password or 2FA prompt can hang us) and the remote has the
  workflow's environment (a Python with snakemake; sbatch when the profile submits to Slurm);
- stage: the workflow directory is copied to the site's shared path (``tar | ssh tar``; .venv, results, .scratch,
  .snakemake and .git are left out);
- run: Snakemake starts detached there (``setsid nohup``: it survives the SSH session), pid, log and exit code
  recorded in ``<workdir>/.ptflow/driver.{pid,log,rc}``; ``--wait`` ends with 0, 1, or the driver's 78 when the
  preflight refused the run (``ptflow.ops.driver.PREFLIGHT_REFUSED``);
- status / cancel / logs: ``ptflow`` itself runs remotely over SSH.

Several login hosts may be given (``--host a,b`` or ``PTFLOW_REMOTE_HOSTS``): the first that answers is used.
The SSH key comes from ``--identity`` / ``PTFLOW_SSH_KEY`` (a *path*) or ssh-agent; no key, token or secret is
ever put on a command line: remote scripts go over stdin, and the remote's own environment provides API keys.

TAO's SLURM platform variables are read too, from the environment or a ``.env`` file (``./.env``, then
``~/.config/ptflow/.env``, then TAO's ``~/.config/tao/.env``; the environment wins): ``SLURM_USER``,
``SLURM_HOSTNAME`` (comma-separated, failover), ``SSH_KEY_PATH`` (preferred) or ``SSH_AUTH_SOCK`` (an agent),
``SLURM_BASE_RESULTS_DIR`` (``<it>/ptflow`` is the remote dir), and ``SLURM_ACCOUNT``, ``SLURM_PARTITION``,
``SLURM_TIME_HOURS``, ``SLURM_TIMEOUT_HOURS``, which are passed on to the remote's commands (the pyxis site file
reads them). Before anything is staged or started, every input the run needs on the cluster (checkouts, a site
venv, enroot credentials for private images) is checked with ``test -e`` over SSH; ``file://`` and relative input
paths are refused, ``lustre:///abs`` is ``/abs``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ptflow.config.validate import ConfigError
from ptflow.ops.driver import PREFLIGHT_REFUSED

LOG = logging.getLogger("ptflow.ops.remote")
STATE_FILE = Path(".ptflow") / "remote.json"
# TAO's variables passed on to every remote command (none secret): the pyxis site file reads them there.
FORWARDED = ("SLURM_ACCOUNT", "SLURM_PARTITION", "SLURM_TIME_HOURS", "SLURM_TIMEOUT_HOURS", "SLURM_BASE_RESULTS_DIR")
DOTENV_FILES = (Path(".env"), Path("~/.config/ptflow/.env"), Path("~/.config/tao/.env"))
SSH_SETUP = (
    "set SSH_KEY_PATH=/path/to/private_key (in your environment or .env): create it with ssh-keygen -t ed25519, "
    "install the public key on each login host (ssh-copy-id -i KEY.pub USER@HOST), chmod 600 the private key, "
    "accept the host key once, and check `ssh -o BatchMode=yes -i KEY USER@HOST true` (or load the key into an "
    "agent: SSH_AUTH_SOCK)"
)


def settings(env: dict | None = None, files=DOTENV_FILES) -> dict[str, str]:
    """The environment over the .env files (first file wins among them), as python-dotenv reads them."""
    from dotenv import dotenv_values

    merged: dict[str, str] = {}
    for f in reversed(files):
        path = Path(f).expanduser()
        if path.is_file():
            merged.update({k: v for k, v in dotenv_values(path).items() if v is not None})
    merged.update(os.environ if env is None else env)
    return merged


# Not staged: the workflow directory's own run outputs and environments (EXCLUDES: its top-level entries only, so a
# package named results, src/ptflow/results, is staged) and caches wherever they are (EXCLUDES_ANYWHERE).
EXCLUDES = (".venv", "results", ".scratch", ".snakemake", ".git", ".ptflow")
EXCLUDES_ANYWHERE = ("__pycache__", ".pytest_cache")


class RemoteError(RuntimeError):
    """An SSH step failed; the message names the host, the step and what to do."""


@dataclass
class Remote:
    hosts: list[str]  # [user@]host[:port]
    remote_dir: str  # the workflow directory on the cluster's shared filesystem
    workdir: str = ""  # where Snakemake runs (default <remote_dir>/run)
    python: str = ""  # the remote environment's python (default <remote_dir>/.venv/bin/python)
    user: str = ""
    port: int | None = None
    identity: str = ""  # path to a private key (never its contents)
    known_hosts: str = ""
    connect_timeout: int = 10
    chosen: str = ""
    extra_env: dict = field(default_factory=dict)  # non-secret variables for remote commands (e.g. SLURM_CONF)

    def __post_init__(self):
        self.workdir = self.workdir or f"{self.remote_dir.rstrip('/')}/run"
        self.python = self.python or f"{self.remote_dir.rstrip('/')}/.venv/bin/python"

    # -- ssh argv: built here only, logged before it runs --

    def ssh_argv(self, host: str, remote_command: str) -> list[str]:
        user, _, hostport = host.rpartition("@")
        name, _, port = hostport.partition(":")
        argv = [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={self.connect_timeout}",
            "-o",
            "StrictHostKeyChecking=accept-new",
        ]
        if self.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.identity:
            argv += ["-i", self.identity, "-o", "IdentitiesOnly=yes"]
        port = port or (str(self.port) if self.port else "")
        if port:
            argv += ["-p", port]
        user = user or self.user
        argv += ["-l", user] if user else []
        return [*argv, name, remote_command]

    def ssh(self, script: str, host: str | None = None, stdin: bytes | None = None, timeout: float = 600, check=True):
        """Run a bash script on the host: the script goes over stdin (nothing secret or long on argv)."""
        host = host or self.host()
        if stdin is None:
            argv = self.ssh_argv(host, "bash -s")
            data = self._env_prefix().encode() + script.encode()
        else:
            argv = self.ssh_argv(host, f"bash -c {shlex.quote(self._env_prefix() + script)}")
            data = stdin
        LOG.info("run: %s", argv)
        proc = subprocess.run(argv, input=data, capture_output=True, timeout=timeout)
        out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
        if check and proc.returncode != 0:
            raise RemoteError(f"ssh {host}: exit {proc.returncode}: {err.strip() or out.strip()}")
        return proc.returncode, out, err

    def _env_prefix(self) -> str:
        return "".join(f"export {k}={shlex.quote(str(v))}\n" for k, v in self.extra_env.items())

    # -- failover --

    def reachable(self, host: str) -> str | None:
        """None if ``ssh -o BatchMode=yes host true`` works, else why not."""
        argv = self.ssh_argv(host, "true")
        LOG.info("run: %s", argv)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.connect_timeout + 10)
        except subprocess.TimeoutExpired:
            return "timed out"
        return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")

    def host(self) -> str:
        if self.chosen:
            return self.chosen
        errors = []
        for h in self.hosts:
            why = self.reachable(h)
            if why is None:
                self.chosen = h
                return h
            errors.append(f"{h}: {why}")
        who = f"{self.user}@" if self.user else ""
        raise RemoteError(
            f"MISSING: passwordless SSH to {who}{self.hosts[0]} not working (no login host accepts non-interactive "
            "SSH: " + "; ".join(errors) + f"). {SSH_SETUP}"
        )

    # -- steps --

    @property
    def snakemake(self) -> str:
        return str(Path(self.python).with_name("snakemake"))

    def preflight(self, profile: str = "profiles/slurm") -> list[str]:
        """Problems found, each naming what to do; empty = ready."""
        problems = []
        try:
            host = self.host()
        except RemoteError as exc:
            return [str(exc)]
        check = f"""
test -x {shlex.quote(self.python)} || echo "PROBLEM python {self.python} is missing"
test -x {shlex.quote(self.snakemake)} || echo "PROBLEM snakemake {self.snakemake} is missing"
{shlex.quote(self.python)} -c 'import snakemake' 2>/dev/null || echo "PROBLEM python cannot import snakemake"
mkdir -p {shlex.quote(self.remote_dir)} 2>/dev/null && test -w {shlex.quote(self.remote_dir)} \
  || echo "PROBLEM remote dir {self.remote_dir} is not writable"
"""
        if "slurm" in profile:
            check += 'command -v sbatch >/dev/null || echo "PROBLEM sbatch not on PATH"\n'
        _, out, _ = self.ssh(check, host=host, check=False)
        for line in out.splitlines():
            if line.startswith("PROBLEM "):
                what = line.removeprefix("PROBLEM ")
                problems.append(
                    f"{host}: {what} — create the workflow environment there (python -m venv + pip install -r "
                    "envs/requirements.txt) or point --python at one"
                )
        return problems

    def missing_paths(self, paths: list[tuple[str, str]]) -> list[str]:
        """``test -e`` on the login host for each (setting, path); the settings whose path is not there."""
        if not paths:
            return []
        lines = [
            f"test -e {shlex.quote(p)} || echo MISSING {i}"
            if not p.startswith("$")
            else f'test -e "{p}" || echo MISSING {i}'  # an expression the remote shell expands ($HOME/...)
            for i, (_, p) in enumerate(paths)
        ]
        _, out, _ = self.ssh("\n".join(lines) + "\n", check=False)
        missing = {int(ln.split()[1]) for ln in out.splitlines() if ln.startswith("MISSING ")}
        return [f"{paths[i][0]} = {paths[i][1]}" for i in sorted(missing)]

    def stage(self, local_dir: Path) -> None:
        """Copy the workflow directory (code and config, not results or environments) to the remote dir."""
        excludes = [f"--exclude=./{e}" for e in EXCLUDES] + [f"--exclude={e}" for e in EXCLUDES_ANYWHERE]
        tar = ["tar", "-C", str(local_dir), *excludes, "-czf", "-", "."]
        LOG.info("run: %s", tar)
        data = subprocess.run(tar, capture_output=True, check=True).stdout
        d = shlex.quote(self.remote_dir)
        self.ssh(f"mkdir -p {d} && tar -C {d} -xzf -", stdin=data)

    def start(self, snakemake_args: list[str], profile: str = "profiles/slurm") -> dict:
        """Start Snakemake detached on the host; returns the recorded {host, pid, log, ...}."""
        wd, rd = shlex.quote(self.workdir), self.remote_dir.rstrip("/")
        venv_bin = shlex.quote(str(Path(self.python).parent))
        smk = [
            self.snakemake,
            "-s",
            f"{rd}/Snakefile",
            "--directory",
            self.workdir,
            "--profile",
            f"{rd}/{profile}",
            *snakemake_args,
        ]
        inner = f"{shlex.join(smk)}; echo $? > .ptflow/driver.rc"
        script = f"""
set -eu
mkdir -p {wd}/.ptflow && cd {wd}
if [ -f .ptflow/driver.pid ] && kill -0 "$(cat .ptflow/driver.pid)" 2>/dev/null; then
  echo "ALREADY $(cat .ptflow/driver.pid)"; exit 3
fi
rm -f .ptflow/driver.rc
export PATH={venv_bin}:$PATH
setsid nohup bash -c {shlex.quote(inner)} > .ptflow/driver.log 2>&1 < /dev/null &
echo $! > .ptflow/driver.pid
echo "PID $!"
"""
        code, out, err = self.ssh(script, check=False)
        if code == 3:
            raise RemoteError(
                f"{self.host()}: a driver is already running in {self.workdir} ({out.split()[-1]}); "
                "check `ptflow remote status` or stop it with `ptflow remote driver --stop`"
            )
        if code != 0:
            raise RemoteError(f"{self.host()}: could not start snakemake: {err.strip() or out.strip()}")
        pid = int(out.split("PID", 1)[1].split()[0])
        return {
            "host": self.host(),
            "pid": pid,
            "log": f"{self.workdir}/.ptflow/driver.log",
            "workdir": self.workdir,
            "command": smk,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }

    def driver(self) -> dict:
        """The remote driver: pid, alive, exit code (when it ended). Ended: its exit code written, or its process gone
        or a zombie (``kill -0`` succeeds on a zombie, which lasts until its new parent reaps it: on a login node whose
        init is slow to, a finished run read as alive)."""
        wd = shlex.quote(self.workdir)
        script = f"""
cd {wd} 2>/dev/null || {{ echo "NODIR"; exit 0; }}
pid=$(cat .ptflow/driver.pid 2>/dev/null || true)
alive=0
if [ -n "$pid" ] && [ ! -s .ptflow/driver.rc ] && kill -0 "$pid" 2>/dev/null; then
  case "$(ps -o stat= -p "$pid" 2>/dev/null)" in Z*) ;; *) alive=1 ;; esac
fi
echo "PID=${{pid:-}} ALIVE=$alive RC=$(cat .ptflow/driver.rc 2>/dev/null || true)"
"""
        _, out, _ = self.ssh(script)
        if "NODIR" in out:
            return {"pid": None, "alive": False, "rc": None}
        fields = dict(item.split("=", 1) for item in out.split() if "=" in item)
        rc = fields.get("RC")
        return {
            "pid": int(fields["PID"]) if fields.get("PID") else None,
            "alive": fields.get("ALIVE") == "1",
            "rc": int(rc) if rc else None,
            "log": f"{self.workdir}/.ptflow/driver.log",
        }

    def stop_driver(self) -> None:
        """SIGTERM the driver's process group: Snakemake cancels its own Slurm jobs on the way out."""
        wd = shlex.quote(self.workdir)
        self.ssh(f'cd {wd} && pid=$(cat .ptflow/driver.pid) && kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"')

    def ptflow(self, args: list[str], timeout: float = 300) -> tuple[int, str, str]:
        """Run ``ptflow ARGS -d <workdir>`` remotely with the staged package."""
        rd = self.remote_dir.rstrip("/")
        cmd = [self.python, "-m", "ptflow.ops.cli", *args]
        script = f"cd {shlex.quote(self.workdir)} && PYTHONPATH={shlex.quote(rd + '/src')} {shlex.join(cmd)}\n"
        return self.ssh(script, check=False, timeout=timeout)

    def driver_log_tail(self, lines: int = 40) -> str:
        _, out, _ = self.ssh(f"tail -n {int(lines)} {shlex.quote(self.workdir)}/.ptflow/driver.log", check=False)
        return out


# ---- command line ----


def add_parser(sub) -> None:
    p = sub.add_parser("remote", help="run and operate the workflow on a login node over SSH")
    p.add_argument(
        "--host",
        help="login host(s) [user@]host[:port], comma-separated for failover ($PTFLOW_REMOTE_HOSTS, $SLURM_HOSTNAME)",
    )
    p.add_argument("--user", help="SSH user ($PTFLOW_REMOTE_USER, $SLURM_USER)")
    p.add_argument("--port", type=int, help="SSH port")
    p.add_argument("--identity", help="path of the private key ($PTFLOW_SSH_KEY, $SSH_KEY_PATH); never the key itself")
    p.add_argument("--known-hosts", help="UserKnownHostsFile to use")
    p.add_argument(
        "--remote-dir",
        help="workflow dir on the shared filesystem ($PTFLOW_REMOTE_DIR, $SLURM_BASE_RESULTS_DIR/ptflow)",
    )
    p.add_argument("--workdir", help="where snakemake runs remotely (default <remote-dir>/run)")
    p.add_argument("--python", help="the remote environment's python (default <remote-dir>/.venv/bin/python)")
    p.add_argument("--profile", default="profiles/slurm", help="profile inside the workflow dir (default slurm)")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for remote commands (no secrets)")
    rs = p.add_subparsers(dest="remote_command", required=True)
    rs.add_parser("preflight", help="check SSH and the remote environment")
    rs.add_parser("stage", help="copy the workflow directory to --remote-dir")
    r = rs.add_parser("run", help="preflight, stage, start snakemake detached")
    r.add_argument("--no-stage", action="store_true")
    r.add_argument("--wait", action="store_true", help="poll until the driver ends")
    r.add_argument("--interval", type=float, default=10.0)
    r.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="after --: extra snakemake arguments")
    s = rs.add_parser("status", help="ptflow status on the remote")
    s.add_argument("--json", action="store_true")
    c = rs.add_parser("cancel", help="ptflow cancel on the remote")
    c.add_argument("--cell", action="append")
    c.add_argument("--agent", action="append")
    c.add_argument("--all", action="store_true")
    lg = rs.add_parser("logs", help="ptflow logs CELL on the remote (or the driver's log)")
    lg.add_argument("cell", nargs="?")
    lg.add_argument("-n", "--lines", type=int, default=20)
    d = rs.add_parser("driver", help="the remote snakemake driver: pid, alive, exit code")
    d.add_argument("--stop", action="store_true", help="SIGTERM it (it cancels its Slurm jobs)")


def _saved_state() -> dict:
    return json.loads(STATE_FILE.read_text()) if STATE_FILE.is_file() else {}


def remote_from_args(ns, env: dict | None = None) -> Remote:
    """Options, else ptflow's variables, else TAO's (environment over .env files), else the saved state."""
    saved = _saved_state()
    env = settings() if env is None else env
    hosts = ns.host or env.get("PTFLOW_REMOTE_HOSTS") or env.get("SLURM_HOSTNAME") or ",".join(saved.get("hosts", []))
    user = ns.user or env.get("PTFLOW_REMOTE_USER") or env.get("SLURM_USER") or saved.get("user", "")
    base = env.get("SLURM_BASE_RESULTS_DIR")
    remote_dir = (
        ns.remote_dir or env.get("PTFLOW_REMOTE_DIR") or (f"{base.rstrip('/')}/ptflow" if base else None)
    ) or saved.get("remote_dir")
    if not hosts:
        raise RemoteError(
            "MISSING: set SLURM_USER and SLURM_HOSTNAME (comma-separated for failover) in your env or a .env file "
            "(./.env or ~/.config/ptflow/.env), or give --user and --host"
        )
    if not remote_dir:
        raise RemoteError(
            "no remote directory: give --remote-dir /shared/path, or set SLURM_BASE_RESULTS_DIR (the run goes to "
            "<it>/ptflow) or PTFLOW_REMOTE_DIR"
        )
    extra = dict(saved.get("env", {}))
    extra.update({k: env[k] for k in FORWARDED if env.get(k)})
    for item in ns.env:
        k, eq, v = item.partition("=")
        if not eq:
            raise RemoteError(f"--env {item!r}: write NAME=VALUE")
        extra[k] = v
    identity = ns.identity or env.get("PTFLOW_SSH_KEY") or env.get("SSH_KEY_PATH") or saved.get("identity", "")
    if identity and not Path(identity).expanduser().is_file():
        raise RemoteError(f"MISSING: SSH key {identity} (SSH_KEY_PATH) does not exist. {SSH_SETUP}")
    if not identity and not env.get("SSH_AUTH_SOCK"):
        LOG.warning("no SSH_KEY_PATH and no SSH_AUTH_SOCK: ssh tries its default keys only")
    return Remote(
        hosts=[h.strip() for h in hosts.split(",") if h.strip()],
        remote_dir=remote_dir,
        workdir=ns.workdir or saved.get("workdir", ""),
        python=ns.python or saved.get("python", ""),
        user=user,
        port=ns.port or saved.get("port"),
        identity=str(Path(identity).expanduser()) if identity else "",
        known_hosts=ns.known_hosts or saved.get("known_hosts", ""),
        extra_env=extra,
    )


def remote_inputs(remote: Remote, snakemake_args: list[str], local_dir: Path) -> tuple[list[str], list]:
    """The run's configuration as the cluster will read it ($USER = the remote user, TAO's variables as forwarded):
    problems found here (file:// and relative input paths), and (setting, path) pairs to test over SSH."""
    from ptflow.cluster import preflight
    from ptflow.config.load import load
    from ptflow.ops.context import parse_smk_args

    smk = parse_smk_args(snakemake_args)
    saved_env = dict(os.environ)
    os.environ.update(remote.extra_env)
    if remote.user:
        os.environ["USER"] = remote.user
    try:
        loaded = load(local_dir, smk.configfiles, smk.config, base_dir=local_dir)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
    problems, paths = [], []
    for key in ("results", "scratch", "hf_home"):
        value = getattr(loaded.layout, key)
        if value.startswith("file:"):
            problems.append(
                f"paths.{key} = {value!r}: file:// names this workstation's disk; use a path on the cluster's "
                "shared storage (lustre:///abs/path)"
            )
    for where, path in preflight.required_inputs(loaded.cfg, loaded.site):
        if path.startswith("file:") or not path.startswith("/"):
            problems.append(
                f"{where} = {path!r} is a path on this workstation, not the cluster; stage it onto the cluster's "
                "shared storage and give its absolute path there (or lustre:///abs/path)"
            )
        else:
            paths.append((where, path))
    if preflight.images_needing_credentials(loaded.site):
        creds = "${ENROOT_CONFIG_PATH:-$HOME/.config/enroot}/" + preflight.ENROOT_CREDENTIALS
        paths.append((f"enroot credentials for {', '.join(preflight.images_needing_credentials(loaded.site))}", creds))
    return problems, paths


def _save(remote: Remote, extra: dict) -> None:
    from ptflow.files import write_json_atomic

    data = {k: v for k, v in asdict(remote).items() if k not in ("chosen", "connect_timeout")}
    data.update(extra)
    write_json_atomic(STATE_FILE, data)


def main(ns) -> int:
    try:
        remote = remote_from_args(ns)
        cmd = ns.remote_command
        if cmd == "preflight":
            problems = remote.preflight(ns.profile)
            for p in problems:
                print(f"PROBLEM: {p}")
            if not problems:
                print(f"ok: {remote.host()} accepts BatchMode SSH and has {remote.python} with snakemake")
            return 1 if problems else 0
        if cmd == "stage":
            remote.stage(Path.cwd())
            print(f"staged {Path.cwd()} to {remote.host()}:{remote.remote_dir}")
            return 0
        if cmd == "run":
            args = [a for a in ns.snakemake_args if a != "--"]
            problems = remote.preflight(ns.profile)
            if not problems:
                # every input checked on the cluster before anything is staged or started
                found, paths = remote_inputs(remote, args, Path.cwd())
                problems = found + [
                    f"{m} does not exist on {remote.host()}; fix the path or stage the data onto the cluster's "
                    "shared storage first"
                    for m in remote.missing_paths(paths)
                ]
            if problems:
                for p in problems:
                    print(f"PROBLEM: {p}", file=sys.stderr)
                return 1
            if not ns.no_stage:
                remote.stage(Path.cwd())
            info = remote.start(args, ns.profile)
            _save(remote, {"driver": info})
            print(f"started snakemake on {info['host']}: pid {info['pid']}, log {info['log']}")
            if not ns.wait:
                return 0
            while True:
                d = remote.driver()
                if not d["alive"]:
                    if d["rc"] == PREFLIGHT_REFUSED:  # passed on: refused before anything was submitted
                        print(f"driver ended with exit code {d['rc']}: the preflight refused the run ({d['log']})")
                        return PREFLIGHT_REFUSED
                    print(f"driver ended with exit code {d['rc']}")
                    return 0 if d["rc"] == 0 else 1
                time.sleep(ns.interval)
        if cmd == "status":
            d = remote.driver()
            code, out, err = remote.ptflow(["status", "-d", remote.workdir, *(["--json"] if ns.json else [])])
            if ns.json:
                data = json.loads(out) if code == 0 else {"error": err}
                data["driver"] = d
                data["host"] = remote.host()
                print(json.dumps(data, indent=2))
            else:
                state = "running" if d["alive"] else f"ended (exit {d['rc']})"
                print(f"{remote.host()}:{remote.workdir} — driver pid {d['pid']} {state}, log {d.get('log')}")
                print(out, end="")
                print(err, end="", file=sys.stderr)
            return code
        if cmd == "cancel":
            args = ["cancel", "-d", remote.workdir]
            args += [f"--cell={c}" for c in ns.cell or []] + [f"--agent={a}" for a in ns.agent or []]
            args += ["--all"] if ns.all else []
            code, out, err = remote.ptflow(args)
            print(out, end="")
            print(err, end="", file=sys.stderr)
            return code
        if cmd == "logs":
            if not ns.cell:
                print(remote.driver_log_tail(ns.lines), end="")
                return 0
            code, out, err = remote.ptflow(["logs", "-d", remote.workdir, "-n", str(ns.lines), ns.cell])
            print(out, end="")
            print(err, end="", file=sys.stderr)
            return code
        if cmd == "driver":
            if ns.stop:
                remote.stop_driver()
            print(json.dumps(remote.driver()))
            return 0
    except RemoteError as exc:
        print(f"ptflow remote: {exc}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"ptflow remote: {exc}", file=sys.stderr)
        return 2
    return 2
