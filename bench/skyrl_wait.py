"""SkyRL: how long the GPU trainer job holds its allocation waiting for the runtime server, before and after.

- before — the earlier design: the trainer job starts first and submits the server itself, so its GPUs wait for the
  server's whole queue time plus its start-up;
- after — ptflow now (``ptflow.launch.skyrl.ServerCompanion``, driven by the train rule's login-node supervisor):
  the server is submitted first and the trainer with ``--dependency=after:<server>``, so the trainer's allocation
  waits only for the server's start-up (``runtime_ready.flag``).

The server's queue wait is simulated with ``--begin=now+Q`` on the server job (the test cluster is otherwise idle);
both designs use the real server (ptflow.launch.skyrl_server) and real jobs. The figure is the trainer job's
"allocated but waiting" seconds: from its script's start to the ready flag. Printed, not asserted.

Usage: .venv/bin/python bench/skyrl_wait.py [--queue-seconds 30] [--repeats 2]   (a running Slurm cluster:
PTFLOW_SLURM_EXISTING's test cluster, partitions cpu/gpu, account ptflow, as in tests/slurm/localtest.yaml)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from ptflow.cluster import slurm  # noqa: E402
from ptflow.config.request import Request  # noqa: E402
from ptflow.config.sites import RuntimeSpec  # noqa: E402
from ptflow.launch import skyrl  # noqa: E402

ROOT = Path("/var/lib/ptflow-tests")  # a shared path both test nodes see (not /tmp)
SERVER = skyrl.ServerSite(
    Request({"partition": "cpu", "threads": 1, "mem_mb": 500, "runtime": 10}, scheduler="slurm", account="ptflow"),
    RuntimeSpec("bench"),
    {},
)
TRAINER = Request({"partition": "gpu", "gpus": 1, "threads": 1, "mem_mb": 1000, "runtime": 10}, scheduler="slurm",
                  account="ptflow")  # fmt: skip

# The trainer job of the earlier design: it submits the server from inside its allocation and waits for it.
BEFORE = """
import json, sys, time
t0 = time.time()
sys.path.insert(0, {src!r})
from ptflow.config.request import Request
from ptflow.config.sites import RuntimeSpec
from ptflow.launch import skyrl
server = skyrl.ServerSite.from_dict(json.loads({server!r}))
companion = skyrl.ServerCompanion(server, {base!r}, {{}}, job_name="ptflow-bench-before",
                                  server_extra=("--begin=now+{queue}",), log=lambda m: None)
coord = companion.submit_server()
skyrl.wait_ready(coord, companion.job_id, 600, poll=0.2, log=lambda m: None)
waited = time.time() - t0
companion.finish(log=lambda m: None)
print(json.dumps({{"waited_for_runtime_s": waited}}))
"""

# The trainer job now: its coordination dir from the supervisor; the real trainer side with a no-op trainer.
AFTER = """
import json, os, sys
sys.path.insert(0, {src!r})
from ptflow.launch import skyrl
res = skyrl.run_trainer_side(os.environ[skyrl.COORD_ENV], ["true"], log=lambda m: None)
print(json.dumps({{"waited_for_runtime_s": res["waited_for_runtime_s"]}}))
"""


def python_job(work: Path, name: str, code: str, extra: list[str], env: dict | None = None) -> str:
    script = work / f"{name}.sh"
    script.write_text(f"#!/bin/bash\nexec {sys.executable} - <<'PY'\n{code}\nPY\n")
    opts = TRAINER.sbatch_options(job_name=f"ptflow-bench-{name}", output=str(work / f"{name}-%j.out")) + extra
    return slurm.submit(slurm.sbatch_argv(str(script), options=opts), env={**os.environ, **(env or {})})


def result_of(work: Path, name: str, job_id: str) -> float:
    rec = slurm.wait_job(job_id, poll=1, timeout=900)
    out = (work / f"{name}-{job_id}.out").read_text()
    if rec.base_state != "COMPLETED":
        raise RuntimeError(f"{name} job {job_id} {rec.state}:\n{out[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])["waited_for_runtime_s"]


def before(work: Path, queue: int) -> float:
    code = BEFORE.format(src=str(REPO / "src"), server=json.dumps(SERVER.to_dict()), base=str(work / "before"),
                         queue=queue)  # fmt: skip
    return result_of(work, "before", python_job(work, "before", code, []))


def after(work: Path, queue: int) -> float:
    companion = skyrl.ServerCompanion(SERVER, work / "after", {}, job_name="ptflow-bench-after",
                                      server_extra=(f"--begin=now+{queue}",), log=lambda m: None)  # fmt: skip
    try:
        opts, env = companion.prepare(1)
        return result_of(work, "after", python_job(work, "after", AFTER.format(src=str(REPO / "src")), opts, env))
    finally:
        companion.finish(log=lambda m: None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queue-seconds", type=int, default=30, help="simulated queue wait of the server job")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    ROOT.mkdir(parents=True, exist_ok=True)
    figures: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix=f"bench-skyrl-{uuid.uuid4().hex[:6]}-", dir=ROOT) as tmp:
        work = Path(tmp)
        for i in range(args.repeats):
            for name, fn in (("before", before), ("after", after)):
                t0 = time.time()
                waited = fn(work, args.queue_seconds)
                figures[name].append(waited)
                print(f"run {i + 1} {name:6s}: trainer allocated but waiting {waited:6.1f} s "
                      f"(server queued {args.queue_seconds} s; {time.time() - t0:.0f} s wall)", flush=True)  # fmt: skip
    print()
    print(f"SkyRL trainer job, allocated-but-waiting seconds (server queue wait {args.queue_seconds} s, "
          f"{args.repeats} runs each):")  # fmt: skip
    for name, label in (("before", "trainer submits server (before)"), ("after", "server first + dependency (now)")):
        vals = figures[name]
        print(f"  {label:34s} median {statistics.median(vals):6.1f} s  (min {min(vals):.1f}, max {max(vals):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
