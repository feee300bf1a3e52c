"""A real two-node Slurm cluster on this one machine, for tests and benchmarks.

Daemons (munged, MariaDB, slurmdbd, slurmctld and two slurmd) run as root from the Debian packages, with
all config, state, sockets and logs in a private workdir; clients find the config through ``SLURM_CONF``
(see ``LocalSlurmCluster.env``). Each start wipes the workdir's state and database, so a crashed run never
breaks the next one, and only the processes recorded in ``<workdir>/state.json`` are ever stopped.

    python -m tests.support.local_slurm up [--workdir DIR] [--no-accounting]
    python -m tests.support.local_slurm status|down [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ptflow.cluster import slurm  # one parser of time limits and one wait for jobs, shared with the workflow
from tests.support import apt

CLUSTER_NAME = "ptflowtest"
DEFAULT_WORKDIR = Path("/tmp/ptflow-slurm")
APT_PACKAGES = ("slurm-wlm", "slurmdbd", "munge", "mariadb-server")
# Binaries start() needs: a missing one triggers the apt install.
REQUIRED_BINARIES = (
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "sacctmgr",
    "munged",
    "mariadbd",
    "mariadb-install-db",
    "mariadb",
)
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"
# The daemons' start, apt install excluded. A freshly booted, busy machine's first start (MariaDB initialising, the
# daemons' files read from disk, pytest workers importing beside it) is far slower than the usual 8-10 s.
START_TIMEOUT_ENV = "PTFLOW_SLURM_START_TIMEOUT"
DEFAULT_START_TIMEOUT = 300.0
# A slurmd whose node slurmctld still does not report ready this long after the slurmd started is restarted once: a
# new slurmd registers at once, where slurmctld by itself asks an unregistered node again only every
# SlurmdTimeout/3 (100 s by default).
REREGISTER_AFTER = 30.0


class SlurmClusterError(RuntimeError):
    """The cluster could not be started, or an operation on it failed."""


def start_timeout() -> float:
    return float(os.environ.get(START_TIMEOUT_ENV) or DEFAULT_START_TIMEOUT)


_REASON = re.compile(r"\bReason=(.*?)(?= \w+=|$)")


@dataclass(frozen=True)
class NodeState:
    """One node as slurmctld reports it (``scontrol show node -o``)."""

    name: str
    state: str  # base state and flags, e.g. IDLE, UNKNOWN+NOT_RESPONDING, IDLE+DRAIN
    reason: str = ""
    slurmd_start: str = "None"  # slurmctld's record of the registered slurmd's start; "None" before it registered

    @property
    def ready(self) -> bool:
        """Registered and free for jobs: IDLE with no flag (NOT_RESPONDING, DRAIN, INVALID_REG ...)."""
        return self.state == "IDLE"

    def describe(self) -> str:
        reason = f" Reason={self.reason}" if self.reason else ""
        return f"State={self.state}{reason} SlurmdStartTime={self.slurmd_start}"


def parse_nodes(text: str) -> dict[str, NodeState]:
    """``scontrol show node -o`` output, one node a line; Reason's value may hold spaces."""
    nodes = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "NodeName" not in fields:
            continue
        reason = _REASON.search(line)
        nodes[fields["NodeName"]] = NodeState(
            fields["NodeName"],
            fields.get("State", "?"),
            reason.group(1).strip() if reason else "",
            fields.get("SlurmdStartTime", "None"),
        )
    return nodes


@dataclass(frozen=True)
class Partition:
    name: str
    max_time_min: int
    default: bool = False


@dataclass(frozen=True)
class NodeSpec:
    """What every node advertises (far more than this machine has, via SlurmdParameters=config_overrides)."""

    cpus: int = 32
    real_memory_mb: int = 262144
    tmp_disk_mb: int = 512000
    gpus: int = 4
    gpu_type: str = "h100"

    @property
    def gres(self) -> str:
        return f"gpu:{self.gpu_type}:{self.gpus}"


