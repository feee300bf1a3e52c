"""STAND-IN tasks for the retry-ladder tests (loaded as ``ladder_tasks.py@<task>`` file tasks).

``context_limited``: answers with the real model, but first fails the way an OpenAI-compatible server (vLLM, an API)
fails when a request's token budget does not fit the context window: ``openai.BadRequestError`` with code
``context_length_exceeded``, raised here for budgets above ``context_tokens``. ``out_of_memory_once``: the first
attempt fails with torch's (CUDA) ``OutOfMemoryError``, as a first try can when memory is fragmented, later ones
answer. ``crashing``: fails with an error no budget cures. ``out_of_memory_for_seed``: every attempt of one
evaluation seed (``failing_seed``; the seed of the settings document the attempt runs from) fails with that
OutOfMemoryError where the model's path holds ``failing_model`` ("": every model), the other seeds answer (a seed
whose every stage fails, for the evaluation-seed tests). ``out_of_memory_while``: every attempt fails with that
OutOfMemoryError while the file ``marker`` exists, and answers once it is gone (an evaluation that fails every try,
then is fixed and rerun: tests/slurm/test_failure_causes_on_slurm.py). All use
a two-sample in-memory dataset scored by exact match, except ``model_copies``: it answers with the real model and
scores each sample by the number of copies of the hf model alive in the process once the sample is generated (an
observation for the test, not a benchmark), and
``control_channel``: each sample scores 1 when inspect's control server of this process has published itself (its
discovery file ``<inspect data dir>/control/<pid>.json``), else 0.
"""

from __future__ import annotations

from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import get_model
from inspect_ai.scorer import Score, Target, match, mean, scorer
from inspect_ai.solver import Generate, TaskState, solver

SAMPLES = [Sample(input="What is 1+1?", target="2"), Sample(input="What is 2+2?", target="4")]


def context_length_error(budget: int, context_tokens: int):
    import httpx
    import openai

    message = f"requested {budget} output tokens; the context window leaves room for {context_tokens}"
    body = {"message": message, "type": "invalid_request_error", "code": "context_length_exceeded"}
    request = httpx.Request("POST", "http://stand-in/v1/chat/completions")
    response = httpx.Response(400, request=request, json={"error": body})
    return openai.BadRequestError(message, response=response, body=body)


@solver
def generate_within(context_tokens: int):
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        budget = get_model().config.max_tokens
        if budget is not None and budget > context_tokens:
            raise context_length_error(budget, context_tokens)
        return await generate(state)

    return solve


@solver
def fail_once_out_of_memory(marker: str):
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        flag = Path(marker)
        if not flag.exists():
            import torch

            flag.write_text("raised")
            raise torch.OutOfMemoryError("CUDA out of memory (stand-in, raised on the first attempt only)")
        return await generate(state)

    return solve


@solver
def crash():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        raise ValueError("stand-in failure that no token budget cures")

    return solve


@task
def context_limited(context_tokens: int = 8) -> Task:
    return Task(dataset=list(SAMPLES), solver=generate_within(context_tokens), scorer=match())


@task
def out_of_memory_once(marker: str) -> Task:
    return Task(dataset=list(SAMPLES), solver=fail_once_out_of_memory(marker), scorer=match())


@solver
def out_of_memory_at(failing_seed: int, failing_model: str):
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        import json

        import torch

        # the kit runs each attempt in attempts/<n>/ beside its settings document (ptflow.stages.evaluate.run)
        settings = json.loads((Path.cwd().parent / "evaluate_settings.json").read_text())
        if settings.get("seed") == failing_seed and failing_model in get_model().name:
            raise torch.OutOfMemoryError(f"CUDA out of memory (stand-in, raised for seed {failing_seed})")
        return await generate(state)

    return solve


@task
def out_of_memory_for_seed(failing_seed: int, failing_model: str = "") -> Task:
    return Task(dataset=list(SAMPLES), solver=out_of_memory_at(failing_seed, failing_model), scorer=match())


@solver
def out_of_memory_if(marker: str):
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        if Path(marker).exists():
            import torch

            raise torch.OutOfMemoryError(f"CUDA out of memory (stand-in, raised while {marker} exists)")
        return await generate(state)

    return solve


@task
def out_of_memory_while(marker: str) -> Task:
    return Task(dataset=list(SAMPLES), solver=out_of_memory_if(marker), scorer=match())


@task
def crashing() -> Task:
    return Task(dataset=list(SAMPLES), solver=crash(), scorer=match())


@scorer(metrics=[mean()])
def hf_model_copies():
    async def score(state: TaskState, target: Target) -> Score:
        import gc

        from inspect_ai.model._providers.hf import HuggingFaceAPI

        return Score(value=sum(isinstance(o, HuggingFaceAPI) for o in gc.get_objects()))

    return score


@task
def model_copies() -> Task:
    return Task(dataset=list(SAMPLES), scorer=hf_model_copies())


@scorer(metrics=[mean()])
def control_server_published():
    async def score(state: TaskState, target: Target) -> Score:
        import os

        from inspect_ai._control.discovery import discovery_file_path

        return Score(value=float(discovery_file_path(os.getpid()).is_file()))

    return score


@task
def control_channel() -> Task:
    return Task(dataset=list(SAMPLES), scorer=control_server_published())
