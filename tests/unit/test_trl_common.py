"""Where ptflow's TRL trainers train (ptflow.stages.train.trl_common.device_args).

The real CUDA path is proved by bench/gpu_check.sh on a GPU machine (bench/RESULTS.md: SFT and GRPO allocated GPU
memory on an H100); here, with no GPU, the choice itself: the job's GPUs when torch sees one, else the CPU."""

from __future__ import annotations

import torch

from ptflow.stages.train.trl_common import common_args, device_args


def test_without_a_gpu_the_trainer_runs_on_the_cpu_in_fp32(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on this machine and CI
    assert device_args() == {"use_cpu": True, "bf16": False, "fp16": False}
    args = common_args("/tmp/x", steps=10, batch_size=2, learning_rate=1e-3, seed=0)
    assert (args["use_cpu"], args["bf16"]) == (True, False)


def test_a_gpu_job_trains_on_its_gpus_with_bf16_where_the_card_has_it(monkeypatch):
    # A GPU job once trained on its CPUs (use_cpu=True was fixed): what torch reports decides.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert device_args() == {"use_cpu": False, "bf16": True, "fp16": False}
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # e.g. a V100: fp32, not fp16
    assert device_args() == {"use_cpu": False, "bf16": False, "fp16": False}
