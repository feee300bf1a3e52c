"""Evaluate a local HF model on a verl-format parquet with inspect-ai.

The inspect ``.eval`` log is the source of truth: ``metrics_from_log`` derives eval.json from it,
and ``inspect view`` can browse it. Scoring uses ``ptflow.stages.scoring`` (the same rule as GRPO).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

SCORER_NAME = "gsm8k_strict"


def _samples_from_parquet(test_parquet: str) -> list:
    import pandas as pd
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser

    from ptflow.stages.data.verl_format import validate_verl_frame

    df = pd.read_parquet(test_parquet)
    validate_verl_frame(df)
    kinds = {"user": ChatMessageUser, "system": ChatMessageSystem, "assistant": ChatMessageAssistant}
    samples = []
    for row in df.itertuples(index=False):
        index = int(row.extra_info["index"])
        samples.append(
            Sample(
                id=index,
                input=[kinds[m["role"]](content=m["content"]) for m in row.prompt],
                target=row.reward_model["ground_truth"],
                metadata={"index": index, "data_source": row.data_source},
            )
        )
    return samples


def _gsm8k_strict_scorer():
    # Built lazily so importing this module does not import inspect_ai.
    from inspect_ai.scorer import Score, Target, accuracy, scorer, stderr
    from inspect_ai.solver import TaskState

    from ptflow.stages.scoring import extract_answer, gsm8k_score

    @scorer(metrics=[accuracy(), stderr()], name=SCORER_NAME)
    def gsm8k_strict():
        async def score(state: TaskState, target: Target) -> Score:
            completion = state.output.completion
            return Score(
                value=gsm8k_score(completion, target.text),
                answer=extract_answer(completion),
                explanation=completion,
            )

        return score

    return gsm8k_strict


def verl_parquet_task(test_parquet: str, name: str):
    """An inspect Task: the parquet's chat prompts, ``generate()``, scored by ``gsm8k_strict``."""
    from inspect_ai import Task
    from inspect_ai.dataset import MemoryDataset
    from inspect_ai.solver import generate

    dataset = MemoryDataset(_samples_from_parquet(os.fspath(test_parquet)), name=name, location=str(test_parquet))
    return Task(name=name, dataset=dataset, solver=generate(), scorer=_gsm8k_strict_scorer()())


def _force_hf_offline() -> None:
    """No Hub traffic: inspect resolves model info for the name "local" via AutoConfig, which
    online retries for ~25 s (DNS failures with backoff) before giving up."""
    import sys

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    # huggingface_hub reads the env once at import; patch the constant if it is already loaded.
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True


def run_inspect_eval(
    model_path, test_parquet, log_dir, *, task_name: str, max_tokens: int, limit: int | None = None
) -> pathlib.Path:
    """Greedy-evaluate the HF model dir ``model_path``; return the path of the one ``.eval`` log written.

    The log is written to a private temp dir and moved into ``log_dir`` as ``<task_name>.eval``
    (a fixed name the workflow can declare). It is kept on failure too, for ``inspect view``.
    """
    _force_hf_offline()
    import inspect_ai

    task = verl_parquet_task(os.fspath(test_parquet), task_name)
    n = len(task.dataset) if limit is None else min(limit, len(task.dataset))
    log_dir = pathlib.Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=log_dir, prefix=".inspect-"))
    try:
        logs = inspect_ai.eval(
            task,
            model="hf/local",
            model_args={"model_path": os.fspath(model_path), "device": "cpu", "do_sample": False},
            max_tokens=max_tokens,
            limit=limit,
            log_dir=str(tmp),
            log_format="eval",
            display="none",
            # The hf provider batches up to max_connections requests and otherwise waits 2 s for
            # more to arrive: one batch holding every sample avoids that idle wait.
            max_connections=max(n, 1),
            max_samples=max(n, 1),
            fail_on_error=True,
            # No live sample buffer (sqlite) during the run: only the final log matters here.
            log_realtime=False,
            score_display=False,
        )
        written = sorted(tmp.glob("*.eval"))
        if len(logs) != 1 or len(written) != 1:
            raise RuntimeError(f"expected one inspect log, got {len(logs)} results / files {written}")
        dest = log_dir / f"{task_name}.eval"
        os.replace(written[0], dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log = logs[0]
    if log.status != "success":
        err = log.error.message if log.error else "no error message recorded"
        raise RuntimeError(f"inspect eval of {model_path} on {test_parquet} ended {log.status!r}: {err} (log: {dest})")
    return dest


def metrics_from_log(log_path) -> dict:
    """``{"accuracy", "stderr", "n", "scorer"}`` read back from an inspect log (header only)."""
    from inspect_ai.log import read_eval_log

    log = read_eval_log(os.fspath(log_path), header_only=True)
    if log.status != "success" or log.results is None:
        raise ValueError(f"{log_path}: eval status {log.status!r}, no results to read")
    for score in log.results.scores:
        if score.name == SCORER_NAME:
            return {
                "accuracy": float(score.metrics["accuracy"].value),
                "stderr": float(score.metrics["stderr"].value),
                "n": int(score.scored_samples if score.scored_samples is not None else log.results.completed_samples),
                "scorer": SCORER_NAME,
            }
    raise ValueError(f"{log_path}: no {SCORER_NAME!r} scorer in {[s.name for s in log.results.scores]}")
