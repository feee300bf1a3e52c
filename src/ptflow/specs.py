"""The job contract: one frozen value per job kind, what its rule's ``params`` carry and its script reads.

Each spec has ``to_params()`` - the plain dict Snakemake stores and compares (a job whose params change is run
again) - and ``from_params()``, the one way scripts and stages read it back. A key whose value is its default is left
out of the params, so finished cells of configs that never set it keep their params: that rule lives in
:func:`_unless_default` alone, and the defaults it compares with are the config entries'
(:mod:`ptflow.config.entries`). The key order of each dict is part of the contract too (Snakemake compares the params'
``repr``); tests/unit/test_job_params.py pins every job of every shipped config.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ptflow.config.entries import DEFAULT_ON_RESTART
from ptflow.config.kinds import KINDS
from ptflow.config.request import Request
from ptflow.config.sites import RuntimeSpec

Params = dict[str, Any]


class RuleParams(dict):
    """A rule's one params value (``params: job=...``): its items are the job's spec as ``to_params()`` writes it,
    and all that Snakemake compares to decide a rerun (it records a dict param by its ``repr``: the items, never an
    attribute). ``beside`` holds what the job reads that must rerun nothing when it changes, as typed values: rule
    train's evaluation handoff (the evaluate job's params: a change reruns that job) and its spend settings (a changed
    cap or price reruns no finished cell). The value reaches the job pickled, as Snakemake hands every param to a
    script; tests/unit/test_snakemake_contract.py holds Snakemake to both halves."""

    def __init__(self, compared: Params, **beside: Any):
        super().__init__(compared)
        self.beside = beside


def _unless_default(**values: tuple[Any, Any]) -> Params:
    """``name=(value, default)`` -> ``{name: value}`` for the values that are not their default, in order."""
    return {name: value for name, (value, default) in values.items() if value != default}


class _Fields:
    """A spec whose params are its fields, each under its own name, in the order they are declared."""

    def to_params(self) -> Params:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_params(cls, d: Params):
        return cls(**d)


@dataclass(frozen=True)
class CellRef:
    """A cell as its files record it: the model's Hub id and path name, the eval, the agent slot (``sft@run2``)."""

    model: str
    model_name: str
    eval: str
    agent: str
    run: int = 1

    def to_params(self, with_run: bool = True) -> Params:
        cell = {"model": self.model, "model_name": self.model_name, "eval": self.eval, "agent": self.agent}
        # "run" only for repeats, so other cells' params stay as they were
        return {**cell, **_unless_default(run=(self.run, 1))} if with_run else cell

    @classmethod
    def from_params(cls, d: Params) -> CellRef:
        return cls(d["model"], d["model_name"], d["eval"], d["agent"], d.get("run", 1))


@dataclass(frozen=True)
class StageRuntime:
    """The site's runtime (:class:`~ptflow.config.sites.RuntimeSpec`: a container runtime or a venv) as the jobs of
    one stage use it: which image (the runtime's handle: ``.sif``, ``.sqsh`` or EDF ``.toml``), the job's GPUs, the
    host paths to bind and the shared HF cache to give it a private view of. ``ptflow.cluster.runtime`` runs
    commands through it. The params key of the site's runtime is ``runtime``, as it always was."""

    site_runtime: RuntimeSpec
    image: str | None = None
    gpus: int = 0
    binds: tuple[str, ...] = ()
    hf_home: str | None = None
    agent_cell: bool = False
    venv: str | None = None  # an overlay venv over the image (rule env: verl's); its python and ray run the job
    checkout: str | None = None  # the source checkout installed in that venv (the trainer's working directory)

    @property
    def kind(self) -> str:
        return self.site_runtime.kind

    def to_params(self) -> Params:
        out = {
            "runtime": self.site_runtime.to_dict(),
            "image": self.image,
            "gpus": self.gpus,
            "binds": list(self.binds),
            "hf_home": self.hf_home,
            "agent_cell": self.agent_cell,
        }
        # absent unless set: other jobs' params (and outputs) stay as they were
        return out | _unless_default(venv=(self.venv, None), checkout=(self.checkout, None))

    @classmethod
    def from_params(cls, d: Params | None) -> StageRuntime | None:
        if not d:
            return None
        rest = {k: v for k, v in d.items() if k not in ("runtime", "binds")}
        return cls(RuntimeSpec.from_dict(d["runtime"]), binds=tuple(d.get("binds", ())), **rest)


def _runtime_params(runtime: StageRuntime | None) -> Params:
    """``{"runtime": ...}`` for a job with a runtime, else nothing (other jobs' params stay as they were)."""
    return {"runtime": runtime.to_params()} if runtime else {}


