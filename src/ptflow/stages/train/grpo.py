"""GRPO with TRL's GRPOTrainer on a verl parquet (the job's GPUs, or the CPU where it has none); reward = the GSM8K
strict rule.

What it shares with SFT (settings, device, start model, checkpoints and resuming, the ``run`` adapter) lives in
``ptflow.stages.train.trl_common``; here: the reward, GRPO's own settings and config, and its reward mean."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from ptflow.stages.train.trl_common import TrlSettings, log_callback, run_trainer, train_trl


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

    scratch_prefix: ClassVar[str] = "ptflow-grpo-"

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
    if hp.num_generations < 2:
        raise ValueError("GRPO needs num_generations >= 2 (advantages are relative within a group)")
    rewards: list[float] = []

    def reward_fn(prompts, completions, ground_truth, **kwargs):
        out = gsm8k_reward(prompts, completions, ground_truth)
        rewards.extend(out)
        return out

    reward_fn.__name__ = "gsm8k_strict"

    def grpo_trainer(scratch: str, device: dict, rows: list[dict], model, tokenizer):
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer

        dataset = Dataset.from_list([{"prompt": r["prompt"], "ground_truth": r["ground_truth"]} for r in rows])
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
        return GRPOTrainer(
            model=model,
            reward_funcs=[reward_fn],
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[log_callback(log)],
        )

    result = train_trl(model_path, train_parquet, output_dir, hp, grpo_trainer, resume=resume, log=log, gpus=gpus)
    reward_mean = sum(rewards) / len(rewards) if rewards else float("nan")
    log(
        f"grpo done: {result['step']} steps, train_loss={result['train_loss']:.4f}, "
        f"reward_mean={reward_mean:.3f}, {result['seconds']:.1f}s"
    )
    return {**result, "reward_mean": reward_mean}


def run(job) -> dict:
    """Kind ``trl-grpo`` (a ``ptflow.stages.train.cell.Training``)."""
    return run_trainer(train_grpo, GrpoSettings, job)