PARTITIONS = (
    Partition("debug", 60, default=True),
    Partition("gpu", 720),
    Partition("cpu", 120),
    Partition("short", 5),
)
# A third node for tests that kill a slurmd (a real NODE_FAIL): it is only in partition `nodefail` (with node2, where
# a retry that excludes it runs), so no other test's job ever lands on it while the suite runs tests in parallel.
SPARE_NODE = "spare1"
SPARE_PARTITION = Partition("nodefail", 60)

# Daemon start order; stop() goes in reverse, in these phases so slurmctld can still flush to slurmdbd.
_STOP_PHASES = (("slurmd-1", "slurmd-2", "slurmd-3", "slurmctld"), ("slurmdbd",), ("mysqld",), ("munged",))


def _proc_start_time(pid: int) -> str | None:
    """Kernel start time of ``pid``; together with the pid it identifies a process across pid reuse."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # zombie: already dead, just not reaped by its (possibly foreign) parent
        return None
    return fields[19]


def _ancestors() -> list[int]:
    pids, pid = [], os.getppid()
    while pid > 1:
        pids.append(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            break
    return pids


def _make_fake_gpu(path: Path) -> None:
    """A /dev/null-like char device: for a plain file slurmd logs errors and sets no CUDA_VISIBLE_DEVICES."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:  # e.g. no CAP_MKNOD: an empty file still registers the GPU
        path.touch()


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class LocalSlurmCluster:
    """Start/stop a real Slurm 22.05 cluster of two nodes on this machine.

    Node 1 is named after this host (NodeAddr 127.0.0.1), node 2 is ``node2`` (NodeAddr 127.0.0.2); both run
    here as separate slurmd processes, and so does the spare node ``spare1`` (127.0.0.3, partition ``nodefail``
    only), which tests may take down. With ``accounting`` (the default) slurmdbd stores into a private
    MariaDB, so ``sacct``/``sacctmgr`` work and associations are enforced: user root has the default
    account ``ptflow`` and no association with ``other``.
    """

    cluster_name = CLUSTER_NAME
    account = "ptflow"
    other_account = "other"
    node_spec = NodeSpec()

    def __init__(
        self,
        workdir: str | os.PathLike[str] = DEFAULT_WORKDIR,
        *,
        accounting: bool = True,
        port_base: int = 6817,
        install: bool = True,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.accounting = accounting
        self.install = install
        self.ctld_port = port_base
        self.dbd_port = port_base + 2
        self.mysql_port = port_base + 3
        self.external = False
        # started by this test session (by this process or, under pytest-xdist, by a sibling worker): a test may then
        # stop and restart its controller (tests/support/slurm_session.py sets it for the siblings)
        self.session_owned = True
        self._conf_override: Path | None = None
        host = socket.gethostname().split(".")[0]
        self._node_addrs = {host: "127.0.0.1", "node2": "127.0.0.2", SPARE_NODE: "127.0.0.3"}
        self._node_ports = {host: port_base + 1, "node2": port_base + 11, SPARE_NODE: port_base + 21}
        self.partitions: dict[str, Partition] = {p.name: p for p in (*PARTITIONS, SPARE_PARTITION)}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._argv: dict[str, list[str]] = {}
        self.startup_seconds: float | None = None
        self.slurmd_restarts: list[str] = []  # nodes whose slurmd start() restarted because it had not registered
        self.start_phases: dict[str, float] = {}  # daemon -> seconds into start() when it answered (bench/)

    # ---------------------------------------------------------------- attaching to an existing cluster
    @classmethod
    def existing(cls) -> LocalSlurmCluster:
        """The cluster already configured here (``SLURM_CONF`` or /etc/slurm); never started or stopped."""
        conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
        self = cls(conf.parent, install=False)
        self.external = True
        self.session_owned = False
        self._conf_override = conf
        # Filled in from the live cluster by start().
        self._node_addrs, self._node_ports, self.partitions, self.accounting = {}, {}, {}, False
        return self

    @classmethod
    def running(cls, workdir: str | os.PathLike[str] = DEFAULT_WORKDIR) -> LocalSlurmCluster:
        """The cluster another process started in ``workdir`` (an earlier pytest-xdist worker of the session): the
        same config path and nodes as its starter sees, never stopped from here (its starter's session does)."""
        self = cls(workdir, install=False)
        self.external = True  # start() only checks that it answers and reads nodes/partitions; stop() leaves it
        self.session_owned = False  # unless its starter was this session (cluster_for_session says so)
        return self

    def _load_existing(self) -> None:
        nodes = self.run(["scontrol", "show", "node", "--oneliner"], check=True).stdout
        for line in nodes.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if "NodeName" in fields:
                self._node_addrs[fields["NodeName"]] = fields.get("NodeAddr", fields["NodeName"])
        parts = self.run(["scontrol", "show", "partition", "--oneliner"], check=True).stdout
        for line in parts.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if "PartitionName" in fields:
                limit = fields.get("MaxTime", "UNLIMITED")
                self.partitions[fields["PartitionName"]] = Partition(
                    fields["PartitionName"],
                    -1 if (limit_min := slurm.parse_minutes(limit)) is None else limit_min,
                    fields.get("Default") == "YES",
                )
        self.accounting = "accounting_storage/slurmdbd" in self.run(["scontrol", "show", "config"]).stdout

    # ---------------------------------------------------------------- public data
    @property
    def conf_path(self) -> Path:
        return self._conf_override or self.workdir / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """Variables to merge into os.environ / a subprocess env so Slurm clients use this cluster."""
        return {"SLURM_CONF": str(self.conf_path)}

    @property
    def hostnames(self) -> list[str]:
        """The nodes of the ordinary partitions (every partition but ``nodefail``)."""
        return [n for n in self._node_addrs if n != SPARE_NODE]

    @property
    def all_nodes(self) -> list[str]:
        return list(self._node_addrs)

    def partition_nodes(self, partition: str) -> list[str]:
        return ["node2", SPARE_NODE] if partition == SPARE_PARTITION.name else self.hostnames

    def node_addr(self, name: str) -> str:
        return self._node_addrs[name]

    @property
    def default_partition(self) -> str:
        return next(p.name for p in self.partitions.values() if p.default)

    @property
    def state_file(self) -> Path:
        return self.workdir / "state.json"

    # ---------------------------------------------------------------- client helpers
    def run(
        self, cmd: list[str], *, check: bool = False, timeout: float = 60, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster (text output captured)."""
        proc = subprocess.run(
            cmd, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout, input=input
        )
        if check and proc.returncode != 0:
            raise SlurmClusterError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def wait_job(self, jobid: int | str, timeout: float = 60) -> str:
        """Wait until the job ended and return its final state (e.g. COMPLETED), through ptflow's own wait."""
        return slurm.wait_job(str(jobid), poll=0.5, timeout=timeout).base_state

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> LocalSlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float | None = None) -> LocalSlurmCluster:
        """Bring the cluster up: each daemon in turn, each waited for until it answers, then every node until
        slurmctld reports it IDLE. ``timeout`` (default PTFLOW_SLURM_START_TIMEOUT, else 300 s) bounds it all, the
        apt install excluded. Raises SlurmClusterError naming the daemon that did not come up, with its log."""
        if self.external:
            ping = self.run(["scontrol", "ping"])
            if ping.returncode != 0:
                raise SlurmClusterError(f"existing cluster ({self.conf_path}) not reachable: {ping.stdout}")
            self._load_existing()
            return self
        if os.geteuid() != 0:
            raise SlurmClusterError("the local Slurm cluster needs root (slurmd runs jobs as their user)")
        self.ensure_installed()
        t0 = time.monotonic()
        deadline = t0 + (start_timeout() if timeout is None else timeout)
        self.stop()  # whatever a crashed earlier run left behind in this workdir
        self._check_ports_free()
        self.slurmd_restarts = []
        self.start_phases = {}
        try:
            self._prepare_workdir()
            self._link_default_conf()
            self._start_munged(deadline)
            self._phase("munged", t0)
            if self.accounting:
                self._start_mysqld(deadline)
                self._phase("mariadbd", t0)
                self._start_slurmdbd(deadline)
                self._register_associations()
                self._phase("slurmdbd", t0)
            self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf_path)])
            # The slurmd start only once slurmctld answers: then each registers at its first try.
            self._wait_for("slurmctld", self._ctld_answers, deadline, "slurmctld")
            self._phase("slurmctld", t0)
            for i, node in enumerate(self.all_nodes, start=1):
                self._spawn(f"slurmd-{i}", ["slurmd", "-D", "-f", str(self.conf_path), "-N", node])
            self._wait_nodes_ready(deadline)
            self._phase("nodes", t0)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Cancel leftover jobs, then stop only the daemons this workdir's cluster started. Idempotent."""
        if self.external:
            return
        recorded = self._read_state().get("procs", {})
        if not recorded and not self._procs:
            return
        if self._alive(recorded.get("slurmctld")):
            self._cancel_all_jobs()
        for phase in _STOP_PHASES:
            live = {name: recorded[name] for name in phase if self._alive(recorded.get(name))}
            for name in phase:  # started by this object but missing from the state file
                proc = self._procs.get(name)
                if name not in live and proc is not None and proc.poll() is None:
                    live[name] = [proc.pid, _proc_start_time(proc.pid)]
            for pid, _start in live.values():
                os.kill(pid, signal.SIGTERM)
            self._wait_dead(live, 15)
            for name in phase:
                if name in self._procs:
                    self._procs.pop(name).wait(timeout=5)  # reap our own children
            if "slurmctld" in phase:
                self._kill_job_leftovers()
        self.state_file.unlink(missing_ok=True)
        self._unlink_default_conf()

    # snakemake-executor-plugin-slurm's job step removes SLURM_CONF (with every SLURM_* variable) before its
    # srun, so jobs only work when the config is where clients look without it: the default path, as on real
    # clusters. The link exists while the cluster runs and only if no other config is there.
    DEFAULT_CONF = Path("/etc/slurm/slurm.conf")

    def _link_default_conf(self) -> None:
        link = self.DEFAULT_CONF
        if link.is_symlink() and Path(os.readlink(link)) == self.conf_path:
            return
        if link.exists() or link.is_symlink():
            raise SlurmClusterError(
                f"{link} belongs to another cluster: jobs started by the Snakemake plugin would use it; "
                "run the tests against that cluster with PTFLOW_SLURM_EXISTING=1 or move it away"
            )
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(self.conf_path)

    def _unlink_default_conf(self) -> None:
        link = self.DEFAULT_CONF
        if link.is_symlink() and Path(os.readlink(link)) == self.conf_path:
            link.unlink()

    def is_running(self) -> bool:
        procs = self._read_state().get("procs", {})
        return bool(procs) and all(self._alive(v) for v in procs.values())

    def logs_tail(self, lines: int = 25) -> str:
        logs = sorted((self.workdir / "log").glob("*.log"))
        return "\n".join(f"--- {p.name}\n{_tail(p, lines)}" for p in logs)

    # ---------------------------------------------------------------- installation
    def ensure_installed(self) -> None:
        """apt-get install the Debian packages if any daemon is missing (one `apt-get update` retry)."""
        if all(shutil.which(b) for b in REQUIRED_BINARIES):
            return
        if not self.install:
            raise SlurmClusterError(f"Slurm packages missing (install=False): need {' '.join(APT_PACKAGES)}")
        try:
            apt.install(list(APT_PACKAGES), needed=list(REQUIRED_BINARIES))
        except apt.AptError as exc:
            raise SlurmClusterError(str(exc)) from None

    # ---------------------------------------------------------------- internals: processes
    def _read_state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _record(self, name: str, pid: int) -> None:
        state = self._read_state()
        state.setdefault("procs", {})[name] = [pid, _proc_start_time(pid)]
        state.update(workdir=str(self.workdir), accounting=self.accounting, conf=str(self.conf_path))
        self.state_file.write_text(json.dumps(state, indent=1))

    @staticmethod
    def _alive(entry: list | None) -> bool:
        if not entry:
            return False
        pid, start = entry
        return start is not None and _proc_start_time(pid) == start

    def _wait_dead(self, procs: dict[str, list], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(self._alive(e) for e in procs.values()):
                return
            time.sleep(0.1)
        for entry in procs.values():
            if self._alive(entry):
                os.kill(entry[0], signal.SIGKILL)

    def _kill_job_leftovers(self) -> None:
        """SIGKILL processes of this cluster's jobs that outlived their job.

        proctrack/linuxproc finds a job's processes through their parents, so a child forked while a
        cancel kills its shell is reparented to init and escapes; it still carries the job's environment.
        """
        marker = f"SLURM_CONF={self.conf_path}".encode()
        spare = {os.getpid(), *_ancestors()}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) in spare:
                continue
            try:
                environ = (proc / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in environ and any(v.startswith(b"SLURM_JOB_ID=") for v in environ):
                try:
                    os.kill(int(proc.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        out = open(self.workdir / "log" / f"{name}.out", "ab")  # noqa: SIM115 - handed to the child
        # A new session so the daemons outlive `python -m ... up` and its terminal.
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,
            cwd=self.workdir,
        )
        out.close()
        self._procs[name] = proc
        self._argv[name] = argv
        self._record(name, proc.pid)
        return proc

    def _log_of(self, proc_name: str) -> Path:
        if proc_name.startswith("slurmd-"):  # slurmd-<i>: its log is named after its node (SlurmdLogFile's %n)
            return self.workdir / "log" / f"slurmd-{self.all_nodes[int(proc_name.split('-')[1]) - 1]}.log"
        return self.workdir / "log" / f"{proc_name}.log"

    def _daemon_report(self, proc_name: str, lines: int = 30) -> str:
        """The daemon's process fact and the tail of its log (and of its stdout/stderr, where it wrote any)."""
        proc = self._procs.get(proc_name)
        alive = "not started" if proc is None else "running" if proc.poll() is None else f"exited {proc.returncode}"
        log, out = self._log_of(proc_name), self.workdir / "log" / f"{proc_name}.out"
        text = f"{proc_name} ({alive}); log {log}:\n{_tail(log, lines)}"
        if out.is_file() and out.stat().st_size:
            text += f"\n{out}:\n{_tail(out, 10)}"
        return text

    def _wait_for(self, what: str, check, deadline: float, proc_name: str) -> None:
        """Poll ``check`` until it holds; fail at once if the daemon exited, else at ``deadline``. A check that
        times out is a daemon not ready yet."""
        t0 = time.monotonic()
        while True:
            try:
                if check():
                    return
            except subprocess.TimeoutExpired:
                pass
            if self._procs[proc_name].poll() is not None or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        raise SlurmClusterError(
            f"{what} did not come up in {time.monotonic() - t0:.0f} s: {self._daemon_report(proc_name)}"
        )

    def _check_ports_free(self) -> None:
        ports = [
            ("127.0.0.1", self.ctld_port),
            *zip(self._node_addrs.values(), self._node_ports.values(), strict=True),
        ]
        if self.accounting:
            ports += [("127.0.0.1", self.dbd_port), ("127.0.0.1", self.mysql_port)]
        for addr, port in ports:
            with socket.socket() as s:
                if s.connect_ex((addr, port)) == 0:
                    raise SlurmClusterError(
                        f"{addr}:{port} is already in use (another Slurm/MariaDB?); pass another port_base"
                    )

    # ---------------------------------------------------------------- internals: config and daemons
    def _prepare_workdir(self) -> None:
        for sub in ("state", "spool", "log", "run", "munge", "mysql", "gpu"):
            shutil.rmtree(self.workdir / sub, ignore_errors=True)
        for sub in ("etc", "state", "spool", "log", "run", "munge", "gpu"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        # munged refuses sockets in group/other-writable dirs.
        for d in (self.workdir, self.workdir / "munge"):
            d.chmod(0o755)
        for node in self.all_nodes:
            (self.workdir / "spool" / node).mkdir()
            (self.workdir / "gpu" / node).mkdir()
            for i in range(self.node_spec.gpus):
                _make_fake_gpu(self.workdir / "gpu" / node / f"nvidia{i}")
        etc = self.workdir / "etc"
        (etc / "slurm.conf").write_text(self._slurm_conf())
        (etc / "gres.conf").write_text(self._gres_conf())
        self._db_password = secrets.token_hex(12)
        dbd = etc / "slurmdbd.conf"
        dbd.unlink(missing_ok=True)
        # slurmdbd insists on mode 600 since the file holds the DB password.
        fd = os.open(dbd, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self._slurmdbd_conf())

    @property
    def _munge_socket(self) -> Path:
        return self.workdir / "munge" / "munge.socket"

    def _slurm_conf(self) -> str:
        w = self.workdir
        s = self.node_spec
        host = self.hostnames[0]
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self._munge_socket}",
            f"StateSaveLocation={w}/state",
            f"SlurmdSpoolDir={w}/spool/%n",
            f"SlurmctldPidFile={w}/run/slurmctld.pid",
            f"SlurmdPidFile={w}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={w}/log/slurmctld.log",
            f"SlurmdLogFile={w}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "GresTypes=gpu",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "JobRequeue=1",
            # Finished jobs stay visible to squeue/scontrol for 10 minutes.
            "MinJobAge=600",
            # Without it a job without --mem gets a whole node's memory and jobs cannot share a node.
            "DefMemPerCPU=1024",
            # Quick scancel/timeouts: a job gets SIGKILL 5 s after SIGTERM.
            "KillWait=5",
            "InactiveLimit=0",
            # Start batch jobs at submission instead of up to 3 s later (keeps the tests quick).
            "SchedulerParameters=batch_sched_delay=0",
            "JobAcctGatherType=jobacct_gather/linux",
            "JobAcctGatherFrequency=30",
        ]
        if self.accounting:
            lines += [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=127.0.0.1",
                f"AccountingStoragePort={self.dbd_port}",
                # slurmctld<->slurmdbd use this munge socket, not AuthInfo's.
                f"AccountingStoragePass={self._munge_socket}",
                "AccountingStorageEnforce=associations,limits",
                "AccountingStorageTRES=gres/gpu",
            ]
        else:
            lines.append("AccountingStorageType=accounting_storage/none")
        for name, addr in self._node_addrs.items():
            hostname = "" if name == host else f" NodeHostname={host}"
            lines.append(
                f"NodeName={name}{hostname} NodeAddr={addr} Port={self._node_ports[name]} CPUs={s.cpus}"
                f" RealMemory={s.real_memory_mb} TmpDisk={s.tmp_disk_mb} Gres={s.gres} State=UNKNOWN"
            )
        for p in self.partitions.values():
            default = " Default=YES" if p.default else ""
            nodes = ",".join(self.partition_nodes(p.name))
            lines.append(f"PartitionName={p.name} Nodes={nodes} MaxTime={p.max_time_min}{default} State=UP")
        return "\n".join(lines) + "\n"

    def _gres_conf(self) -> str:
        s = self.node_spec
        # File= placeholders are required: a node with typed GPUs but no files registers INVALID.
        files = f"nvidia[0-{s.gpus - 1}]"
        return "".join(
            f"NodeName={node} Name=gpu Type={s.gpu_type} File={self.workdir}/gpu/{node}/{files}\n"
            for node in self.all_nodes
        )

    def _slurmdbd_conf(self) -> str:
        w = self.workdir
        return (
            "\n".join(
                [
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={self._munge_socket}",
                    "DbdHost=localhost",
                    "DbdAddr=127.0.0.1",
                    f"DbdPort={self.dbd_port}",
                    "SlurmUser=root",
                    f"LogFile={w}/log/slurmdbd.log",
                    f"PidFile={w}/run/slurmdbd.pid",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",
                    f"StoragePort={self.mysql_port}",
                    f"StorageUser={DB_USER}",
                    f"StoragePass={self._db_password}",
                    f"StorageLoc={DB_NAME}",
                ]
            )
            + "\n"
        )

    def _start_munged(self, deadline: float) -> None:
        key = self.workdir / "munge" / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
        d = self.workdir / "munge"
        log = self.workdir / "log" / "munged.log"
        self._spawn(
            "munged",
            [
                "munged",
                "-F",
                "--force",
                f"--socket={self._munge_socket}",
                f"--key-file={key}",
                f"--pid-file={d}/munged.pid",
                f"--seed-file={d}/munged.seed",
                f"--log-file={log}",
            ],
        )
        probe = ["munge", "-n", "-S", str(self._munge_socket)]
        self._wait_for(
            "munged", lambda: subprocess.run(probe, capture_output=True, timeout=10).returncode == 0, deadline, "munged"
        )

    def _mysql(self, sql: str) -> subprocess.CompletedProcess[str]:
        sock = self.workdir / "run" / "mysqld.sock"
        return subprocess.run(
            ["mariadb", "--no-defaults", f"--socket={sock}", "-uroot", "-e", sql],
            capture_output=True,
            text=True,
            timeout=30,
        )

    def _start_mysqld(self, deadline: float) -> None:
        datadir = self.workdir / "mysql"
        log = self.workdir / "log" / "mysqld.log"
        init = subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            capture_output=True,
            text=True,
        )
        if init.returncode != 0:
            raise SlurmClusterError(f"mariadb-install-db failed: {init.stdout[-1000:]}{init.stderr[-1000:]}")
        self._spawn(
            "mysqld",
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                f"--socket={self.workdir}/run/mysqld.sock",
                f"--pid-file={self.workdir}/run/mysqld.pid",
                f"--port={self.mysql_port}",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                f"--log-error={log}",
                "--innodb-buffer-pool-size=128M",
                "--innodb-log-file-size=64M",
                "--innodb-lock-wait-timeout=900",
            ],
        )
        self._wait_for("mariadbd", lambda: self._mysql("SELECT 1").returncode == 0, deadline, "mysqld")
        pw = self._db_password
        grant = self._mysql(
            f"CREATE USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{pw}';"
            f" GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1';"
        )
        if grant.returncode != 0:
            raise SlurmClusterError(f"creating the slurm DB user failed: {grant.stderr}")

    def _start_slurmdbd(self, deadline: float) -> None:
        self._spawn("slurmdbd", ["slurmdbd", "-D"])

        def ready() -> bool:
            return self.run(["sacctmgr", "-n", "-P", "list", "cluster"], timeout=15).returncode == 0

        self._wait_for("slurmdbd", ready, deadline, "slurmdbd")

    def _register_associations(self) -> None:
        c = self.cluster_name
        for cmd in (
            ["sacctmgr", "-i", "add", "cluster", c],
            [
                "sacctmgr",
                "-i",
                "add",
                "account",
                self.account,
                self.other_account,
                f"cluster={c}",
                "description=ptflow test account",
                "organization=ptflow",
            ],
            ["sacctmgr", "-i", "add", "user", "root", f"account={self.account}", f"cluster={c}"],
            ["sacctmgr", "-i", "modify", "user", "root", "set", f"defaultaccount={self.account}"],
        ):
            self.run(cmd, check=True)

    def _phase(self, name: str, t0: float) -> None:
        self.start_phases[name] = round(time.monotonic() - t0, 1)

    def _ctld_answers(self) -> bool:
        return self.run(["scontrol", "ping"], timeout=15).returncode == 0

    def node_states(self) -> dict[str, NodeState]:
        """Every node as slurmctld reports it now; empty if it does not answer."""
        try:
            proc = self.run(["scontrol", "show", "node", "-o"], timeout=15)
        except subprocess.TimeoutExpired:
            return {}
        return parse_nodes(proc.stdout) if proc.returncode == 0 else {}

    def _wait_nodes_ready(self, deadline: float) -> None:
        """Until slurmctld reports every node IDLE. A daemon that exits fails it at once; a node not ready
        REREGISTER_AFTER seconds after its slurmd started gets that slurmd restarted, once."""
        slurmds = {node: f"slurmd-{i}" for i, node in enumerate(self.all_nodes, start=1)}
        started = dict.fromkeys(slurmds, time.monotonic())
        while True:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise SlurmClusterError(f"{name} exited during start-up: {self._daemon_report(name)}")
            states = self.node_states()
            waiting = [n for n in slurmds if not (n in states and states[n].ready)]
            if not waiting:
                return
            now = time.monotonic()
            if now >= deadline:
                raise SlurmClusterError(self._nodes_not_ready(waiting, states))
            for node in waiting:
                if node not in self.slurmd_restarts and now - started[node] >= REREGISTER_AFTER:
                    self._restart(slurmds[node])
                    self.slurmd_restarts.append(node)
            time.sleep(0.25)

    def _nodes_not_ready(self, waiting: list[str], states: dict[str, NodeState]) -> str:
        ctld = "answers" if self._ctld_answers() else "does not answer"
        lines = [f"nodes not ready in time: slurmctld {ctld}"]
        for i, node in enumerate(self.all_nodes, start=1):
            if node in waiting:
                said = states[node].describe() if node in states else "not reported by slurmctld"
                again = " (its slurmd was restarted once)" if node in self.slurmd_restarts else ""
                lines.append(f"node {node}: {said}{again}; {self._daemon_report(f'slurmd-{i}', 15)}")
        lines.append(self._daemon_report("slurmctld", 20))
        return "\n".join(lines)

    def _restart(self, name: str) -> None:
        """Stop one daemon this object started (SIGTERM, then SIGKILL) and start it again with the same arguments."""
        proc = self._procs[name]
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        self._spawn(name, self._argv[name])

    # ---------------------------------------------------------------- a maintenance restart, for tests
    def stop_controller(self) -> None:
        """Stop slurmctld (SIGTERM: it saves its state, as in a maintenance restart); jobs and slurmd stay."""
        entry = self._read_state().get("procs", {}).get("slurmctld")
        if not self._alive(entry):
            raise SlurmClusterError("slurmctld is not running (or was not started by this cluster object's workdir)")
        os.kill(entry[0], signal.SIGTERM)
        self._wait_dead({"slurmctld": entry}, 30)
        proc = self._procs.pop("slurmctld", None)
        if proc is not None:
            proc.wait(timeout=5)

    def start_controller(self, timeout: float = 60) -> None:
        """Start slurmctld again on its saved state (-R would forget the queue: not used); wait until it answers."""
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf_path)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.run(["scontrol", "ping"], timeout=15).returncode == 0:
                return
            time.sleep(0.5)
        raise SlurmClusterError(f"slurmctld did not answer within {timeout:.0f} s\n{self.logs_tail()}")

    def _cancel_all_jobs(self) -> None:
        jobs = self.run(["squeue", "-h", "-o", "%i"], timeout=15).stdout.split()
        if jobs:
            self.run(["scancel", *jobs], timeout=15)
        # Let slurmstepd/job processes exit before their slurmd goes away.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            out = self.run(["squeue", "-h", "-t", "RUNNING,COMPLETING,CONFIGURING", "-o", "%i"], timeout=15)
            if out.returncode != 0 or not out.stdout.strip():
                return
            time.sleep(0.25)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.local_slurm", description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["up", "down", "status"])
    ap.add_argument("--workdir", default=str(DEFAULT_WORKDIR))
    ap.add_argument("--no-accounting", action="store_true", help="no slurmdbd/MariaDB (sacct disabled)")
    ap.add_argument(
        "--timeout", type=float, default=None, help=f"start's bound in seconds (default ${START_TIMEOUT_ENV} or 300)"
    )
    args = ap.parse_args(argv)
    cluster = LocalSlurmCluster(args.workdir, accounting=not args.no_accounting)
    state = cluster._read_state()
    if args.action == "up":
        try:
            cluster.start(args.timeout)
        except SlurmClusterError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(
            f"# cluster {cluster.cluster_name} up in {cluster.startup_seconds:.1f}s; nodes "
            f"{' '.join(cluster.hostnames)}; accounting={cluster.accounting}",
            file=sys.stderr,
        )
        for k, v in cluster.env.items():
            print(f"export {k}={v}")
        return 0
    if args.action == "down":
        cluster.stop()
        print("stopped", file=sys.stderr)
        return 0
    running = cluster.is_running()
    print(f"running={running} workdir={cluster.workdir}")
    for name, (pid, _start) in state.get("procs", {}).items():
        print(f"  {name}: pid {pid} alive={cluster._alive(state['procs'][name])}")
    if running:
        print(cluster.run(["sinfo", "-N", "-o", "%N %P %t %c %m %G"]).stdout, end="")
        print(f"export SLURM_CONF={cluster.conf_path}")
    return 0 if running else 3


if __name__ == "__main__":
    sys.exit(main())
