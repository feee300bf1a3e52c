"""Supervised fine-tuning with TRL's SFTTrainer on a verl parquet (the job's GPUs, or the CPU where it has none).

What it shares with GRPO (settings, device, start model, checkpoints and resuming, the ``run`` adapter) lives in
``ptflow.stages.train.trl_common``; here: the prompt -> answer dataset and SFT's own config."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from ptflow.stages.train.trl_common import TrlSettings, log_callback, run_trainer, train_trl


@dataclass(frozen=True, kw_only=True)
class SftSettings(TrlSettings):
    """Kind ``trl-sft``'s params: the shared TRL settings, none of its own."""

    scratch_prefix: ClassVar[str] = "ptflow-sft-"


def train_sft(
    model_path,
    train_parquet,
    output_dir,
    hp: SftSettings,
    *,
    resume=None,
    log: Callable[[str], None] = print,
    gpus: int | None = None,
) -> dict:
    """Fine-tune ``model_path`` on prompt -> extra_info answer with the settings ``hp``; save the final model to
    ``output_dir``.

    Prompt-completion format with conversational messages, so TRL applies the chat template and
    computes the loss on the completion tokens only (the assistant turn incl. its EOS). A full checkpoint every
    ``save_freq`` steps (default: every ``save_minutes`` of training, 10) and on the time-limit warning goes to
    ``resume`` (a ``ptflow.cluster.preempt.ResumeDir``), and the run resumes from its newest one. ``gpus``: what the
    job asked its site for, which decides the device (``trl_common.device_args``; None: what torch sees).
    Returns ``{"step", "train_loss", "seconds", "resumed_from"}``.
    """

    def sft_trainer(scratch: str, device: dict, rows: list[dict], model, tokenizer):
        from datasets import Dataset
        from trl import SFTConfig, SFTTrainer

        dataset = Dataset.from_list(
            [{"prompt": r["prompt"], "completion": [{"role": "assistant", "content": r["answer"]}]} for r in rows]
        )
        config = SFTConfig(
            # tiny models want a high lr; warmup avoids early loss spikes
            **hp.trainer_args(scratch, batch_size=hp.batch_size, warmup_steps=hp.steps // 10),
            **device,
            completion_only_loss=True,
            max_length=256,
            dataset_num_proc=None,
        )
        return SFTTrainer(
            model=model,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[log_callback(log)],
        )

    result = train_trl(model_path, train_parquet, output_dir, hp, sft_trainer, resume=resume, log=log, gpus=gpus)
    log(f"sft done: {result['step']} steps, train_loss={result['train_loss']:.4f}, {result['seconds']:.1f}s")
    return result


def run(job) -> dict:
    """Kind ``trl-sft`` (a ``ptflow.stages.train.cell.Training``)."""
    return run_trainer(train_sft, SftSettings, job)
