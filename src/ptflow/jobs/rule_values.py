"""Threads and resources as Snakemake takes them from a rule: a value where every job of the rule gets the same,
else a function of the job's wildcards (and attempt) answered from :class:`~ptflow.jobs.build.Jobs`' caches.

Snakemake reads the parameters of an input, param or resource function through ``inspect.signature`` twice per
job (which arguments to pass it): ~0.1 ms each, a tenth of a 10,000-cell dry-run. :func:`signed` states them once
with Snakemake's own ``overwrite_function_params`` (what its ioutils helpers use); tests/unit/test_snakemake_contract.py
pins that Snakemake then passes what was stated.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ptflow.config.entries import Agent
from ptflow.config.rules import ADOPT_REQUEST, request_of
from ptflow.jobs.build import Jobs


class RuleError(ValueError):
    """A rule the table of ptflow.config.rules does not know (the workflow turns it into a WorkflowError)."""


def signed(func: Callable) -> Callable:
    from snakemake.common import overwrite_function_params

    overwrite_function_params(func, inspect.signature(func).parameters)
    return func


def sign_job_functions(namespace: dict) -> list[str]:
    """:func:`signed` for every per-job function of a workflow's namespace (by the workflow's naming: ``get_*``);
    the names signed."""
    names = [n for n, f in namespace.items() if n.startswith("get_") and inspect.isfunction(f)]
    for name in names:
        signed(namespace[name])
    return names


def rule_request(rule: str) -> str:
    try:
        return request_of(rule)
    except ValueError as exc:
        raise RuleError(str(exc)) from None


def slot_of(wildcards) -> str | None:
    return wildcards.agent if "agent" in wildcards.keys() else None


class RuleValues:
    """The per-rule factories of ``common.smk`` (``threads_of``, ``resources_of``, ...) over one :class:`Jobs`."""

    def __init__(self, jobs: Jobs):
        self.jobs = jobs

    def agent_of(self, wildcards) -> Agent | None:
        slot = slot_of(wildcards)
        return None if slot is None else self.jobs.agent(slot)

    def rule_agents(self, request: str, agent_ids: list[str] | None = None) -> list[Agent | None]:
        """The agents whose requests a rule's jobs may get: only train requests differ per agent (all agents, or
        those of the rule)."""
        if request != "train":
            return [None]
        agents = self.jobs.cfg.agents
        if agent_ids is None:
            return list(agents.values())
        return [agents[a] for a in agent_ids] or [None]

    def threads(self, rule: str, agents: list[str] | None = None):
        """A number where every agent of the rule gets the same, else per job."""
        request = rule_request(rule)
        values = {self.jobs.request(request, a).threads for a in self.rule_agents(request, agents)}
        if len(values) == 1:
            return values.pop()

        @signed
        def threads(wildcards):
            return self.jobs.request(request, self.agent_of(wildcards)).threads

        return threads

    def resources(self, rule: str, agents: list[str] | None = None) -> dict:
        """The plugin's resources of a rule's request; keys are the union over the rule's agents. A value the same for
        every agent and attempt is given as it is (Snakemake then evaluates nothing per job); the others (per agent,
        or grown by the attempt) per job, from the cache."""
        request = rule_request(rule)
        requests = [self.jobs.request(request, a) for a in self.rule_agents(request, agents)]
        tables = [r.snakemake_resources() for r in requests]
        keys = sorted({k for t in tables for k in t})

        def value_of(key):
            @signed
            def value(wildcards, attempt):
                return self.jobs.plugin_resources(request, self.agent_of(wildcards), attempt).get(key)

            return value

        def constant(key):
            if any(key in r.attempt_scaled for r in requests):
                return False
            first = tables[0].get(key)
            return all(key in t and type(t[key]) is type(first) and t[key] == first for t in tables)

        return {key: tables[0][key] if constant(key) else value_of(key) for key in keys}

    def evaluate_threads(self, adopts: Callable) -> Callable:
        """Rule evaluate's threads per job: the adoption request's where ``adopts(wildcards)`` (the cell's train
        job evaluated in its allocation: ptflow.stages.evaluate.in_train_job), else the evaluate request's."""

        @signed
        def threads(wildcards):
            return self.jobs.request(ADOPT_REQUEST if adopts(wildcards) else "evaluate").threads

        return threads

    def evaluate_resources(self, adopts: Callable) -> dict:
        """Rule evaluate's resources per job (keys: the union of both requests'), as :meth:`evaluate_threads`
        chooses. The job's script asks the same question of the same files, which nothing changes between (the
        staged evaluation stays whole until adopted), so a job sized to adopt adopts."""
        keys = sorted(
            set(self.jobs.request("evaluate").snakemake_resources())
            | set(self.jobs.request(ADOPT_REQUEST).snakemake_resources())
        )

        def value_of(key):
            @signed
            def value(wildcards, attempt):
                request = ADOPT_REQUEST if adopts(wildcards) else "evaluate"
                return self.jobs.plugin_resources(request, None, attempt).get(key)

            return value

        return {key: value_of(key) for key in keys}

    def supervised_held(self, rule: str) -> dict:
        """gpus_total/cpus_total of the Slurm jobs a supervisor rule submits itself (its own and its agent kind's
        helper jobs): they count against the run's caps like the plugin's jobs (ptflow.cluster.limits)."""
        if self.jobs.site.scheduler != "slurm":
            return {}
        rule_request(rule)

        def held(key):
            @signed
            def value(wildcards):
                agent = self.agent_of(wildcards)
                tables = [self.jobs.plugin_resources(s, None, 1) for s in agent.spec.site_requests]
                return sum(t.get(key, 0) for t in (self.jobs.plugin_resources("train", agent, 1), *tables))

            return value

        return {"gpus_total": held("gpus_total"), "cpus_total": held("cpus_total")}

    def image_resources(self, image_request: Callable) -> dict:
        """Per image: its request, image or convert (keys are the union of both requests' resources)."""
        keys = sorted(
            set(self.jobs.request("image").snakemake_resources())
            | set(self.jobs.request("convert").snakemake_resources())
        )

        def value_of(key):
            @signed
            def value(wildcards, attempt):
                return self.jobs.plugin_resources(image_request(wildcards), None, attempt).get(key)

            return value

        return {key: value_of(key) for key in keys}
