"""The toy task ``ptflow``: the workflow's verl-format test parquet as an inspect task, scored with verl's GSM8K rule
(``ptflow.stages.gsm8k_answer``, the same rule GRPO is rewarded by). The evaluation kit resolves the task spec
``ptflow`` to :func:`verl_parquet_task`; it runs like every other task (``ptflow.stages.evaluate.run``)."""

from __future__ import annotations

import os

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

    from ptflow.stages.gsm8k_answer import extract_answer, gsm8k_score

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
