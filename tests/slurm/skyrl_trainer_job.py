"""The GPU side of a SkyRL cell for tests/slurm/test_skyrl_twojob.py, as a supervised job runs it: the coordination
dir from the supervisor (PTFLOW_SKYRL_COORD), the stand-in trainer calling the runtime server.
Usage: skyrl_trainer_job.py OUT CALLS INTERVAL"""

import os
import sys

from ptflow.launch.skyrl import COORD_ENV, SkyRLError, run_trainer_side

out, calls, interval = sys.argv[1], sys.argv[2], sys.argv[3]
argv = [sys.executable, "-m", "ptflow.standins.skyrl_trainer", "--out", out, "--calls", calls, "--interval", interval]
try:
    run_trainer_side(os.environ[COORD_ENV], argv, params={"ready_timeout": 300}, log=lambda m: print(m, flush=True))
except SkyRLError as exc:
    print(f"skyrl: {exc}", file=sys.stderr, flush=True)
    sys.exit(1)
