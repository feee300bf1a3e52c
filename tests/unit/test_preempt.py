"""Time-limit warnings (sbatch --signal) and the deadline settings of verl and NeMo-RL (ptflow.cluster.preempt)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ptflow import templates
from ptflow.cluster import preempt
from ptflow.config.request import signal_option
from ptflow.config.sites import load_site
from ptflow.config.validate import ConfigError
from ptflow.stages.train import nemo
from tests.conftest import REPO
from tests.unit.test_verl_nemo_commands import overrides, values

SITES = REPO / "config" / "sites"


def test_signal_option_and_reading_it_back():
    assert signal_option(600) == "--signal=USR1@600"
    assert preempt.warning_seconds("--tmp=10M --signal=USR1@600") == 600
    assert preempt.warning_seconds("--tmp=10M") is None and preempt.warning_seconds(None) is None
    with pytest.raises(ValueError, match="warn_seconds"):
        preempt.warning_seconds("--signal=B:TERM@60")
    with pytest.raises(ValueError, match="at least 1"):
        signal_option(0)


def test_site_warning_asks_slurm_and_keeps_the_plugins_job_step(tmp_path):
    """The warning (no B:) reaches every job step; a warned single-node job keeps the plugin's inner srun (its
    job-step Snakemake ignores USR1, ptflow.jobenv), a multi-node one runs its body in the batch step as before."""
    site = load_site("alps", SITES)
    from ptflow.config.entries import Agent

    res = site.request("train", Agent("verl-dapo", "verl")).snakemake_resources()
    assert "--signal=USR1@600" in res["slurm_extra"]
    assert res["mpi"] == "srun" and res["tasks"] == 2  # multi-node: the Ray launcher spreads the processes
    one = tmp_path / "one.yaml"
    one.write_text(
        "name: one\nscheduler: slurm\nresources:\n  default: {threads: 2}\n  train: {gpus: 4, warn_seconds: 300}\n"
    )
    single = load_site(str(one), SITES)
    res = single.request("train").snakemake_resources()
    assert res["slurm_extra"] == "--signal=USR1@300" and "mpi" not in res and "tasks" not in res


def test_every_job_process_ignores_the_warning_and_a_trainer_catches_it():
    """What makes the warning harmless to everything but a trainer: ignored in rule scripts (rule_log) and in
    Snakemake's processes inside a job (Snakefile), inherited by children; SaveOnWarning catches it again."""
    import subprocess
    import sys

    from ptflow.jobenv import ignore_time_limit_warning

    before = signal.getsignal(signal.SIGUSR1)
    try:
        ignore_time_limit_warning()
        child = "import os, signal, time; os.kill(os.getpid(), signal.SIGUSR1); time.sleep(0.2); print('alive')"
        out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == "alive"  # a child inherits the ignored warning
        with preempt.SaveOnWarning(term=True) as warning:
            os.kill(os.getpid(), signal.SIGUSR1)
            assert warning.requested and warning.reason == "the time-limit warning"
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR1, before)
    snakefile = (REPO / "Snakefile").read_text()
    assert "ignore_time_limit_warning()" in snakefile and '"SLURM_JOB_ID" in os.environ' in snakefile


def test_hand_written_signal_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: b\nscheduler: slurm\nresources:\n  default: {extra: '--signal=B:USR1@60'}\n")
    with pytest.raises(ConfigError, match=r"at resources.default.extra: .* use warn_seconds"):
        load_site(str(bad), SITES)


def test_deadline_settings_for_verl_and_nemo():
    d = preempt.Deadline(end=10_000.0, warn_seconds=600)
    env, settings = preempt.deadline_settings("verl", d)
    assert env == {"MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP": "10000"}
    assert settings == {"trainer.esi_redundant_time": 600}
    _, settings = preempt.deadline_settings("nemo", d, now=10_000 - 600 - 90061)
    assert settings == {"checkpoint_must_save_by": "01:01:01:01"}
    assert preempt.deadline_settings("verl", None) == ({}, {})
    assert not preempt.stopped_by_deadline(d, now=10_000 - 1300) and preempt.stopped_by_deadline(d, now=9_000)


