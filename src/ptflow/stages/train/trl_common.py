"""Shared helpers for the TRL trainers: dataset loading, logging callback, atomic model saving."""

from __future__ import annotations

import os
from collections.abc import Callable


def read_verl_rows(train_parquet) -> list[dict]:
    """Validated verl rows as plain Python objects (numpy arrays from parquet -> lists)."""
    import pandas as pd

    from ptflow.stages.data.verl_format import validate_verl_frame

    df = pd.read_parquet(os.fspath(train_parquet))
    validate_verl_frame(df)
    rows = []
    for row in df.itertuples(index=False):
        rows.append(
            {
                "prompt": [{"role": m["role"], "content": m["content"]} for m in row.prompt],
                "ground_truth": row.reward_model["ground_truth"],
                "answer": row.extra_info["answer"],
            }
        )
    return rows


def common_args(
    output_dir: str, *, steps: int, batch_size: int, learning_rate: float, seed: int, warmup_steps: int = 0
) -> dict:
    """TrainingArguments shared by SFT and GRPO: CPU, fp32, no checkpoints, no reporting."""
    return dict(
        output_dir=output_dir,
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=1,
        learning_rate=learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=warmup_steps,
        weight_decay=0.0,
        seed=seed,
        data_seed=seed,
        use_cpu=True,
        bf16=False,  # TRL defaults bf16=True; on CPU that is slower and lossy for tiny models
        fp16=False,
        save_strategy="no",
        report_to="none",
        logging_steps=max(1, steps // 10),
        disable_tqdm=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
    )


def log_callback(log: Callable[[str], None]):
    """A TrainerCallback forwarding each log dict as one line ``step N: k=v ...``."""
    from transformers import TrainerCallback

    class _Log(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                items = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in logs.items())
                log(f"step {state.global_step}: {items}")

    return _Log()


def quiet_trainer(trainer) -> None:
    """Drop the Trainer's own stdout printer: ``log_callback`` already reports each log once."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def train_and_save(trainer, tokenizer, output_dir):
    """Train (reporting through ``log_callback`` only) and save the final model; the Trainer's TrainOutput."""
    quiet_trainer(trainer)
    result = trainer.train()
    save_final(trainer, tokenizer, output_dir)
    return result


def save_final(trainer, tokenizer, output_dir) -> None:
    """save_pretrained model + tokenizer into ``output_dir`` via a temp sibling dir and a rename."""
    from ptflow.files import staged_dir

    model = trainer.model
    # Training may leave sampling settings in the generation config; evals must stay greedy.
    model.generation_config.do_sample = False
    for attr in ("temperature", "top_p", "top_k"):
        setattr(model.generation_config, attr, None)
    with staged_dir(output_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
