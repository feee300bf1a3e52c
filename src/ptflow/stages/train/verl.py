"""verl agents (kind ``verl``): the single place verl is invoked.

Variants: ``ppo-gsm8k`` (verl's GSM8K PPO quickstart, ``python -m verl.trainer.main_ppo``) and ``dapo`` (the DAPO
recipe for Qwen3-4B on 2 nodes x 4 GPUs from the CSCS Alps / NSCC guide, ``python -m recipe.dapo.main_dapo`` from a
verl checkout). The train job is one multi-node Slurm allocation: ``ptflow.launch.ray`` brings up Ray across it
and runs the trainer on the head; the newest checkpoint is then merged into an HF model (verl's model merger) for
the evaluate rule. Raw verl checkpoints (~47 GB each for Qwen3-4B) stay on scratch beside the cell's checkpoint, so a
requeued job resumes from the newest one (``trainer.resume_mode=auto``).

verl cannot train on this machine (no GPU): the command lines are unit-tested against the documents; the launcher
they run under is proven on the two-node test cluster with a real Ray program.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Keys ptflow sets from the cell, the site and the allocation; an agent's `overrides` may not change them.
MANAGED = (
    "data.train_files",
    "data.val_files",
    "actor_rollout_ref.model.path",
    "critic.model.path",
    "trainer.nnodes",
    "trainer.n_gpus_per_node",
    "trainer.default_local_dir",
    "trainer.save_freq",
    "trainer.resume_mode",
    "trainer.esi_redundant_time",
)

# verl's GSM8K PPO quickstart (docs "Quickstart: PPO training on GSM8K"), sized for the node count given.
PPO_GSM8K = {
    "data.train_batch_size": 256,
    "data.max_prompt_length": 512,
    "data.max_response_length": 512,
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 64,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 8,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.4,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 4,
    "critic.optim.lr": 1e-5,
    "critic.ppo_micro_batch_size_per_gpu": 4,
    "algorithm.kl_ctrl.kl_coef": 0.001,
    "trainer.logger": "console",
    "trainer.val_before_train": False,
    "trainer.test_freq": 10,
    "trainer.total_epochs": 15,
}

# The DAPO recipe (Clip-Higher, dynamic sampling, token-level loss, overlong shaping) for Qwen3-4B on 2 x 4 GPUs.
DAPO = {
    "algorithm.adv_estimator": "grpo",
    "algorithm.use_kl_in_reward": False,
    "algorithm.kl_ctrl.kl_coef": 0.0,
    "algorithm.filter_groups.enable": True,
    "algorithm.filter_groups.metric": "acc",
    "algorithm.filter_groups.max_num_gen_batches": 10,
    "data.prompt_key": "prompt",
    "data.truncation": "left",
    "data.max_prompt_length": 2048,
    "data.max_response_length": 8192,
    "data.gen_batch_size": 96,
    "data.train_batch_size": 32,
    "actor_rollout_ref.rollout.n": 16,
    "actor_rollout_ref.actor.use_kl_loss": False,
    "actor_rollout_ref.actor.kl_loss_coef": 0.0,
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.actor.clip_ratio_high": 0.28,
    "actor_rollout_ref.actor.clip_ratio_c": 10.0,
    "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    "actor_rollout_ref.actor.use_dynamic_bsz": True,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 16,
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 20480,
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.fsdp_config.param_offload": True,
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": True,
    "actor_rollout_ref.model.use_remove_padding": True,
    "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.8,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
    "actor_rollout_ref.rollout.max_num_batched_tokens": 10240,
    "reward_model.reward_manager": "dapo",
    "reward_model.overlong_buffer.enable": True,
    "reward_model.overlong_buffer.len": 4096,
    "reward_model.overlong_buffer.penalty_factor": 1.0,
    "trainer.logger": "console",
    "trainer.val_before_train": False,
    "trainer.test_freq": 10,
    "trainer.total_epochs": 1,
}

VARIANTS = {
    "ppo-gsm8k": (["-m", "verl.trainer.main_ppo"], PPO_GSM8K),
    "dapo": (["-m", "recipe.dapo.main_dapo"], DAPO),
}


def _value(v) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    return str(v)


@dataclass(frozen=True)
class VerlRun:
    """One cell's verl run as its overrides say it: the variant, the model, the data (from the preprocessing rule),
    the allocation's size, checkpoints on scratch, the save frequency, the agent's overrides and the save deadline
    (``ptflow.cluster.preempt.deadline_settings``)."""

    variant: str
    model_path: str
    train_files: str
    val_files: str
    nnodes: int
    gpus_per_node: int
    checkpoint_dir: str
    save_freq: int = 10
    overrides: dict | None = None
    deadline: dict | None = None


def trainer_overrides(r: VerlRun) -> list[str]:
    """verl's Hydra overrides (``key=value``) for one cell: the variant's recipe, the agent's overrides, then
    what ptflow manages (data from the preprocessing rule, model from the HF cache, allocation, scratch)."""
    variant = r.variant
    if variant not in VARIANTS:
        raise ValueError(f"verl variant {variant!r} is unknown; known: {', '.join(VARIANTS)}")
    overrides = dict(r.overrides or {})
    clash = sorted(set(overrides) & set(MANAGED))
    if clash:
        raise ValueError(
            f"agent params.overrides sets {', '.join(clash)}, which ptflow derives from the cell, site and "
            "allocation; remove them (use params.save_freq for the save frequency)"
        )
    settings = {**VARIANTS[variant][1], **overrides}
    managed = {
        "data.train_files": r.train_files,
        "data.val_files": r.val_files,
        "actor_rollout_ref.model.path": r.model_path,
        "trainer.nnodes": r.nnodes,
        "trainer.n_gpus_per_node": r.gpus_per_node,
        "trainer.default_local_dir": r.checkpoint_dir,  # scratch: ~47 GB per checkpoint, never $HOME
        "trainer.save_freq": r.save_freq,
        "trainer.resume_mode": "auto",  # a requeued job resumes from the newest checkpoint
        **(r.deadline or {}),  # save before the job's end (ptflow.cluster.preempt.deadline_settings)
    }
    if variant == "ppo-gsm8k":
        managed["critic.model.path"] = r.model_path
    return [f"{k}={_value(v)}" for k, v in {**settings, **managed}.items()]


def driver_argv(python: str, variant: str, overrides: list[str]) -> list[str]:
    return [python, *VARIANTS[variant][0], *overrides]


def newest_checkpoint(checkpoint_dir: str | Path) -> Path:
    """``global_step_<n>`` named by verl's ``latest_checkpointed_iteration.txt``, else the highest one."""
    root = Path(checkpoint_dir)
    marker = root / "latest_checkpointed_iteration.txt"
    if marker.is_file():
        step = root / f"global_step_{int(marker.read_text().strip())}"
        if step.is_dir():
            return step
    steps = [
        (int(m.group(1)), p) for p in root.glob("global_step_*") if (m := re.fullmatch(r"global_step_(\d+)", p.name))
    ]
    if not steps:
        raise FileNotFoundError(
            f"verl wrote no checkpoint under {root} (no global_step_*): raise trainer.total_epochs/steps or lower "
            "params.save_freq so at least one save happens"
        )
    return max(steps)[1]


