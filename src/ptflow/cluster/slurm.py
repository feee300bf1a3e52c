"""Slurm's query, submit and cancel commands for ptflow's own code: scontrol, sacctmgr, squeue, sacct, sbatch, scancel.

Each function builds an argv list, runs it (a missing command, a timeout or a non-zero exit is a
:class:`SlurmUnavailable`, except for :func:`test_only`, which returns Slurm's answer) and returns parsed data.
Status, cancel, doctor, preflight, the driver's start, the report's GPU-hours, supervised training and SkyRL's
server job go through here. Other modules that deal with Slurm commands themselves:

- ``cluster.limits`` builds its own ``scontrol show config`` and ``sacctmgr`` argv and runs them with :func:`_run`;
- ``cluster.patience`` runs the real ``sbatch``, ``squeue``, ``sacct``, ``scontrol`` and ``srun`` behind its shims,
  and ``scontrol ping``, ``squeue`` and ``sbatch --test-only`` to decide whether to wait;
- ``srun`` argv are built in ``cluster.runtime`` (the pyxis and EDF prefix of a job's command), ``cluster.multinode``
  (one step per node, which it starts) and ``launch.ray`` (head, worker and driver steps in the rendered launcher,
  and :func:`~ptflow.launch.ray.run_step`); ``ops.interactive`` builds and runs ``salloc``.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field

LOG = logging.getLogger("ptflow.cluster.slurm")


class SlurmUnavailable(RuntimeError):
    """Slurm's client commands are missing or the controller does not answer."""


