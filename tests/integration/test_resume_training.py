"""Resumable TRL training (ptflow.stages.train.trl_common, ptflow.cluster.preempt.ResumeDir): a run stopped by the
time-limit warning and resumed gives the same loss curve and the same weights as an uninterrupted run.

Real TRL on the tiny model, on CPU; the warning is a real USR1 to this process, sent by the log callback when the
trainer logs step 24 (the trainer saves at the next step boundary and stops)."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from ptflow.cluster.preempt import RESUME_EXIT, ResumeDir, StoppedToResume, stop_marker, write_stop_marker
from ptflow.stages.data.synthetic import generate_arithmetic
from ptflow.stages.data.verl_format import to_verl_frame, write_parquet
from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama
from ptflow.stages.train.grpo import GrpoSettings, train_grpo
from ptflow.stages.train.sft import SftSettings, train_sft


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("resume")
    train = root / "train.parquet"
    write_parquet(to_verl_frame(generate_arithmetic("add", 1, 200, 0), "synthetic/add", "train"), train)
    base = root / "base"
    create_tiny_llama(base, build_char_tokenizer([]), layers=2, hidden=64, heads=4, seed=0)
    return base, train


def losses(lines: list[str]) -> dict[int, float]:
    """step -> logged loss, from the trainer's log lines ``step N: loss=... ``."""
    out = {}
    for line in lines:
        head, _, rest = line.partition(": ")
        fields = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
        if head.startswith("step ") and "loss" in fields:
            out[int(head.split()[1])] = float(fields["loss"])
    return out


def warn_at(step: int, lines: list[str]):
    """A log function that sends this process Slurm's warning signal when the trainer logs ``step``."""

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith(f"step {step}:"):
            os.kill(os.getpid(), signal.SIGUSR1)

    return log