@dataclass(frozen=True)
class CheckoutFiles(_Fields):
    """A PostTrainBench checkout eval's dir (``src/eval/tasks/<eval_dir>``) and the git object ids of the checkout
    paths a job reads (a changed file reruns the jobs that read it)."""

    eval_dir: str
    objects: Params


@dataclass(frozen=True)
class CheckoutAgent(_Fields):
    """An agent cell of a checkout eval, as run_task.sh runs it: the eval's dir, the checkout's ``agents/<solve>``
    whose solve.sh the agent runs (None: ptflow's own command), the GPUs its prompt names, and the git object ids
    of the paths it uses."""

    eval_dir: str
    solve: str | None
    num_gpus: int
    objects: Params


@dataclass(frozen=True)
class EvalCall(_Fields):
    """The evaluation of one of ptflow's tasks, as the final evaluation and an agent's kit run it (built by
    ``ptflow.stages.evaluate.settings.build_call``). Its params are the kit's settings document
    (``evaluate_settings.json``, read by the standalone ``kit/evaluate.py``), field by field in this order."""

    schema: int
    eval_id: str
    task: str
    task_args: Params
    provider: str
    chat_template_policy: str
    sampling: Params
    max_tokens: int
    retry_max_tokens: list[int]
    limit: int | None
    epochs: int | None
    max_connections: int | None
    headline: Params | None
    grader: Params | None
    model_args: Params
    model_args_by_family: Params
    # one evaluation seed of a seeded eval (matrix.seeds / evals[].seeds): every sample's generation gets its own
    # seed derived from it (the kit's per-sample seeds); only when set, so unseeded calls keep their params
    seed: int | None = None

    def to_params(self) -> Params:
        out = super().to_params()
        return out if self.seed is not None else {k: v for k, v in out.items() if k != "seed"}


@dataclass(frozen=True)
class CheckoutCall:
    """The evaluation of a PostTrainBench checkout eval: its files, the ladder's lower budgets or ``tries`` 1
    (run_baseline.sh's single try, for baseline and instruct cells), the sample limit and the key names its
    evaluate.py needs. The params keep the order and the left-out keys they always had."""

    eval_id: str
    task: str
    files: CheckoutFiles
    tries: int | None = None
    retry_max_tokens: list[int] = field(default_factory=list)
    limit: int | None = None
    keys: list[str] = field(default_factory=list)
    # PostTrainBench main's seeded final evaluation (``ptflow.stages.posttrainbench.final_eval``): the evaluation
    # seed, and {"script", "stages"} as the checkout's run_final_eval.sh gives them (its final-eval script, each
    # cascade stage's max-tokens arguments); only when set, so the one-shot calls keep their params
    seed: int | None = None
    final: Params | None = None

    def to_params(self) -> Params:
        if self.final is not None:
            ladder = {"seed": self.seed, "final": dict(self.final)}
        else:
            ladder = {"tries": self.tries} if self.tries else {"retry_max_tokens": list(self.retry_max_tokens)}
        return {
            "eval_id": self.eval_id,
            "task": self.task,
            **ladder,
            **({"limit": self.limit} if self.limit else {}),
            **({"keys": list(self.keys)} if self.keys else {}),
            "posttrainbench": self.files.to_params(),
        }

    @classmethod
    def from_params(cls, d: Params) -> CheckoutCall:
        return cls(
            eval_id=d["eval_id"],
            task=d["task"],
            files=CheckoutFiles.from_params(d["posttrainbench"]),
            tries=d.get("tries"),
            retry_max_tokens=list(d.get("retry_max_tokens", [])),
            limit=d.get("limit"),
            keys=list(d.get("keys", [])),
            seed=d.get("seed"),
            final=d.get("final"),
        )


def call_from_params(d: Params) -> EvalCall | CheckoutCall:
    """A call as a job's params keep it: a checkout eval's names its files (``posttrainbench``)."""
    return CheckoutCall.from_params(d) if "posttrainbench" in d else EvalCall.from_params(d)


@dataclass(frozen=True)
class Supervise:
    """A train job a login-node supervisor submits (ptflow.cluster.supervise), with its request resolved (a plain
    dict in the params, read once)."""

    max_retries: int
    max_resumes: int
    internal_timeout_fraction: float
    request: Request

    def to_params(self) -> Params:
        return {"max_retries": self.max_retries, "max_resumes": self.max_resumes,
                "internal_timeout_fraction": self.internal_timeout_fraction,
                "request": self.request.to_dict()}  # fmt: skip

    @classmethod
    def from_params(cls, d: Params) -> Supervise:
        return cls(**{**d, "request": Request.from_dict(d["request"])})