def _run(argv: list[str], timeout: float = 30) -> str:
    if shutil.which(argv[0]) is None:
        raise SlurmUnavailable(f"{argv[0]} not found: this is not a Slurm login node (or Slurm is not on PATH)")
    LOG.debug("run: %s", argv)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(f"{' '.join(argv)} did not answer within {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise SlurmUnavailable(f"{' '.join(argv)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _fields(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value two`` (scontrol -o) into a dict; values may contain spaces only at the end."""
    out = {}
    for m in re.finditer(r"(\w[\w:/]*)=(.*?)(?=\s+\w[\w:/]*=|$)", line.strip()):
        out[m.group(1)] = m.group(2)
    return out


def parse_minutes(value: str) -> int | None:
    """Slurm time (``UNLIMITED``, ``MM``, ``HH:MM:SS``, ``D-HH:MM:SS``, ``D-HH``) in minutes; None = unlimited."""
    if value in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    days = 0
    if "-" in value:
        d, value = value.split("-", 1)
        days = int(d)
        parts = [int(x) for x in value.split(":")]
        parts += [0] * (3 - len(parts))
        h, m, s = parts
    else:
        parts = [int(x) for x in value.split(":")]
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0
        elif len(parts) == 2:
            h, m, s = 0, parts[0], parts[1]
        else:
            h, m, s = parts
    return days * 1440 + h * 60 + m + (1 if s else 0)


def gpus_in_gres(gres: str) -> int:
    """GPU count of a node's Gres string such as ``gpu:h100:4(S:0-1),shard:8``."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts and parts[0] == "gpu":
            last = parts[-1]
            total += int(last) if last.isdigit() else 1
    return total


def memory_mb(value: str) -> int | None:
    """Slurm memory such as ``4000M``, ``128G`` or ``1T`` in MB (None when empty or without a unit)."""
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    if not value or value[-1] not in units:
        return None
    return round(float(value[:-1]) * units[value[-1]])


def recorded_request(fields: dict[str, str]) -> dict:
    """What slurmctld recorded a job as asking for, from ``scontrol show job -o`` fields: partition, account, CPUs
    and GPUs of the whole job, nodes, memory per node (MB) and time limit (minutes), the figures ``ptflow plan``
    plans (``ptflow.ops.plan_jobs.JobRequest``). TresPerNode is ``gres:gpu:...`` on Slurm 22 and ``gres/gpu:...``
    later."""
    nodes = int(fields["NumNodes"].split("-")[0])
    per_node = ",".join(t.removeprefix("gres:").removeprefix("gres/") for t in fields.get("TresPerNode", "").split(","))
    return {
        "partition": fields["Partition"],
        "account": fields.get("Account") or "(default)",
        "cpus": int(fields["NumCPUs"]),
        "gpus": gpus_in_gres(per_node) * nodes,
        "nodes": nodes,
        "mem_mb": memory_mb(fields.get("MinMemoryNode", "")),
        "runtime": parse_minutes(fields["TimeLimit"]),
    }


@dataclass
class PartitionInfo:
    name: str
    max_runtime: int | None  # minutes; None = unlimited
    nodes: list[str] = field(default_factory=list)
    max_gpus_per_node: int = 0
    state: str = "UP"
    features: frozenset[str] = frozenset()  # AvailableFeatures of its nodes (sbatch --constraint names these)


@dataclass
class ClusterInfo:
    partitions: dict[str, PartitionInfo]
    accounts: set[str] | None  # None: no accounting, nothing to check
    user: str
    accounting: str = ""  # AccountingStorageType, e.g. accounting_storage/slurmdbd or accounting_storage/none


# ---- the cluster's configuration: facts are read from it, never from the wording of an error message ----

ACCOUNTING_NONE = "accounting_storage/none"


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config`` as a dict (``Key = value`` lines; the header and trailing status lines skipped)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def read_config() -> dict[str, str]:
    return parse_config(_run(["scontrol", "show", "config"]))


def accounting_enabled(config: dict[str, str]) -> bool:
    """Whether the cluster keeps accounting (sacct, sacctmgr): AccountingStorageType is not ``.../none``. Slurm
    22.05 and later leave the key empty or ``(null)`` when accounting is off, older versions say ``none``."""
    value = config.get("AccountingStorageType", "").strip()
    return value not in ("", "(null)", ACCOUNTING_NONE)


def hostnames(nodelist: str) -> list[str]:
    return _run(["scontrol", "show", "hostnames", nodelist]).split()


def _features(value: str | None) -> set[str]:
    return {f for f in (value or "").split(",") if f and f != "(null)"}


def read_cluster(user: str, config: dict[str, str] | None = None) -> ClusterInfo:
    """Partitions with MaxTime, the GPUs and features of their nodes, and the user's accounts (when the cluster keeps
    accounting: ``scontrol show config`` says so)."""
    config = read_config() if config is None else config
    node_gpus, node_features = {}, {}
    for line in _run(["scontrol", "show", "node", "-o"]).splitlines():
        f = _fields(line)
        if "NodeName" in f:
            node_gpus[f["NodeName"]] = gpus_in_gres(f.get("Gres", ""))
            node_features[f["NodeName"]] = _features(f.get("AvailableFeatures"))
    parts = {}
    for line in _run(["scontrol", "show", "partition", "-o"]).splitlines():
        f = _fields(line)
        if "PartitionName" not in f:
            continue
        nodes = hostnames(f["Nodes"]) if f.get("Nodes") not in (None, "", "(null)") else []
        parts[f["PartitionName"]] = PartitionInfo(
            f["PartitionName"],
            parse_minutes(f.get("MaxTime", "UNLIMITED")),
            nodes,
            max((node_gpus.get(n, 0) for n in nodes), default=0),
            f.get("State", "UP"),
            frozenset().union(*(node_features.get(n, set()) for n in nodes)),
        )
    return ClusterInfo(parts, user_accounts(user, config), user, config.get("AccountingStorageType", ""))


def user_accounts(user: str, config: dict[str, str] | None = None) -> set[str] | None:
    """The user's accounts from sacctmgr, or None where the cluster keeps no accounting (nothing to check)."""
    config = read_config() if config is None else config
    if not accounting_enabled(config):
        return None
    out = _run(["sacctmgr", "-nP", "show", "assoc", f"user={user}", "format=account"])
    return {line.strip() for line in out.splitlines() if line.strip()}


def user_associations(user: str, config: dict[str, str] | None = None) -> list[dict[str, str]] | None:
    """(account, partition, qos) of each of the user's associations; None without accounting."""
    config = read_config() if config is None else config
    if not accounting_enabled(config):
        return None
    out = _run(["sacctmgr", "-nP", "show", "assoc", f"user={user}", "format=account,partition,qos"])
    rows = []
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            rows.append(dict(zip(("account", "partition", "qos"), parts, strict=True)))
    return rows


def has_sacct(config: dict[str, str] | None = None) -> bool:
    """sacct can answer: it is installed and the cluster keeps accounting."""
    if shutil.which("sacct") is None:
        return False
    return accounting_enabled(read_config() if config is None else config)


def partition_nodes(partition: str) -> list[str]:
    """The nodes of a partition, as Slurm lists them."""
    for line in _run(["scontrol", "show", "partition", "-o", partition]).splitlines():
        f = _fields(line)
        if f.get("PartitionName") == partition and f.get("Nodes") not in (None, "", "(null)"):
            return hostnames(f["Nodes"])
    return []


def job_nodelist(job_id: str) -> str:
    """The node list of a running job, read back from Slurm (the plugin's job step strips SLURM_JOB_NODELIST)."""
    out = _run(["squeue", "-j", str(job_id), "-h", "-o", "%N"]).strip()
    if not out:
        raise SlurmUnavailable(f"squeue shows no node list for job {job_id}: is it running?")
    return out


# ---- jobs of a run (ptflow status / cancel): one squeue and one sacct call per refresh, never one per job ----

# squeue -o fields, in order; `|` never occurs in job names (run UUIDs), comments (rule_<rule>_wildcards_...) or nodes.
_SQUEUE_FIELDS = ("id", "name", "state", "reason", "nodes", "elapsed", "comment", "partition")
_SQUEUE_FORMAT = "%i|%j|%T|%r|%N|%M|%k|%P"
_SACCT_FIELDS = ("id", "name", "state", "exit_code", "reason", "nodes", "elapsed", "partition", "submit")
_SACCT_FORMAT = "JobID,JobName,State,ExitCode,Reason,NodeList,Elapsed,Partition,Submit"


@dataclass
class JobRecord:
    """One Slurm job as squeue and/or sacct report it (squeue's live view wins for state, sacct adds exit code)."""

    id: str
    name: str = ""
    state: str = ""
    reason: str = ""
    nodes: str = ""
    elapsed: str = ""
    comment: str = ""
    partition: str = ""
    exit_code: str = ""
    submit: str = ""
    sources: tuple[str, ...] = ()

    @property
    def base_state(self) -> str:
        """``CANCELLED by 0`` -> ``CANCELLED``."""
        return self.state.split()[0] if self.state else ""


def squeue_argv(names: list[str]) -> list[str]:
    # -t all: finished jobs too, while slurmctld still holds them (MinJobAge); -a: hidden partitions too.
    return ["squeue", "-h", "-a", "-t", "all", f"--name={','.join(names)}", "-o", _SQUEUE_FORMAT]


def sacct_argv(names: list[str], since: str) -> list[str]:
    # -X: allocations only (no .batch/.extern steps). --name needs -S, else sacct only looks at today.
    return ["sacct", "-X", "-n", "-P", f"--name={','.join(names)}", "-S", since, "-o", _SACCT_FORMAT]


def parse_squeue(text: str) -> list[JobRecord]:
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != len(_SQUEUE_FIELDS):
            continue
        rec = dict(zip(_SQUEUE_FIELDS, parts, strict=True))
        if rec["reason"] == "None":
            rec["reason"] = ""
        jobs.append(JobRecord(**rec, sources=("squeue",)))
    return jobs


def parse_sacct(text: str) -> list[JobRecord]:
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != len(_SACCT_FIELDS) or "." in parts[0]:
            continue
        rec = dict(zip(_SACCT_FIELDS, parts, strict=True))
        if rec["reason"] == "None":
            rec["reason"] = ""
        if rec["nodes"] == "None assigned":
            rec["nodes"] = ""
        jobs.append(JobRecord(**rec, sources=("sacct",)))
    return jobs


def merge_records(squeue: list[JobRecord], sacct: list[JobRecord]) -> dict[str, JobRecord]:
    """By job id: sacct's record (exit code, history beyond MinJobAge) overlaid with squeue's live state and comment."""
    out = {j.id: j for j in sacct}
    for q in squeue:
        a = out.get(q.id)
        if a is None:
            out[q.id] = q
            continue
        out[q.id] = JobRecord(
            id=q.id,
            name=q.name or a.name,
            state=q.state or a.state,
            reason=q.reason or a.reason,
            nodes=q.nodes or a.nodes,
            elapsed=q.elapsed or a.elapsed,
            comment=q.comment or a.comment,  # sacct has comments only with AccountingStoreFlags=job_comment
            partition=q.partition or a.partition,
            exit_code=a.exit_code,
            submit=a.submit,
            sources=("squeue", "sacct"),
        )
    return out


def run_jobs(names: list[str], since: str = "now-7days", accounting: bool | None = None) -> dict[str, JobRecord]:
    """Every job whose name is one of ``names`` (the plugin's run UUIDs): one squeue call plus one sacct call.

    sacct is asked only where the cluster keeps accounting (``scontrol show config``; ``accounting`` given by a
    caller that knows already): elsewhere only what slurmctld still holds (squeue, MinJobAge) is known.
    """
    if not names:
        return {}
    queued = parse_squeue(_run(squeue_argv(names)))
    use_sacct = has_sacct() if accounting is None else accounting
    accounted = parse_sacct(_run(sacct_argv(names, since))) if use_sacct else []
    return merge_records(queued, accounted)


def job_gpu_seconds(job_ids: list[str]) -> dict[str, float]:
    """GPU-seconds each job used (elapsed x allocated GPUs) from Slurm's accounting, in one ``sacct`` call; jobs
    sacct does not know are absent. SlurmUnavailable where there is no sacct or no accounting storage."""
    if not job_ids:
        return {}
    out = _run(["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", "JobID,ElapsedRaw,AllocTRES"], timeout=60)
    usage = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        tres = dict(item.split("=", 1) for item in parts[2].split(",") if "=" in item)
        usage[parts[0]] = int(parts[1]) * int(tres.get("gres/gpu", "0") or 0)
    return usage


def scancel_argv(job_ids: list[str]) -> list[str]:
    return ["scancel", *job_ids]


def cancel(job_ids: list[str]) -> None:
    """``scancel`` the given jobs in one call. Jobs that ended meanwhile are no error: when scancel fails, squeue
    says which of them are still live (scancel's message text is not read)."""
    if not job_ids:
        return
    argv = scancel_argv(job_ids)
    LOG.info("run: %s", argv)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60) if shutil.which(argv[0]) else None
    if proc is None:
        raise SlurmUnavailable("scancel not found: this is not a Slurm login node (or Slurm is not on PATH)")
    if proc.returncode != 0:
        # --me, not --jobs: squeue refuses a list holding a job slurmctld has forgotten already
        out = _run(["squeue", "-h", "-a", "-t", "all", "--me", "-o", _SQUEUE_FORMAT])
        live = [r.id for r in parse_squeue(out) if r.id in job_ids and r.base_state not in TERMINAL_STATES]
        if live:
            raise SlurmUnavailable(
                f"{' '.join(argv)} failed and jobs {', '.join(live)} are still live: {proc.stderr.strip()}"
            )


@dataclass
class NodeAddress:
    name: str
    addr: str  # NodeAddr: the address other nodes reach this one at
    host: str  # NodeHostname: the machine it runs on (several Slurm nodes may share one, as on the test cluster)


def node_addresses(nodes: list[str]) -> dict[str, NodeAddress]:
    """NodeAddr and NodeHostname of each node, from ``scontrol show node`` (in the order given)."""
    found = {}
    for line in _run(["scontrol", "show", "node", "-o", ",".join(nodes)]).splitlines():
        f = _fields(line)
        if "NodeName" in f:
            name = f["NodeName"]
            found[name] = NodeAddress(name, f.get("NodeAddr") or name, f.get("NodeHostName") or name)
    missing = [n for n in nodes if n not in found]
    if missing:
        raise SlurmUnavailable(f"scontrol show node knows no node {', '.join(missing)}: is the node list right?")
    return {n: found[n] for n in nodes}


def job_fields(job_id: str) -> dict[str, str]:
    """``scontrol show job -o`` of one job as a dict (Restarts, EndTime, NodeList, ...)."""
    out = _run(["scontrol", "show", "job", "-o", str(job_id)]).strip()
    if not out:
        raise SlurmUnavailable(f"scontrol show job {job_id} printed nothing: is the job still known?")
    return _fields(out.splitlines()[0])


def job_end_time(job_id: str) -> float | None:
    """A running job's end (epoch seconds) from ``scontrol show job``'s EndTime, which moves when a requeued job
    restarts; None without a time limit ("Unknown")."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(job_fields(job_id).get("EndTime", "")).timestamp()
    except ValueError:
        return None


def job_restart_count(job_id: str) -> int:
    """How often the job was requeued (SLURM_RESTART_COUNT, which the plugin's job step strips)."""
    return int(job_fields(job_id).get("Restarts", "0") or 0)


def job_per_node(job_id: str) -> tuple[int, int, int]:
    """(nodes, CPUs per node, GPUs per node) a running job was given, from its allocated TRES."""
    f = job_fields(job_id)
    tres = dict(item.split("=", 1) for item in f.get("AllocTRES", f.get("TRES", "")).split(",") if "=" in item)
    nodes = int(tres.get("node") or f.get("NumNodes", "1").split("-")[0])
    cpus = int(tres.get("cpu") or f.get("NumCPUs", "1"))
    gpus = int(tres.get("gres/gpu", "0"))  # the total; typed entries (gres/gpu:h100) repeat it
    return nodes, max(cpus // nodes, 1), gpus // nodes


# ---- batch submission and single-job state (the SkyRL server, pyxis resubmission loop) ----

TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)


def sbatch_argv(script: str, *, options: list[str]) -> list[str]:
    """``sbatch --parsable <options> <script>``; options are already ``--key=value`` strings (no secrets)."""
    return ["sbatch", "--parsable", *options, str(script)]


def test_only(args: list[str], env: dict[str, str] | None = None) -> tuple[bool, str]:
    """``sbatch --test-only ARGS``: whether Slurm would accept and could schedule the job (its exit status), and
    what it said (where and when it would start, or why not). Nothing is submitted."""
    if shutil.which("sbatch") is None:
        return False, "sbatch not found: this is not a Slurm login node (or Slurm is not on PATH)"
    argv = ["sbatch", "--test-only", *args]
    LOG.info("run: %s", argv)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    return proc.returncode == 0, (proc.stderr.strip() or proc.stdout.strip())


def submit(argv: list[str], env: dict[str, str] | None = None) -> str:
    """Run an sbatch argv from :func:`sbatch_argv`; the job id. ``env`` is the environment sbatch exports."""
    if shutil.which(argv[0]) is None:
        raise SlurmUnavailable(f"{argv[0]} not found: this is not a Slurm login node (or Slurm is not on PATH)")
    LOG.info("run: %s", argv)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    if proc.returncode != 0:
        raise SlurmUnavailable(f"{' '.join(argv)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip().split(";")[0]


def release(job_ids: list[str]) -> None:
    """``scontrol release`` held jobs (submitted with ``--hold``)."""
    if job_ids:
        _run(["scontrol", "release", ",".join(job_ids)])


def job_state(job_id: str) -> JobRecord | None:
    """One job's state: squeue while slurmctld holds it, else sacct (None if neither knows it yet)."""
    jid = str(job_id)
    out = _run(["squeue", "-h", "-a", "-t", "all", "-j", jid, "-o", _SQUEUE_FORMAT], timeout=30)
    recs = [r for r in parse_squeue(out) if r.id == jid]
    acc = []
    if not recs or recs[0].base_state in TERMINAL_STATES:
        # sacct only for what squeue no longer shows as live (exit code, or beyond MinJobAge), where there is one
        if has_sacct():
            acc = [
                r for r in parse_sacct(_run(["sacct", "-X", "-n", "-P", "-j", jid, "-o", _SACCT_FORMAT])) if r.id == jid
            ]
    merged = merge_records(recs, acc)
    return merged.get(jid)


def wait_job(job_id: str, poll: float = 3.0, timeout: float | None = None) -> JobRecord:
    """Block until the job has ended (a terminal state); its record. TimeoutError after ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        rec = job_state(job_id)
        if rec and rec.base_state in TERMINAL_STATES:
            return rec
        if deadline and time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {rec.state if rec else 'unknown'} after {timeout:.0f} s")
        time.sleep(poll)
