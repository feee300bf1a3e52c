"""A stand-in for a resumable Ray trainer (verl and NeMo-RL need GPUs, so they cannot run here): a Ray driver that
"trains" for TOTAL steps (each step a Ray task adding the step number to the state), saves ``step_<n>`` under
CKPT_DIR when the job's time-limit warning (USR1) arrives, and resumes from the newest ``step_<n>`` when the job
is requeued. Usage: resumable_probe.py CKPT_DIR TOTAL OUT_JSON
"""

import json
import os
import sys
import time
from pathlib import Path

import ray

from ptflow.cluster.preempt import SaveOnWarning, newest_step

ckpt_dir, total, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])


def save(step: int, state: int) -> None:
    tmp = ckpt_dir / f".step_{step}.partial"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "state.json").write_text(json.dumps({"step": step, "state": state}))
    os.replace(tmp, ckpt_dir / f"step_{step}")  # a step_<n> that exists is complete


@ray.remote(num_cpus=1)
def train_step(state: int, step: int) -> int:
    time.sleep(1)
    return state + step


with SaveOnWarning() as warning:
    ray.init()  # RAY_ADDRESS from the launcher
    found = newest_step(ckpt_dir)
    start, state = (found[0], json.loads((found[1] / "state.json").read_text())["state"]) if found else (0, 0)
    print(f"resumed from step {start}" if found else "starting at step 0", flush=True)
    for step in range(start + 1, total + 1):
        state = ray.get(train_step.remote(state, step))
        print(f"step {step}", flush=True)
        if warning.requested:
            save(step, state)
            print(f"time-limit warning: saved step {step}", flush=True)
            warning.requested = False
result = {"state": state, "expected": total * (total + 1) // 2, "resumed_from": start}
tmp = out.with_name(out.name + ".partial")
tmp.write_text(json.dumps(result))
os.replace(tmp, out)
print(json.dumps(result), flush=True)