@dataclass(frozen=True)
class Multinode(_Fields):
    """A torchrun kind over several nodes: the script again on each node (ptflow.cluster.multinode)."""

    nodes: int
    gpus_per_node: int


@dataclass(frozen=True)
class AgentCliSpec(_Fields):
    """An agent-CLI cell's agent (kinds with ``agent_cli``): the CLI and model, its budget, the key names (values come
    from the environment), and either the final evaluation's task and call (ptflow's tasks) or PostTrainBench's
    checkout paths (``posttrainbench``)."""

    id: str
    cli: str | None
    model: str | None
    hours: float
    grace_minutes: float
    command: list[str] | None
    keys: list[str]
    trace_dir: str
    hf_home: str
    on_restart: str = DEFAULT_ON_RESTART
    sync_minutes: float | None = None
    cli_version: str | None = None
    base_url: str | None = None
    grader_keys: list[str] = field(default_factory=list)
    # ptflow's tasks: the same task and settings as the final evaluation, on the agent's own allocation
    evals_cache: str | None = None
    eval_task: str | None = None
    max_new_tokens: int | None = None
    eval_call: EvalCall | None = None
    eval_test_parquet: str | None = None
    # a PostTrainBench checkout eval: run_task.sh's task dir and prompt, the checkout's solve.sh
    posttrainbench: CheckoutAgent | None = None

    def to_params(self) -> Params:
        head = {
            "id": self.id,
            "cli": self.cli,
            "model": self.model,
            "hours": self.hours,
            "grace_minutes": self.grace_minutes,
            "command": self.command,
            "keys": self.keys,
            "trace_dir": self.trace_dir,
            "hf_home": self.hf_home,
        }
        if self.posttrainbench is None:
            head |= {
                "evals_cache": self.evals_cache,
                "eval_task": self.eval_task,
                "max_new_tokens": self.max_new_tokens,
                "eval_call": self.eval_call.to_params() if self.eval_call else None,
                **_unless_default(eval_test_parquet=(self.eval_test_parquet, None)),
            }
        # only when set, so the params (and finished cells) of agents without them stay as they were; a changed CLI
        # pin reruns that CLI's cells; the grader key names reach the agent's evaluate.py, no other key does
        optional = _unless_default(
            on_restart=(self.on_restart, DEFAULT_ON_RESTART),
            sync_minutes=(self.sync_minutes, None),
            cli_version=(self.cli_version, None),
            base_url=(self.base_url, None),
            grader_keys=(self.grader_keys, []),
        )
        tail = {"posttrainbench": self.posttrainbench.to_params()} if self.posttrainbench is not None else {}
        return head | optional | tail

    @classmethod
    def from_params(cls, d: Params) -> AgentCliSpec:
        checkout, call = d.get("posttrainbench"), d.get("eval_call")
        return cls(
            **{
                **d,
                "posttrainbench": CheckoutAgent.from_params(checkout) if checkout else None,
                "eval_call": EvalCall.from_params(call) if call else None,
            }
        )


@dataclass(frozen=True)
class RuntimeServer(_Fields):
    """Kinds that submit a server beside their trainer (the SkyRL server): the server's resolved request and where the
    coordination dirs go (<cell>/.skyrl_jobs/<stamp>_<server job>/)."""

    coord_base: str
    server: Params


@dataclass(frozen=True)
class TrainSpec:
    """Rule train / train_supervised. ``agent`` is the kind's own part: an :class:`AgentCliSpec` (agent-CLI kinds), a
    :class:`RuntimeServer` (kinds with a SkyRL server on a site that has its request) or None; the params keep
    both under the key ``agent``, and :meth:`from_params` tells them apart by the kind, not by the dict's shape."""

    cell: CellRef
    kind: str
    params: Params
    model_revision: str
    checkpoint_dir: str
    config_hash: str
    hf_home: str
    runtime: StageRuntime | None = None
    supervise: Supervise | None = None
    multinode: Multinode | None = None
    agent: AgentCliSpec | RuntimeServer | None = None

    def to_params(self) -> Params:
        out = {
            "cell": self.cell.to_params(),
            "kind": self.kind,
            "params": self.params,
            "model_revision": self.model_revision,
            "checkpoint_dir": self.checkpoint_dir,
            "config_hash": self.config_hash,
            "hf_home": self.hf_home,
        }
        # each only where it applies, so other jobs' params (and outputs) stay as they were
        out |= _runtime_params(self.runtime)
        if self.supervise:
            out["supervise"] = self.supervise.to_params()
        if self.multinode:
            out["multinode"] = self.multinode.to_params()
        if self.agent is not None:
            out["agent"] = self.agent.to_params()
        return out

    @classmethod
    def from_params(cls, d: Params) -> TrainSpec:
        agent = d.get("agent")
        if agent is not None:
            agent = AgentCliSpec.from_params(agent) if KINDS[d["kind"]].agent_cli else RuntimeServer.from_params(agent)
        return cls(
            cell=CellRef.from_params(d["cell"]),
            kind=d["kind"],
            params=d["params"],
            model_revision=d["model_revision"],
            checkpoint_dir=d["checkpoint_dir"],
            config_hash=d["config_hash"],
            hf_home=d["hf_home"],
            runtime=StageRuntime.from_params(d.get("runtime")),
            supervise=Supervise.from_params(d["supervise"]) if d.get("supervise") else None,
            multinode=Multinode.from_params(d["multinode"]) if d.get("multinode") else None,
            agent=agent,
        )

    @property
    def agent_cli(self) -> AgentCliSpec | None:
        return self.agent if isinstance(self.agent, AgentCliSpec) else None

    @property
    def runtime_server(self) -> RuntimeServer | None:
        return self.agent if isinstance(self.agent, RuntimeServer) else None