def test_verl_overrides_carry_the_deadline_and_refuse_it_from_the_agent():
    out = overrides("ppo-gsm8k", deadline={"trainer.esi_redundant_time": 600})
    assert out["trainer.esi_redundant_time"] == "600" and out["trainer.resume_mode"] == "auto"
    with pytest.raises(ValueError, match="esi_redundant_time"):
        overrides("ppo-gsm8k", overrides={"trainer.esi_redundant_time": 1})


def test_nemo_config_carries_must_save_by(tmp_path):
    cfg = yaml.safe_load(nemo.render_config(values(must_save_by="00:05:50:00"), tmp_path / "a").read_text())
    assert cfg["checkpointing"]["checkpoint_must_save_by"] == "00:05:50:00"
    cfg = yaml.safe_load(nemo.render_config(values(), tmp_path / "b").read_text())
    assert cfg["checkpointing"]["checkpoint_must_save_by"] is None


def test_save_on_warning_sets_a_flag_and_restores_the_handler():
    before = signal.getsignal(signal.SIGUSR1)
    with preempt.SaveOnWarning() as warning:
        assert not warning.requested
        os.kill(os.getpid(), signal.SIGUSR1)
        assert warning.requested and warning.received_at is not None
    assert signal.getsignal(signal.SIGUSR1) == before


def test_newest_step_ignores_partial_and_foreign_dirs(tmp_path):
    assert preempt.newest_step(tmp_path) is None
    for name in ("step_2", "step_10", ".step_11.partial", "step_x"):
        (tmp_path / name).mkdir()
    (tmp_path / "step_12").write_text("a file, not a checkpoint")
    assert preempt.newest_step(tmp_path) == (10, tmp_path / "step_10")


def test_launcher_driver_ignores_the_warning_when_it_cannot_save_on_it(tmp_path):
    """What the rendered driver line does, run for real: a USR1 to the wrapped driver does not kill it."""
    from ptflow.launch import ray as L
    from tests.unit.test_launcher_render import job

    text = L.render(job(tmp_path, driver_handles_warning=False)).read_text()
    line = next(x for x in text.splitlines() if "main_ppo" in x and "--nodelist" in x)
    assert 'bash -c \'trap "" USR1; exec "$@"\' driver /venv/bin/python -m verl.trainer.main_ppo' in line
    assert 'trap "" USR1' not in L.render(job(tmp_path / "b")).read_text().split("All workers connected!")[1]
    code = "import os, signal, time; os.kill(os.getpid(), signal.SIGUSR1); time.sleep(0.2); print('alive')"
    out = subprocess.run(
        ["bash", "-c", 'trap "" USR1; exec "$@"', "driver", sys.executable, "-c", code], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.strip() == "alive"
    unwrapped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert unwrapped.returncode == -signal.SIGUSR1  # why the wrapper exists


def test_ray_node_script_ignores_the_warning():
    text = templates.path("ray_node.sh").read_text()
    assert "trap '' USR1" in text.split("mkdir -p")[0]


def test_job_deadline_needs_a_warning():
    assert preempt.job_deadline("123", None) is None


def test_resumable_probe_is_named_a_stand_in():
    assert "stand-in" in (Path(REPO) / "tests" / "slurm" / "resumable_probe.py").read_text().splitlines()[0]


def test_nemo_newest_step_names_what_to_change_when_none(tmp_path):
    (tmp_path / "step_3").mkdir()
    (tmp_path / "step_12").mkdir()
    assert nemo.newest_step(tmp_path) == tmp_path / "step_12"
    with pytest.raises(FileNotFoundError, match="no step_.*lower save_period"):
        nemo.newest_step(tmp_path / "empty")
