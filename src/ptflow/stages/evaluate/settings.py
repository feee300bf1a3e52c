"""The inference provider (from the site and the allocation) and the *call*: the JSON document that fixes one
evaluation completely (task, task args, provider, generation settings, grader, headline metric).

The call is what the evaluation kit's ``evaluate.py`` reads (``evaluate_settings.json``): ptflow's final evaluation
and an agent's own measurements run that one script on that one document, so they cannot drift apart. Config
values arrive validated (``ptflow.config.entries.Eval``); the site's choice arrives through ``Site.evaluation``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ptflow.config import tasks
from ptflow.config.entries import Eval
from ptflow.config.sites import Site
from ptflow.specs import EvalCall

CALL_SCHEMA = 1  # = kit/evaluate.py SETTINGS_SCHEMA


@dataclass(frozen=True)
class Provider:
    """How the model under test runs. ``hf``: inspect's transformers provider on ``device``: ``cpu``, or ``cuda`` =
    the allocation's GPUs as the evaluating process sees them (the kit picks ``cuda:0``, or ``auto`` over several).
    ``vllm``: inspect's vLLM provider with ``tensor_parallel_size`` = the allocation's GPUs and the site's
    ``gpu_memory_utilization``. ``chat_template``: the family-template policy."""

    kind: str = "hf"
    device: str = "cpu"
    gpus: int = 0
    gpu_memory_utilization: float | None = None
    chat_template: str = "if_missing"

    @classmethod
    def from_site(cls, site: Site, stage: str = "evaluate", agent=None) -> Provider:
        """The site's provider on the allocation of ``stage`` (an agent evaluates on its own train allocation)."""
        gpus = site.request(stage, agent).gpus
        choice = site.evaluation
        return cls(
            kind=choice.provider,
            device="cuda" if gpus else "cpu",
            gpus=gpus,
            gpu_memory_utilization=site.gpu_memory_utilization if choice.provider == "vllm" else None,
            chat_template=choice.chat_template,
        )

    def to_dict(self) -> dict:
        return asdict(self)


def sampling_of(ev: Eval) -> dict:
    """``{"greedy": True}`` or the given temperature / top_p / seed; none: the task's default (the toy task scores
    greedily, as verl does), else the provider's own (PostTrainBench sets none)."""
    sampling = ev.sampling if ev.sampling is not None else tasks.facts(ev.task).sampling
    if sampling is None:
        return {}
    return {"greedy": True} if sampling == "greedy" else dict(sampling)


def build_call(ev: Eval, provider: Provider, seed: int | None = None) -> EvalCall:
    """The call of eval ``ev`` on ``provider`` (its params: the kit's settings document); ``seed``: one evaluation
    seed of a seeded eval."""
    facts = tasks.facts(ev.task)
    call: dict = {
        "schema": CALL_SCHEMA,
        "eval_id": ev.id,
        "task": ev.task,
        "task_args": dict(ev.task_args),
        "provider": provider.kind,
        "chat_template_policy": provider.chat_template,
        "sampling": sampling_of(ev),
        "max_tokens": ev.max_new_tokens,
        "retry_max_tokens": list(ev.retry_max_new_tokens),
        "limit": ev.limit,
        "epochs": ev.epochs,
        "max_connections": ev.max_connections,
        "headline": dict(facts.headline) if facts.headline else None,
        "grader": None,
    }
    if provider.kind == "hf":
        call["model_args"] = {"device": provider.device}
        call["model_args_by_family"] = {}
    else:
        model_args: dict = {"tensor_parallel_size": max(provider.gpus, 1)}
        if provider.gpu_memory_utilization is not None:
            model_args["gpu_memory_utilization"] = provider.gpu_memory_utilization
        call["model_args"] = model_args
        call["model_args_by_family"] = {k: dict(v) for k, v in facts.vllm_args_by_family.items()}
    if ev.grader:
        call["grader"] = {
            "task_arg": facts.grader_arg,
            "model": ev.grader["model"],
            "keys": list(ev.grader.get("keys", [])),
            "model_args": dict(ev.grader.get("model_args") or {}),
            "config": dict(ev.grader.get("config") or {}),
        }
    return EvalCall.from_params({**call, **({"seed": seed} if seed is not None else {})})