@dataclass(frozen=True)
class EvaluateSpec:
    """Rule evaluate: the cell, the model evaluated when it is not the cell's (an instruct cell evaluates the
    counterpart), and the evaluation call (ptflow's task, or PostTrainBench's from its checkout)."""

    cell: CellRef
    call: EvalCall | CheckoutCall
    model_revision: str
    hf_home: str
    evals_cache: str
    evaluated_model: Params | None = None
    runtime: StageRuntime | None = None

    @property
    def evaluated_model_id(self) -> str:
        """The hub id of the model an untrained cell evaluates (the base model, or its instruct counterpart)."""
        return (self.evaluated_model or {}).get("id") or self.cell.model

    def to_params(self) -> Params:
        return {
            "cell": self.cell.to_params(),
            **({"evaluated_model": self.evaluated_model} if self.evaluated_model else {}),
            "call": self.call.to_params(),
            "model_revision": self.model_revision,
            "hf_home": self.hf_home,
            "evals_cache": self.evals_cache,
            **_runtime_params(self.runtime),
        }

    @classmethod
    def from_params(cls, d: Params) -> EvaluateSpec:
        return cls(
            cell=CellRef.from_params(d["cell"]),
            call=call_from_params(d["call"]),
            model_revision=d["model_revision"],
            hf_home=d["hf_home"],
            evals_cache=d["evals_cache"],
            evaluated_model=d.get("evaluated_model"),
            runtime=StageRuntime.from_params(d.get("runtime")),
        )


@dataclass(frozen=True)
class JudgeSpec:
    """Rule judge_run (one vote of the panel): the judge's CLI settings (agent|cli, model, keys, base_url), the key
    names whose values are redacted from trace.md, the cell, for checkout evals PostTrainBench's judge prompt, and
    ``vote``: ``{judge, run, fields}`` (which judge, which run, the fields it answers)."""

    judge: Params | None
    keys: list[str]
    cell: CellRef
    posttrainbench: CheckoutFiles | None = None
    runtime: StageRuntime | None = None
    vote: Params | None = None

    def to_params(self) -> Params:
        return {
            "judge": self.judge,
            **({"posttrainbench": self.posttrainbench.to_params()} if self.posttrainbench else {}),
            "keys": self.keys,
            "cell": self.cell.to_params(with_run=False),
            **_runtime_params(self.runtime),
            **({"vote": self.vote} if self.vote else {}),
        }

    @classmethod
    def from_params(cls, d: Params) -> JudgeSpec:
        checkout = d.get("posttrainbench")
        return cls(
            judge=d["judge"],
            keys=d["keys"],
            cell=CellRef.from_params(d["cell"]),
            posttrainbench=CheckoutFiles.from_params(checkout) if checkout else None,
            runtime=StageRuntime.from_params(d.get("runtime")),
            vote=d.get("vote"),
        )


@dataclass(frozen=True)
class JudgePanelSpec(_Fields):
    """Rule judge (the panel's decision, on the login node): the panel's rules (``ptflow.config.judges.JudgePanel.
    to_params``; None: no judge, the cell says skipped), the cell, and the agent's key names (trace.md of a cell no
    judge reads is written here, its keys masked)."""

    panel: Params | None
    cell: Params
    keys: list[str]


@dataclass(frozen=True)
class ScoringSpec(_Fields):
    """Rule aggregate: the config's scoring settings (raw: the scorer parses them with the config's entry builders), the
    reference table loaded (a changed table rescores), GPUs per agent from the site's requests, every cell the score
    expects and each model's Hub id."""

    raw: Params
    reference: Any
    agent_gpus: Params
    expected: list[Params]
    model_ids: Params
