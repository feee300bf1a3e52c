"""What the TRL trainers (``sft``, ``grpo``) share: the settings both kinds take, the model and tokenizer they start
from, dataset loading, the training arguments and device, logging callback, resumable training, atomic model saving,
and the ``run(job)`` adapter from a train job to a trainer. Each trainer's module keeps only its own part: its
dataset's shape, its TRL config and trainer, its own settings and results.

Resuming is transformers' own: ``trainer.train(resume_from_checkpoint=...)`` restores weights, optimizer, scheduler,
RNG states and the step, and skips the batches already trained. What ptflow adds (:func:`train_and_save`):

- the Trainer writes its ``checkpoint-<n>`` (every ``save_freq`` steps) into this attempt's own staging dir, and
  :class:`ResumeCallback` promotes each finished one to ``step_<n>`` of the cell's ``ResumeDir`` with one rename
  (transformers writes checkpoint dirs in place: a job killed mid-save must not leave a half checkpoint to resume);
- on the time-limit warning or SIGTERM (``SaveOnWarning``) the Trainer saves at the next step and stops, and the
  call raises ``StoppedToResume``: the job ends, the next attempt resumes from that step.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar


@dataclass(frozen=True, kw_only=True)
class TrlSettings:
    """The params every TRL kind takes (the agent's ``params`` in config, as the train job carries them); a kind's
    own settings add its fields to these. Keyword-only, so a kind's required fields may follow these defaults."""

    scratch_prefix: ClassVar[str] = "ptflow-trl-"  # the temp checkpoint dir's name where nothing resumes

    steps: int
    batch_size: int
    learning_rate: float
    seed: int
    save_freq: int | None = None
    save_minutes: float | None = None
    gradient_checkpointing: bool = True

    def trainer_args(self, output_dir: str, *, batch_size: int, warmup_steps: int = 0) -> dict:
        """:func:`common_args` for these settings; ``batch_size`` is the per-device batch the kind computes from
        its own settings (GRPO's counts completions, not prompts)."""
        return common_args(
            output_dir,
            steps=self.steps,
            batch_size=batch_size,
            learning_rate=self.learning_rate,
            seed=self.seed,
            warmup_steps=warmup_steps,
            save_freq=self.save_freq,
            gradient_checkpointing=self.gradient_checkpointing,
        )


def run_trainer(train: Callable[..., dict], settings_type: type[TrlSettings], job) -> dict:
    """A TRL kind's ``run(job)``: ``job`` (a ``ptflow.stages.train.cell.Training``) params as ``settings_type``,
    its start model, train split, staging dir, resume state, log and the GPUs it asked for, given to ``train``
    (``train_sft``, ``train_grpo``)."""
    hp = settings_type(**job.params)
    return train(job.start_model, job.train_parquet, job.out, hp, resume=job.resume, log=job.log, gpus=job.run.gpus)


def train_trl(
    model_path,
    train_parquet,
    output_dir,
    hp: TrlSettings,
    make_trainer: Callable[[str, dict, list[dict], Any, Any], Any],
    *,
    resume=None,
    log: Callable[[str], None] = print,
    gpus: int | None = None,
) -> dict:
    """What every TRL training does around its own trainer: the device the job's ``gpus`` decide
    (:func:`device_args`), the train split's rows (:func:`read_verl_rows`), the start model and its tokenizer, this
    attempt's checkpoint dir (:func:`trainer_output_dir`); ``make_trainer(checkpoint_dir, device_args, rows, model,
    tokenizer)`` builds the kind's Trainer, which then trains (resuming from ``resume``) and saves the final model to
    ``output_dir`` (:func:`train_and_save`). Returns train_and_save's dict and ``seconds``, the whole call's."""
    t0 = time.perf_counter()
    device = device_args(gpus, log)
    rows = read_verl_rows(train_parquet)
    model, tokenizer = load_start_model(model_path)
    with trainer_output_dir(resume, hp.scratch_prefix) as scratch:
        trainer = make_trainer(scratch, device, rows, model, tokenizer)
        result = train_and_save(trainer, tokenizer, output_dir, resume=resume, save_minutes=hp.save_minutes, log=log)
    return {**result, "seconds": time.perf_counter() - t0}


def load_start_model(model_path):
    """The model to train (fp32 master weights; the device decides autocast, :func:`device_args`) and its
    tokenizer, both from ``model_path``. Returns ``(model, tokenizer)``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.fspath(model_path))
    model = AutoModelForCausalLM.from_pretrained(os.fspath(model_path), dtype="float32")
    return model, tokenizer


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


# Without params.save_freq a checkpoint is taken when this much training time passed since the last one: what a
# kill without warning can lose at most, and no checkpoint cost at all for runs shorter than that (the demo).
DEFAULT_SAVE_MINUTES = 10.0


def common_args(
    output_dir: str,
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    warmup_steps: int = 0,
    save_freq: int | None = None,
    gradient_checkpointing: bool = True,
) -> dict:
    """TrainingArguments shared by SFT and GRPO (with :func:`device_args`, which the trainers ask first): a full
    checkpoint (optimizer, scheduler, RNG) every ``save_freq`` steps into ``output_dir`` (this attempt's staging dir;
    None: by time, see :func:`resume_callback`), no reporting. ``gradient_checkpointing`` (TRL's default, True)
    recomputes activations in the backward pass: less memory for large models, about a fifth more time per step for
    tiny ones (the same weights either way)."""
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
        gradient_checkpointing=gradient_checkpointing,
        save_strategy="steps",
        save_steps=save_freq or steps + 1,  # None: never by step count, the callback saves by time
        save_only_model=False,  # optimizer, scheduler and RNG state too: a resumed run continues, not restarts
        report_to="none",
        logging_steps=max(1, steps // 10),
        disable_tqdm=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
    )


def device_args(gpus: int | None = None, log: Callable[[str], None] = print) -> dict:
    """Where the Trainer trains. ``gpus`` is what the job asked its site for (``resources.train``): any, the job's
    GPUs (bf16 autocast over fp32 master weights where the card supports it, TRL's own default); none, the CPUs in
    fp32 (bf16 there is slower and lossy for tiny models), even where a GPU is visible: on a node without Slurm's
    device cgroups it may be another job's. ``None`` (a direct call: the scripted agent, tests,
    bench/gpu_check.py): what torch sees. A GPU job whose torch sees no GPU (a CPU build of torch in the site's
    runtime, or a test cluster's placeholder GPUs) trains on its CPUs and says so in its log, as the evaluation kit
    does (``kit/evaluate.py: allocation_device``); ``ptflow doctor`` asks the jobs' torch before a run.
    The first GPU check found ``use_cpu=True`` fixed here: a GPU job trained on its CPUs and left the GPUs idle."""
    import torch

    cuda = torch.cuda.is_available()
    on_gpu = cuda if gpus is None else gpus > 0
    if on_gpu and not cuda:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        log(
            f"warning: this train job asked the site for {gpus} GPU(s) (resources.train) but torch "
            f"{torch.__version__} sees no CUDA device (torch.version.cuda {torch.version.cuda}, CUDA_VISIBLE_DEVICES "
            f"{'unset' if visible is None else repr(visible)}): training on the CPUs; a CUDA build of torch in the "
            "site's runtime trains on the GPUs"
        )
        on_gpu = False
        from ptflow.jobenv import record_fact

        record_fact("no_gpu", gpus_requested=gpus, torch=torch.__version__, torch_cuda=torch.version.cuda,
                    cuda_visible_devices=visible)  # fmt: skip
    return dict(use_cpu=not on_gpu, bf16=on_gpu and torch.cuda.is_bf16_supported(), fp16=False)


@contextlib.contextmanager
def trainer_output_dir(resume, prefix: str) -> Iterator[str]:
    """Where the Trainer writes its checkpoints: this attempt's staging dir in the cell's ResumeDir (on scratch, so a
    requeue finds what it promoted), or a temp dir when nothing resumes (tests, an agent's own run)."""
    if resume is None:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            yield tmp
        return
    import shutil

    staging = resume.attempt_dir()
    try:
        yield str(staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


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


def resume_callback(resume, warning, log: Callable[[str], None], save_seconds: float | None = None):
    """A TrainerCallback that (1) promotes each checkpoint the Trainer finished to ``step_<n>`` of ``resume``,
    (2) turns a warning into "save at this step and stop", (3) saves when ``save_seconds`` of training passed since
    the last checkpoint (no ``save_freq``), (4) skips the Trainer's extra save at the last step (the final model is
    saved by :func:`save_final`; a full checkpoint there would only cost time and disk)."""
    from transformers import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    class _Resume(TrainerCallback):
        last_save = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            if warning is not None and warning.requested and state.global_step < state.max_steps:
                control.should_save = True
                control.should_training_stop = True
                log(f"{warning.reason} received: saving step {state.global_step} and stopping")
            elif state.global_step >= state.max_steps and state.global_step % args.save_steps:
                control.should_save = False
            elif save_seconds and time.monotonic() - self.last_save >= save_seconds:
                control.should_save = True
            return control

        def on_save(self, args, state, control, **kwargs):
            self.last_save = time.monotonic()
            if resume is None or not args.should_save:
                return control
            src = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            if src.is_dir():
                dest = resume.promote_step(src, state.global_step)
                log(f"checkpoint step {state.global_step} -> {dest or 'already saved by another attempt'}")
            return control

    return _Resume()


def train_and_save(
    trainer,
    tokenizer,
    output_dir,
    *,
    resume=None,
    save_minutes: float | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """Train (resuming from the newest step of ``resume`` if there is one), then save the final model.

    Returns ``{"step", "train_loss", "resumed_from"}``; ``train_loss`` is the mean loss per step over the whole run,
    resumed parts included (the Trainer's own figure covers only its last ``train()`` call). Raises
    ``StoppedToResume`` when a warning or SIGTERM stopped the run after saving. Without a step-based ``save_freq``
    (``TrainingArguments.save_steps`` beyond the run) a checkpoint is taken every ``save_minutes`` of training
    (default :data:`DEFAULT_SAVE_MINUTES`)."""
    from ptflow.cluster.preempt import SaveOnWarning, StoppedToResume

    quiet_trainer(trainer)
    log(f"training on {trainer.args.device} ({'bf16 autocast' if trainer.args.bf16 else 'fp32'})")
    found = resume.newest() if resume is not None else None
    if found:
        log(f"resuming from {found[1]} (step {found[0]}): weights, optimizer, scheduler and RNG state")
    with SaveOnWarning(term=True) as warning:
        by_time = trainer.args.save_steps > trainer.args.max_steps
        save_seconds = (save_minutes or DEFAULT_SAVE_MINUTES) * 60 if by_time else None
        trainer.add_callback(resume_callback(resume, warning, log, save_seconds))
        result = trainer.train(resume_from_checkpoint=str(found[1]) if found else None)
    state = trainer.state
    if state.global_step < state.max_steps:
        saved = resume.newest() if resume is not None else None
        raise StoppedToResume(
            f"{warning.reason} stopped training at step {state.global_step} of {state.max_steps}; "
            + (f"saved {saved[1]}: the next attempt resumes there" if saved else "nothing saved to resume from"),
            step=saved[0] if saved else None,
            reason=warning.reason,
        )
    save_final(trainer, tokenizer, output_dir)
    return {
        "step": int(state.global_step),
        "train_loss": run_loss(state.log_history, float(result.training_loss), resumed=bool(found)),
        "resumed_from": found[0] if found else None,
    }


def run_loss(log_history: list[dict], session_loss: float, *, resumed: bool) -> float:
    """The whole run's mean loss per step: the Trainer's own figure when one ``train()`` call did every step, else
    from the log history (kept in the checkpoints), each logged mean weighted by the steps it covers."""
    if not resumed:
        return session_loss
    total, last = 0.0, 0
    for entry in log_history:
        if "loss" in entry and "step" in entry:
            total += float(entry["loss"]) * (int(entry["step"]) - last)
            last = int(entry["step"])
    return total / last if last else session_loss


def save_final(trainer, tokenizer, output_dir) -> None:
    """save_pretrained model + tokenizer into ``output_dir`` via a temp sibling dir and a rename."""
    from ptflow.files import staged_dir

    if not trainer.is_world_process_zero():
        return  # another rank of a distributed run: rank 0 writes the model
    model = trainer.model
    # Training may leave sampling settings in the generation config; evals must stay greedy.
    model.generation_config.do_sample = False
    for attr in ("temperature", "top_p", "top_k"):
        setattr(model.generation_config, attr, None)
    with staged_dir(output_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
