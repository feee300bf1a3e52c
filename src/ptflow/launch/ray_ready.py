"""Readiness of a Ray cluster, as NeMo-RL's launcher decides it: poll ``ray status`` until the ``worker_units`` of
every node are there (each node is started with ``worker_units`` = its GPUs, or CPUs on a CPU-only cluster), then
print the status; on the deadline, name the nodes that never joined. Standalone (stdlib + ray): the launcher copies
it into the job's log dir and runs it with the runtime's python (venv or container), which need not have ptflow.

    python ray_ready.py --address HEAD:PORT --resource GPU --expect node1=10.0.0.1:4 --expect node2=10.0.0.2:4 \\
        --timeout 1800
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

UNITS = re.compile(r"([\d.]+)/([\d.]+)\s+worker_units\b")


def ray_status(address: str) -> tuple[int, str]:
    """``ray status --address`` with the Ray of this python (what a user types on the head node)."""
    argv = [sys.executable, "-m", "ray.scripts.scripts", "status", "--address", address]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def worker_units(status_text: str) -> float:
    """Total worker_units the cluster holds (the second number of ``used/total worker_units``)."""
    m = UNITS.search(status_text)
    return float(m.group(2)) if m else 0.0


def missing_nodes(address: str, expect: dict) -> list[str]:
    """Which expected nodes are not alive (by their ptflow_node resource), for the error message."""
    import ray

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    alive = set()
    for node in ray.nodes():
        if node.get("Alive"):
            alive |= {r for r in node["Resources"] if r.startswith("ptflow_node:")}
    return [f"{name} ({addr})" for key, (name, addr, _) in sorted(expect.items()) if key not in alive]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--resource", required=True, choices=["GPU", "CPU"], help="what worker_units count")
    ap.add_argument("--expect", action="append", required=True, help="NAME=ADDR:UNITS, one per node")
    ap.add_argument("--timeout", type=float, required=True)
    args = ap.parse_args(argv)
    expect = {}
    for item in args.expect:
        name, rest = item.split("=", 1)
        addr, count = rest.rsplit(":", 1)
        expect[f"ptflow_node:{name}"] = (name, addr, float(count))
    want = sum(v[2] for v in expect.values())
    deadline = time.monotonic() + args.timeout
    have, text = 0.0, ""
    while time.monotonic() < deadline:
        rc, text = ray_status(args.address)
        have = worker_units(text) if rc == 0 else 0.0  # early on the head is not up yet: keep polling
        print(f"ray_ready: worker_units online: {have:g}/{want:g}", flush=True)
        if have >= want:
            print("=== Ray Cluster Status ===")
            print(text.rstrip())
            print(f"Number of nodes: {len(expect)}")
            for _, (name, addr, units) in sorted(expect.items()):
                print(f"Node: {name} ({addr}), Status: True, worker_units: {units:g} {args.resource}")
            return 0
        time.sleep(3)
    try:
        missing = missing_nodes(args.address, expect)
    except Exception as exc:  # the head itself may be unreachable
        missing = [f"the head at {args.address} ({exc})"]
    print(
        f"ray_ready: the Ray cluster was not complete after {args.timeout:.0f} s: {have:g}/{want:g} worker_units"
        + (f"; never joined: {', '.join(missing)}" if missing else "")
        + " — see that node's log (ray-head.log, ray-worker-<n>.log) in the job's log dir",
        file=sys.stderr,
    )
    print(text, file=sys.stderr)
    return 4


if __name__ == "__main__":
    sys.exit(main())
