"""Supervised fine-tuning with TRL's SFTTrainer on a verl parquet (the job's GPUs, or the CPU where it has none).

What it shares with GRPO (settings, model loading, arguments, resumable training, the ``run`` adapter) lives in
``ptflow.stages.train.trl_common``; here: the prompt -> answer dataset and SFT's own config."""

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


@dataclass(frozen=True, kw_only=True)
class SftSettings(TrlSettings):
    """Kind ``trl-sft``'s params: the shared TRL settings, none of its own."""


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
    t0 = time.perf_counter()
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    device = device_args(gpus, log)
    rows = read_verl_rows(train_parquet)
    dataset = Dataset.from_list(
        [{"prompt": r["prompt"], "completion": [{"role": "assistant", "content": r["answer"]}]} for r in rows]
    )
    model, tokenizer = load_start_model(model_path)
    with trainer_output_dir(resume, "ptflow-sft-") as scratch:
        config = SFTConfig(
            # tiny models want a high lr; warmup avoids early loss spikes
            **hp.trainer_args(scratch, batch_size=hp.batch_size, warmup_steps=hp.steps // 10),
            **device,
            completion_only_loss=True,
            max_length=256,
            dataset_num_proc=None,
        )
        trainer = SFTTrainer(
            model=model,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[log_callback(log)],
        )
        result = train_and_save(trainer, tokenizer, output_dir, resume=resume, save_minutes=hp.save_minutes, log=log)
    seconds = time.perf_counter() - t0
    log(f"sft done: {result['step']} steps, train_loss={result['train_loss']:.4f}, {seconds:.1f}s")
    return {**result, "seconds": seconds}


def run(job) -> dict:
    """Kind ``trl-sft`` (a ``ptflow.stages.train.cell.TrainJob``)."""
    return run_trainer(train_sft, SftSettings, job)
