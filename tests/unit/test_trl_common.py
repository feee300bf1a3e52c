"""Where ptflow's TRL trainers train (ptflow.stages.train.trl_common.device_args), and where a train job takes the
GPUs it asked for (ptflow.launch.train_job.requested_gpus).

The real CUDA path is proved by bench/gpu_check.sh on a GPU machine (bench/RESULTS.md: SFT and GRPO allocated GPU
memory on an H100); here, with no GPU, the choice itself: the GPUs the job asked its site for, the CPUs with a warning
where torch sees none; a direct call (no request known) goes by what torch sees."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ptflow.config.sites import load_site
from ptflow.launch.train_job import requested_gpus
from ptflow.stages.train.trl_common import common_args, device_args

SITES = "config/sites"


def test_without_a_gpu_the_trainer_runs_on_the_cpu_in_fp32(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on this machine and CI
    assert device_args() == device_args(0) == {"use_cpu": True, "bf16": False, "fp16": False}
    # the device is device_args' alone: the shared arguments leave it to the trainers, which ask it first
    assert not {"use_cpu", "bf16", "fp16"} & set(
        common_args("/tmp/x", steps=10, batch_size=2, learning_rate=1e-3, seed=0)
    )


def test_a_gpu_job_trains_on_its_gpus_with_bf16_where_the_card_has_it(monkeypatch):
    # A GPU job once trained on its CPUs (use_cpu=True was fixed).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert device_args(1) == device_args() == {"use_cpu": False, "bf16": True, "fp16": False}
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # e.g. a V100: fp32, not fp16
    assert device_args(4) == {"use_cpu": False, "bf16": False, "fp16": False}


def test_a_job_that_asked_for_no_gpu_leaves_a_visible_one_alone(monkeypatch):
    # On a node without Slurm's device cgroups every GPU is visible, and one the job did not ask for is another's.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert device_args(0) == {"use_cpu": True, "bf16": False, "fp16": False}


def test_a_gpu_job_whose_torch_sees_no_gpu_says_why_it_trains_on_its_cpus(monkeypatch):
    # A CPU build of torch in a GPU site's runtime, or a test cluster's placeholder GPUs: as the evaluation kit does.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    lines: list[str] = []
    assert device_args(4, lines.append) == {"use_cpu": True, "bf16": False, "fp16": False}
    (line,) = lines
    assert line.startswith("warning: this train job asked the site for 4 GPU(s) (resources.train) but torch")
    assert f"torch {torch.__version__} sees no CUDA device" in line and "CUDA_VISIBLE_DEVICES '0,1,2,3'" in line
    assert "a CUDA build of torch in the site's runtime trains on the GPUs" in line
    device_args(0, lines.append), device_args(None, lines.append)
    assert len(lines) == 1, "only a job that asked for GPUs is told it has none"


def test_a_train_job_asks_for_what_its_site_request_holds(tmp_path):
    # The plugin's job: its resources (gpus_total, all nodes'); none on the embedded default.
    local = load_site("local", SITES).request("train").snakemake_resources()
    assert "gpus_total" not in local and requested_gpus(SimpleNamespace(supervise=None), local) == 0
    alps = load_site("alps", SITES).request("train").snakemake_resources()
    assert requested_gpus(SimpleNamespace(supervise=None), alps) == alps["gpus_total"] == 4
    # A machine without Slurm whose site asks for a GPU: gpus_total too (a `--resources gpus_total=N` cap).
    site_file = tmp_path / "box.yaml"
    site_file.write_text("name: box\nscheduler: local\nresources:\n  default: {threads: 1}\n  train: {gpus: 1}\n")
    box = load_site(str(site_file), SITES).request("train")
    assert requested_gpus(SimpleNamespace(supervise=None), box.snakemake_resources()) == 1
    # A supervised job: its own request (the login-node rule's resources are what it holds for it, helpers too).
    supervised = SimpleNamespace(supervise=SimpleNamespace(request=load_site("alps", SITES).request("train")))
    assert requested_gpus(supervised, {"gpus_total": 5}) == 4