def test_sft_stopped_by_the_warning_resumes_with_the_same_loss_curve_and_weights(data, tmp_path):
    base, train = data
    hp = SftSettings(steps=60, batch_size=8, learning_rate=3e-3, seed=0, save_freq=6)  # logs, checkpoints every 6 steps
    whole_lines: list[str] = []
    whole = train_sft(base, train, tmp_path / "whole", hp, resume=ResumeDir(tmp_path / "r1"), log=whole_lines.append)

    resume = ResumeDir(tmp_path / "r2")
    cut_lines: list[str] = []
    with pytest.raises(StoppedToResume) as stopped:
        train_sft(base, train, tmp_path / "cut", hp, resume=resume, log=warn_at(24, cut_lines))
    assert stopped.value.step == 25 and stopped.value.reason == "the time-limit warning"
    assert not (tmp_path / "cut").exists(), "no final model from a stopped run"
    assert sorted(p.name for p in resume.root.glob("step_*")) == ["step_24", "step_25"]  # periodic + the warning's
    state = json.loads((resume.root / "step_25" / "trainer_state.json").read_text())
    assert state["global_step"] == 25
    for part in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        assert (resume.root / "step_25" / part).is_file(), part
    assert not list(resume.root.glob(".attempt-*")), "the attempt's staging dir is removed"

    resumed = train_sft(base, train, tmp_path / "cut", hp, resume=resume, log=cut_lines.append)
    assert resumed["resumed_from"] == 25 and resumed["step"] == whole["step"] == 60
    a, b = losses(whole_lines), losses(cut_lines)
    # The same curve: before the stop, and every logging window after the first one of the resumed run (that one
    # averages steps 26-30 instead of 25-30).
    same = [s for s in a if s <= 24 or s >= 36]
    assert len(same) == 9 and all(b[s] == pytest.approx(a[s], rel=1e-4, abs=1e-4) for s in same), (a, b)
    assert b[30] == pytest.approx(a[30], rel=0.05)
    assert resumed["train_loss"] == pytest.approx(whole["train_loss"], rel=0.02)
    wa, wb = load_file(tmp_path / "whole" / "model.safetensors"), load_file(tmp_path / "cut" / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5


def test_grpo_resumes_its_sampling_where_it_stopped(data, tmp_path):
    """GRPO samples completions: the RNG state restored from the checkpoint makes the resumed run draw the same
    completions (same lengths per step) as an uninterrupted one."""
    base, train = data
    hp = GrpoSettings(
        steps=8, batch_size=4, num_generations=4, learning_rate=1e-3, max_completion_length=8, seed=0, save_freq=2
    )

    def lengths(lines):
        out = {}
        for line in lines:
            head, _, rest = line.partition(": ")
            fields = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
            if "completions/mean_length" in fields:
                out[int(head.split()[1])] = float(fields["completions/mean_length"])
        return out

    whole_lines: list[str] = []
    train_grpo(base, train, tmp_path / "whole", hp, resume=ResumeDir(tmp_path / "r1"), log=whole_lines.append)
    resume = ResumeDir(tmp_path / "r2")
    cut_lines: list[str] = []
    with pytest.raises(StoppedToResume):
        train_grpo(base, train, tmp_path / "cut", hp, resume=resume, log=warn_at(3, cut_lines))
    res = train_grpo(base, train, tmp_path / "cut", hp, resume=resume, log=cut_lines.append)
    assert res["resumed_from"] == 4 and res["step"] == 8
    assert lengths(cut_lines) == lengths(whole_lines) and len(lengths(whole_lines)) == 8


def test_resume_dir_promotes_whole_steps_and_keeps_the_newest(tmp_path):
    resume = ResumeDir(tmp_path / "r")
    for step in (3, 6, 9):
        src = resume.attempt_dir("a") / "checkpoint"
        src.mkdir()
        (src / "w").write_text(str(step))
        assert resume.promote_step(src, step) == resume.root / f"step_{step}"
    assert resume.newest() == (9, resume.root / "step_9")
    assert sorted(p.name for p in resume.root.glob("step_*")) == ["step_6", "step_9"]
    # another attempt promoting a step that exists already: its copy is dropped, the existing one stays
    dup = resume.attempt_dir("b") / "checkpoint"
    dup.mkdir()
    (dup / "w").write_text("dup")
    assert resume.promote_step(dup, 9) is None and (resume.root / "step_9" / "w").read_text() == "9"
    resume.record_attempt({"id": "a", "started": 1.0})
    resume.record_attempt({"id": "b", "started": 2.0})
    assert [a["id"] for a in resume.record_attempt({"id": "a", "ended": 3.0})] == ["a", "b"]
    assert resume.attempts()[0] == {"id": "a", "started": 1.0, "ended": 3.0}
    resume.clear()
    assert not resume.root.exists()


def test_stop_marker_round_trip(tmp_path):
    write_stop_marker(tmp_path, "123", {"step": 25, "reason": "internal timeout"})
    assert stop_marker(tmp_path, "123")["step"] == 25 and stop_marker(tmp_path, "124") is None
    assert RESUME_EXIT == 75


def test_without_save_freq_checkpoints_come_by_training_time(data, tmp_path):
    """No params.save_freq: no checkpoint while less than save_minutes of training passed (short runs pay nothing),
    one at each save_minutes otherwise; a warning still saves at once."""
    base, train = data
    hp = SftSettings(steps=12, batch_size=4, learning_rate=3e-3, seed=0)
    quick = ResumeDir(tmp_path / "quick")
    train_sft(base, train, tmp_path / "a", hp, resume=quick, log=lambda m: None)
    assert not list(quick.root.glob("step_*"))
    lines: list[str] = []
    every = ResumeDir(tmp_path / "every")
    train_sft(base, train, tmp_path / "b", replace(hp, save_minutes=1e-6), resume=every, log=lines.append)
    assert sum("checkpoint step" in ln for ln in lines) == 11  # each step but the last (the final model is saved)
    assert "training on cpu (fp32)" in lines  # the job's log says where it trained (a GPU job: cuda:0, bf16 autocast)


def test_sft_without_gradient_checkpointing_trains_the_same_weights(data, tmp_path, monkeypatch):
    """params.gradient_checkpointing=false reaches the model (no activation recomputation) and changes only the cost:
    the weights after training are those of TRL's default (checkpointing on)."""
    from trl import SFTTrainer

    base, train = data
    seen: list[bool] = []
    real_train = SFTTrainer.train

    def spy_train(self, *args, **kwargs):
        out = real_train(self, *args, **kwargs)  # the Trainer switches checkpointing on inside train()
        seen.append(bool(self.model.is_gradient_checkpointing))
        return out

    monkeypatch.setattr(SFTTrainer, "train", spy_train)
    hp = SftSettings(steps=6, batch_size=8, learning_rate=3e-3, seed=0)
    train_sft(base, train, tmp_path / "default", hp, log=lambda line: None)
    train_sft(base, train, tmp_path / "off", replace(hp, gradient_checkpointing=False), log=lambda line: None)
    assert seen == [True, False]
    wa, wb = load_file(tmp_path / "default" / "model.safetensors"), load_file(tmp_path / "off" / "model.safetensors")
    assert wa.keys() == wb.keys() and max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5


def test_a_gpu_job_whose_torch_sees_no_gpu_says_so_and_trains_on_its_cpus(data, tmp_path, monkeypatch):
    """The trainer as the train job calls it (TrainRun.gpus: the site's request) where torch sees no GPU (this
    machine; hidden on a GPU machine), as on the test cluster's placeholder GPUs: the job's log says why it trains
    on the CPUs, before the model loads."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    base, train = data
    lines: list[str] = []
    hp = SftSettings(steps=2, batch_size=4, learning_rate=3e-3, seed=0)
    train_sft(base, train, tmp_path / "sft", hp, gpus=1, log=lines.append)
    assert lines[0].startswith("warning: this train job asked the site for 1 GPU(s) (resources.train)"), lines
    assert "sees no CUDA device" in lines[0] and "training on the CPUs" in lines[0]
    assert "training on cpu (fp32)" in lines and (tmp_path / "sft" / "config.json").is_file()