def merge_argv(python: str, step_dir: str | Path, target_dir: str | Path) -> list[str]:
    """verl's model merger: the FSDP actor shards of one step into an HF-format model for evaluation."""
    return [
        python,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(Path(step_dir) / "actor"),
        "--target_dir",
        str(target_dir),
    ]


def state_dir(out: Path) -> Path:
    """Beside the cell's checkpoint on scratch, outside the staging dir train_cell replaces: raw verl checkpoints
    and the Ray logs survive a failed or requeued job."""
    name = out.name.removeprefix(".").split(".partial", 1)[0]  # .<agent>.partial-<attempt>: one state per cell
    return out.parent / f"{name}.verl"


def train_verl(cell) -> dict:
    """Run the verl trainer on a Ray cluster over this job's allocation, then merge its newest checkpoint into
    the cell's staging dir in HF format (``cell``: a ``ptflow.stages.train.cell.Training``). Needs GPUs and verl:
    it does not run on the CPU test machine."""
    from ptflow.cluster import slurm
    from ptflow.cluster.preempt import deadline_settings, job_deadline
    from ptflow.cluster.runtime import node_commands
    from ptflow.launch.ray import job_from_allocation, run, run_step

    params, runtime, out, log = cell.params, cell.runtime, cell.out, cell.log
    train_parquet = cell.train_parquet
    variant = params.get("variant", "ppo-gsm8k")
    if variant not in VARIANTS:
        raise ValueError(f"agent params.variant {variant!r} is not a verl variant; use {' or '.join(VARIANTS)}")
    rt = node_commands(runtime)
    state = state_dir(Path(out))
    ckpts = state / "checkpoints"
    ckpts.mkdir(parents=True, exist_ok=True)
    # the verl checkout: the agent's, else the one the site's verl venv is installed from (rule env)
    checkout = params.get("checkout") or (runtime or {}).get("checkout")
    job = job_from_allocation([], state / "logs", runtime=rt, workdir=checkout, driver_handles_warning=False)
    nnodes, cpus, gpus = slurm.job_per_node(str(job.job_id))
    job.cpus_per_node, job.gpus_per_node = cpus, gpus
    env, deadline = deadline_settings("verl", job_deadline(str(job.job_id), cell.warn_seconds))
    job.env.update(env)
    overrides = trainer_overrides(
        VerlRun(
            variant=variant,
            model_path=cell.start_model,
            train_files=str(Path(train_parquet).resolve()),
            val_files=str(Path(train_parquet).resolve().with_name("test.parquet")),
            nnodes=nnodes,
            gpus_per_node=gpus,
            checkpoint_dir=str(ckpts),
            save_freq=params.get("save_freq", 10),
            overrides=params.get("overrides"),
            deadline=deadline,
        )
    )
    job.driver = driver_argv(rt.python, variant, overrides)
    rc = run(job, log=log)
    if rc != 0:
        raise RuntimeError(f"verl ({variant}) exited with {rc}; logs in {job.job_dir}")
    step = newest_checkpoint(ckpts)
    run_step(job, merge_argv(rt.python, step, out), log=log)
    return {"step": int(step.name.rsplit("_", 1)[1]), "train_loss": None}


def run(job) -> dict:
    """Kind ``verl``: multi-node, a Ray cluster over the job's allocation (``ptflow.launch.ray``)."""
    return train_verl(job)
