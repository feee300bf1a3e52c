"""GRPO with TRL's GRPOTrainer on a verl parquet (the job's GPUs, or the CPU where it has none); reward = the GSM8K
strict rule.

What it shares with SFT (settings, model loading, arguments, resumable training, the ``run`` adapter) lives in
``ptflow.stages.train.trl_common``; here: the reward, GRPO's own settings and config, and its reward mean."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ptflow.stages.train.trl_common import (
    TrlSettings,
    device_args,
    load_start_model,
    log_callback,
    read_verl_rows,
    run_trainer,
    train_and_save,
    trainer_output_dir,
)


def completion_text(completion) -> str:
    """The generated text of one TRL completion.

    With conversational prompts TRL passes each completion as a message list
    (``[{"role": "assistant", "content": text}]``), not a string; scoring ``str()`` of that list
    would find no ``#### n`` at the end of the clipped tail and reward everything 0.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    return "".join(completion_text(m) for m in completion if not isinstance(m, dict) or m.get("role") == "assistant")


def gsm8k_reward(prompts, completions, ground_truth, **kwargs) -> list[float]:
    """TRL reward function: ``gsm8k_score`` of each completion against its row's ground truth."""
    from ptflow.stages.gsm8k_answer import gsm8k_score

    return [gsm8k_score(completion_text(c), gt) for c, gt in zip(completions, ground_truth, strict=True)]


@dataclass(frozen=True, kw_only=True)
class GrpoSettings(TrlSettings):
    """Kind ``trl-grpo``'s params: the shared TRL settings and the sampling of each prompt's group."""

    num_generations: int
    max_completion_length: int


def train_grpo(
    model_path,
    train_parquet,
    output_dir,
    hp: GrpoSettings,
    *,
    resume=None,
    log: Callable[[str], None] = print,
    gpus: int | None = None,
) -> dict:
    """GRPO-train ``model_path`` with the settings ``hp``; save the final model to ``output_dir`` (checkpoints and
    resuming, and ``gpus``, as in ``ptflow.stages.train.sft.train_sft``).

    ``hp.batch_size`` counts prompts per optimizer step; each prompt gets ``num_generations``
    sampled completions (TRL's per-device batch is ``batch_size * num_generations`` completions).
    Returns ``{"step", "train_loss", "seconds", "reward_mean", "resumed_from"}`` (reward averaged over this
    attempt's steps).
    """
    t0 = time.perf_counter()
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    if hp.num_generations < 2:
        raise ValueError("GRPO needs num_generations >= 2 (advantages are relative within a group)")
    device = device_args(gpus, log)
    rows = read_verl_rows(train_parquet)
    dataset = Dataset.from_list([{"prompt": r["prompt"], "ground_truth": r["ground_truth"]} for r in rows])
    model, tokenizer = load_start_model(model_path)
    rewards: list[float] = []

    def reward_fn(prompts, completions, ground_truth, **kwargs):
        out = gsm8k_reward(prompts, completions, ground_truth)
        rewards.extend(out)
        return out

    reward_fn.__name__ = "gsm8k_strict"
    with trainer_output_dir(resume, "ptflow-grpo-") as scratch:
        config = GRPOConfig(
            **hp.trainer_args(scratch, batch_size=hp.batch_size * hp.num_generations),
            **device,
            num_generations=hp.num_generations,
            max_completion_length=hp.max_completion_length,
            temperature=1.0,
            beta=0.0,  # no reference model: cheaper, and the SFT start point is already on-format
            num_iterations=1,
            steps_per_generation=1,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[reward_fn],
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[log_callback(log)],
        )
        result = train_and_save(trainer, tokenizer, output_dir, resume=resume, save_minutes=hp.save_minutes, log=log)
    seconds = time.perf_counter() - t0
    reward_mean = sum(rewards) / len(rewards) if rewards else float("nan")
    log(
        f"grpo done: {result['step']} steps, train_loss={result['train_loss']:.4f}, "
        f"reward_mean={reward_mean:.3f}, {seconds:.1f}s"
    )
    return {**result, "seconds": seconds, "reward_mean": reward_mean}


def run(job) -> dict:
    """Kind ``trl-grpo`` (a ``ptflow.stages.train.cell.TrainJob``)."""
    return run_trainer(train_grpo, GrpoSettings, job)
