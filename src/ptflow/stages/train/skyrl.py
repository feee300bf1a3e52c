"""Agent kind ``skyrl``: a trainer beside a CPU job of the SkyRL server, coordinated by ``ptflow.launch.skyrl``.

Its train rule is a login-node supervisor (``ptflow.cluster.supervise`` with ``ptflow.launch.skyrl.ServerCompanion``)
that submits the server first and this job with a dependency on the server having started; :func:`run` is the GPU
job's side: wait for ``runtime_ready.flag``, train, flag completion.

The trainer is ``params.trainer`` (argv; placeholders {python} {start_model} {out}) or, by default, the STAND-IN
``ptflow.standins.skyrl_trainer`` (no GPU here to run SkyRL itself: it calls the server and learns nothing).
"""

from __future__ import annotations

import json
import os
import sys

from ptflow.launch.skyrl import COORD_ENV, SkyRLError, run_trainer_side

STANDIN_TRAINER = [
    "{python}",
    "-m",
    "ptflow.standins.skyrl_trainer",
    "--start-model",
    "{start_model}",
    "--out",
    "{out}",
]


def trainer_argv(params: dict, start_model: str, out: str) -> list[str]:
    trainer = params.get("trainer") or [*STANDIN_TRAINER, "--calls", str(params.get("steps", 3))]
    values = {"python": sys.executable, "start_model": str(start_model), "out": str(out)}
    return [a.format(**values) for a in trainer]


def run(job) -> dict:
    """Train one cell (a ``ptflow.stages.train.cell.Training``) inside the trainer job its supervisor submitted."""
    coord = os.environ.get(COORD_ENV)
    if not coord:
        raise SkyRLError(
            f"{COORD_ENV} is not set: a skyrl train job is submitted by its login-node supervisor (rule "
            "train_supervised), which starts the SkyRL server first; run it through snakemake"
        )
    argv = trainer_argv(job.params, job.start_model, str(job.out))
    res = run_trainer_side(coord, argv, params=job.params, log=job.log)
    summary = job.out / "skyrl_standin.json"
    step = json.loads(summary.read_text()).get("step") if summary.is_file() else None
    return {"step": step, "train_loss": None, "skyrl": res}
