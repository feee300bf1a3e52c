"""Where the suite's CPU goes: a pytest plugin for ``bench/suite_cpu.py`` (``-p tests.support.cpu_meter``).

Each worker writes one JSON line per test phase (setup/call/teardown) to ``$PTFLOW_CPU_METER/<worker>.jsonl``: the
phase's wall seconds and the CPU seconds of every process the worker started (local Snakemake runs, their jobs, the
warm-start zygotes that detach from their parent, the agent CLIs). Those are counted by a cgroup-v1 cpuacct group per
worker, which every descendant inherits (``os.times`` — the children a process waited for — where cgroups cannot be
written). The Slurm test cluster's daemons are moved out of the worker that started them into a ``cluster`` group,
so the jobs slurmd forks are not counted as that worker's: the controller asks accounting (``sacct``, every step's
TotalCPU and the job's WorkDir) before the cluster is stopped, and writes ``slurm_jobs.jsonl``; each test's work
directory names its module. ``machine.json``: the machine's busy CPU seconds over the run (``/proc/stat``) and the
cluster group's (daemons and jobs). Nothing here is asserted: the figures are for bench/RESULTS.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

ENV = "PTFLOW_CPU_METER"


def _out_dir() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


CGROUPS = Path("/sys/fs/cgroup/cpuacct/ptflow-meter")
CLUSTER_DAEMONS = {"slurmctld", "slurmd", "slurmdbd", "slurmstepd", "mariadbd", "mysqld", "munged"}


class Group:
    """A cgroup-v1 cpuacct group: its processes' CPU seconds, children included."""

    def __init__(self, name: str):
        self.path = CGROUPS / name
        self.path.mkdir(parents=True, exist_ok=True)

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]

    def usage(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9


_GROUP: Group | None = None


def _join_group(name: str) -> None:
    """This worker (and all it starts from now on) into its own group; a thread hands the cluster's daemons over."""
    global _GROUP
    try:
        group, cluster = Group(name), Group("cluster")
        group.add(os.getpid())
    except OSError:
        return  # no writable cpuacct hierarchy: os.times() instead
    _GROUP = group

    def hand_over() -> None:
        while True:
            try:
                for pid in group.pids():
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                    if comm in CLUSTER_DAEMONS:
                        cluster.add(pid)
            except OSError:
                pass
            time.sleep(0.5)

    threading.Thread(target=hand_over, daemon=True, name="cpu-meter").start()


def _cpu() -> float:
    if _GROUP is not None:
        return _GROUP.usage()
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def busy_cpu_seconds() -> float:
    """All processes' busy CPU seconds since boot (/proc/stat: user+nice+system+irq+softirq+steal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _worker(config: pytest.Config) -> str:
    return getattr(config, "workerinput", {}).get("workerid", "main")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _measure(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _measure(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _measure(item, "teardown")


def _measure(item, phase: str):
    out = _out_dir()
    wall, cpu = time.monotonic(), _cpu()
    yield
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    line = {"nodeid": item.nodeid, "phase": phase, "wall": time.monotonic() - wall, "cpu": _cpu() - cpu}
    with open(out / f"{_worker(item.config)}.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def pytest_sessionstart(session):
    out = _out_dir()
    if out is None:
        return
    worker = _worker(session.config)
    if worker != "main" or session.config.getoption("numprocesses", None) in (None, 0):
        _join_group(f"{os.getpid()}-{worker}")
    if worker == "main":
        out.mkdir(parents=True, exist_ok=True)
        session.config._cpu_meter_start = (
            time.monotonic(), busy_cpu_seconds(), time.strftime("%Y-%m-%dT%H:%M:%S"), _cluster_usage()
        )  # fmt: skip


def _cluster_usage() -> float | None:
    try:
        return Group("cluster").usage()
    except OSError:
        return None


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py stops the Slurm cluster (and its accounting)
def pytest_sessionfinish(session):
    out = _out_dir()
    start = getattr(session.config, "_cpu_meter_start", None)
    if out is None or start is None:
        return
    wall0, busy0, since, cluster0 = start
    machine = {"wall": time.monotonic() - wall0, "busy_cpu": busy_cpu_seconds() - busy0, "cores": os.cpu_count()}
    cluster1 = _cluster_usage()
    if cluster0 is not None and cluster1 is not None:
        machine["cluster_cpu"] = cluster1 - cluster0
    (out / "machine.json").write_text(json.dumps(machine))
    for group in CGROUPS.glob("*-gw*"):  # the workers' groups of earlier runs, once their processes are gone
        try:
            group.rmdir()
        except OSError:
            pass
    # --duplicates: a requeued job's earlier runs too (their CPU was spent as well)
    argv = ["sacct", "-a", "-n", "-P", "--duplicates", "-S", since, "-o", "JobIDRaw,JobName,TotalCPU,WorkDir"]
    try:
        text = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return
    with open(out / "slurm_jobs.jsonl", "w") as f:
        for row in text.splitlines():
            parts = row.split("|")
            if len(parts) == 4:
                jid, name, total, workdir = parts
                f.write(json.dumps({"job": jid, "name": name, "cpu": _slurm_seconds(total), "workdir": workdir}) + "\n")


def _slurm_seconds(text: str) -> float:
    """sacct's [DD-[HH:]]MM:SS[.mmm] as seconds."""
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return (int(days) if days else 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
