"""The Slurm test cluster's start from cold, on a loaded machine (issue 56).

Each run stops the cluster (its workdir, database and state are wiped by the start anyway), starts it with CPU
burners beside it, and records the start's seconds or its error, plus a timeline of every node's State/Reason as
slurmctld reported them once a second (what the start waited on). The daemons' logs of each run are kept under
--keep-logs DIR. If the Slurm packages are missing, their apt install is timed first (burners on), so the first run is
the first start after the install.

    .venv/bin/python bench/cluster_start.py --runs 5 --burners 2 --keep-logs /tmp/cluster-start-logs

Refuses to run while a cluster runs in the workdir (a test session's): it would stop it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.local_slurm import (  # noqa: E402 - after the path
    DEFAULT_WORKDIR,
    LocalSlurmCluster,
    SlurmClusterError,
)

BURN = "while True: pass"
# Disk pressure (a fresh machine's first start has MariaDB initialising beside workers importing torch): 64 MiB
# written and fsynced, again and again.
IO_BURN = """
import os, sys
buf = os.urandom(1 << 20)
while True:
    with open(sys.argv[1], "wb") as f:
        for _ in range(64):
            f.write(buf)
        f.flush()
        os.fsync(f.fileno())
"""


def _burners(n: int, io: int) -> list[subprocess.Popen[bytes]]:
    cpu = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(n)]
    return cpu + [subprocess.Popen([sys.executable, "-c", IO_BURN, f"/var/tmp/io-burn-{i}"]) for i in range(io)]


def _drop_caches() -> None:
    """As after a boot: the daemons' binaries and libraries are read from disk again."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def _timeline(cluster: LocalSlurmCluster, t0: float, stop: threading.Event, out: list) -> None:
    """Every node's State (and Reason) as slurmctld reports them, once a second; each change with its time."""
    last = None
    while not stop.is_set():
        nodes = cluster.node_states() if cluster.conf_path.is_file() else {}
        seen = " ".join(f"{n}={s.state}" + (f" ({s.reason})" if s.reason else "") for n, s in nodes.items())
        seen = seen or "slurmctld not answering"
        if seen != last:
            out.append((round(time.monotonic() - t0, 1), seen))
            last = seen
        stop.wait(1)


def _freeze_first_slurmd(cluster: LocalSlurmCluster, node: str) -> None:
    """A slurmd that never registers: its node's first slurmd is SIGSTOPped as soon as it is spawned."""
    spawn, frozen = cluster._spawn, []

    def spawn_then_freeze(name, argv):
        proc = spawn(name, argv)
        if argv[-1] == node and not frozen:
            os.kill(proc.pid, signal.SIGSTOP)
            frozen.append(proc.pid)
        return proc

    cluster._spawn = spawn_then_freeze


def one_start(workdir: Path, timeout: float, keep: Path | None, label: str, freeze: str | None = None) -> dict:
    cluster = LocalSlurmCluster(workdir)
    if freeze:
        _freeze_first_slurmd(cluster, freeze)
    stop = threading.Event()
    timeline: list = []
    t0 = time.monotonic()
    watcher = threading.Thread(target=_timeline, args=(cluster, t0, stop, timeline), daemon=True)
    watcher.start()
    error = None
    try:
        cluster.start(timeout=timeout)
    except SlurmClusterError as exc:
        error = str(exc)
    seconds = time.monotonic() - t0
    stop.set()
    watcher.join()
    if error is None:
        nodes = cluster.node_states()
        timeline.append((round(seconds, 1), " ".join(f"{n}={s.state}" for n, s in nodes.items())))
    if keep is not None:
        dest = keep / label
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(workdir / "log", dest, ignore=shutil.ignore_patterns("*.out"), dirs_exist_ok=True)
        (dest / "timeline.txt").write_text("".join(f"{t:7.1f}s {s}\n" for t, s in timeline))
        if error:
            (dest / "error.txt").write_text(error + "\n")
    restarts = list(getattr(cluster, "slurmd_restarts", []))
    cluster.stop()
    return {
        "run": label,
        "seconds": round(seconds, 1),
        "error": error,
        "slurmd_restarts": restarts,
        "phases": dict(getattr(cluster, "start_phases", {})),
        "timeline": timeline,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--burners", type=int, default=2, help="processes spinning a CPU each beside every start")
    ap.add_argument("--io-burners", type=int, default=0, help="processes writing and fsyncing 64 MiB in a loop")
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache before each start (root)")
    ap.add_argument("--freeze-slurmd", metavar="NODE", help="SIGSTOP NODE's first slurmd (checks the restart)")
    ap.add_argument("--timeout", type=float, default=None, help="start(timeout=...); default: start()'s own")
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    ap.add_argument("--keep-logs", type=Path, default=None, help="copy each run's daemon logs and timeline here")
    ap.add_argument("--json", type=Path, default=None, help="write every run's record here")
    args = ap.parse_args()
    probe = LocalSlurmCluster(args.workdir)
    if probe.is_running():
        print(f"a cluster runs in {args.workdir}: not stopping it (stop it first)", file=sys.stderr)
        return 2
    burners = _burners(args.burners, args.io_burners)
    records = []
    try:
        if not all(shutil.which(b) for b in ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd")):
            t = time.monotonic()
            probe.ensure_installed()
            records.append({"run": "apt-install", "seconds": round(time.monotonic() - t, 1)})
            print(f"apt install: {records[-1]['seconds']} s", flush=True)
        timeout = args.timeout or _default_timeout()
        for i in range(1, args.runs + 1):
            if args.drop_caches:
                _drop_caches()
            rec = one_start(args.workdir, timeout, args.keep_logs, f"run{i}", args.freeze_slurmd)
            records.append(rec)
            status = "ok" if rec["error"] is None else "FAILED: " + rec["error"].splitlines()[0]
            phases = " ".join(f"{k} {v}" for k, v in rec["phases"].items())
            print(
                f"run {i}: {rec['seconds']} s ({phases}), slurmd restarts {rec['slurmd_restarts']}, {status}",
                flush=True,
            )
            for t, s in rec["timeline"]:
                print(f"    {t:6.1f}s {s}", flush=True)
    finally:
        for b in burners:
            b.kill()
            b.wait()
        for i in range(args.io_burners):
            Path(f"/var/tmp/io-burn-{i}").unlink(missing_ok=True)
    starts = [r for r in records if "error" in r]
    ok = [r["seconds"] for r in starts if r["error"] is None]
    print(
        f"{len(starts)} starts, {len(starts) - len(ok)} failed"
        + (f"; ok: min {min(ok)} s, median {sorted(ok)[len(ok) // 2]} s, max {max(ok)} s" if ok else "")
        + f"; load average after: {os.getloadavg()[0]:.1f}"
    )
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    return 0 if len(ok) == len(starts) else 1


def _default_timeout() -> float:
    import inspect

    return inspect.signature(LocalSlurmCluster.start).parameters["timeout"].default


if __name__ == "__main__":
    sys.exit(main())
