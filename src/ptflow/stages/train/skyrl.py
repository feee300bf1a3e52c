"""Agent kind ``skyrl``: a trainer beside a CPU runtime server job, coordinated by ``ptflow.launch.skyrl``.

The trainer is ``params.trainer`` (argv; placeholders {python} {start_model} {out}) or, by default, the STAND-IN
``ptflow.standins.skyrl_trainer`` (no GPU here to run SkyRL itself: it calls the server and learns nothing).
"""

from __future__ import annotations

import json
import sys

from ptflow.launch.skyrl import ServerSite, run_two_job

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
    """Train one cell (a ``ptflow.stages.train.cell.TrainJob``): submit the server, run the trainer, stop both."""
    argv = trainer_argv(job.params, job.start_model, str(job.out))
    res = run_two_job(
        ServerSite.from_dict(job.agent["server"]), job.agent["coord_dir"], argv, params=job.params, log=job.log
    )
    summary = job.out / "skyrl_standin.json"
    step = json.loads(summary.read_text()).get("step") if summary.is_file() else None
    return {"step": step, "train_loss": None, "skyrl": res}
