"""The validated configuration: models, evals, agents and the matrix of cells.

Validation happens once, at workflow start: the JSON schema (through ``snakemake.utils.validate``) for shape,
types and unknown keys, then the checks a schema cannot express (ids that exist, no duplicates, no cycles).
Every error is one line naming the key, the bad value and what to do.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptflow.config import naming, tasks
from ptflow.config import posttrainbench as ptb
from ptflow.config.kinds import KINDS, AgentKind
from ptflow.keys import looks_like_secret

SCHEMA_DIR = Path(__file__).parent / "schemas"
# The schemas are JSON, not YAML: snakemake.utils.validate reads the schema file each time (every Snakemake start, two
# per Slurm job), trying JSON first; the YAML ones went through yte's pure-Python parse (55 + 36 ms; JSON: under 1).
CONFIG_SCHEMA = SCHEMA_DIR / "config.schema.json"


class ConfigError(ValueError):
    """A configuration problem, described in one line."""


@dataclass(frozen=True)
class Model:
    id: str
    source: str
    revision: str
    tiny: dict | None
    gated: bool = False
    instruct: Model | None = None  # the official instruct counterpart (PostTrainBench's weights), hub only

    @property
    def name(self) -> str:
        return naming.model_to_path(self.id)


@dataclass(frozen=True)
class Eval:
    id: str
    dataset: dict | None  # None: the inspect task brings its own data
    task: str
    max_new_tokens: int
    preprocess: str
    retry_max_new_tokens: tuple[int, ...] = ()
    task_args: dict = field(default_factory=dict)
    limit: int | None = None
    epochs: int | None = None
    max_connections: int | None = None
    sampling: str | dict | None = None  # "greedy", {temperature, top_p, seed}, or None: the provider's defaults
    grader: dict | None = None  # {model, keys, model_args, config}: keys are names, values come from the environment
    keys: tuple[str, ...] = ()  # posttrainbench/<eval>: names of the variables its evaluate.py reads (grader's key)

    @property
    def from_checkout(self) -> bool:
        """Evaluated by the PostTrainBench checkout's evaluate.py (``ptflow.config.posttrainbench``)."""
        return ptb.is_checkout_task(self.task)

    @property
    def dataset_name(self) -> str | None:
        return naming.model_to_path(self.dataset["repo"]) if self.dataset else None

    @property
    def uses_parquet(self) -> bool:
        return self.task == tasks.TOY_TASK

    @property
    def grader_keys(self) -> tuple[str, ...]:
        return tuple((self.grader or {}).get("keys", ())) or self.keys

    def sources(self) -> list:
        """What its evaluation reads from the caches (``ptflow.config.tasks``): fetched by the cache stage."""
        if self.from_checkout:  # the checkout's code loads its own data
            return []
        return tasks.sources_for(self.task, self.task_args, self.grader)


# An agent's defaults, each written here once. The config model fills them into Agent, and what reads a train job's
# params (ptflow.stages.train.agent_cell) fills in the same ones: those params leave on_restart and sync_minutes out
# when they have their default, so the params (hence the finished cells) of agents that never set them stay as they
# were.
DEFAULT_GRACE_MINUTES = 5.0  # cli-agent: timeout = hours*60 + grace_minutes (PostTrainBench's 5)
DEFAULT_ON_RESTART = "continue"  # cli-agent: after a requeue/retry, continue the workspace with the budget left
ON_RESTART_MODES = (DEFAULT_ON_RESTART, "fresh")  # fresh: start over with the full budget (the schema's enum)
DEFAULT_SYNC_MINUTES = 10.0  # cli-agent: minutes between syncs of the agent's task dir to scratch
DEFAULT_REPEATS = 1  # runs of each cell of an agent


@dataclass(frozen=True)
class Agent:
    id: str
    kind: str
    params: dict = field(default_factory=dict)
    start_from: str | None = None
    cli: str | None = None
    model: str | None = None
    hours: float | None = None
    keys: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None  # cli-agent argv template (None: the cli's default)
    grace_minutes: float = DEFAULT_GRACE_MINUTES  # cli-agent: timeout = hours*60 + grace_minutes
    repeats: int = DEFAULT_REPEATS  # each cell of this agent runs this many times (runs 2.. as <id>@run<k>)
    on_restart: str = DEFAULT_ON_RESTART  # cli-agent: after a requeue/retry, continue or start afresh
    sync_minutes: float | None = None  # cli-agent: workspace sync interval (None: not set, DEFAULT_SYNC_MINUTES)
    base_url: str | None = None  # cli-agent: the provider's base URL in the CLI's own variable (None: the CLI's)
    solve: str | None = None  # cli-agent with posttrainbench: the checkout's agents/<solve>/ (None: agents/<cli>/)

    @property
    def spec(self) -> AgentKind:
        """What this agent's kind needs and does (ptflow.config.kinds)."""
        return KINDS[self.kind]

    @property
    def trains(self) -> bool:
        return self.spec.trains


@dataclass(frozen=True)
class Cell:
    model: str  # model path name (org--name)
    eval: str
    agent: str  # the agent's slot: its id, or <id>@run<k> for run k >= 2 of a repeated agent (naming.slot)

    @property
    def key(self) -> str:
        return f"{self.model}/{self.eval}/{self.agent}"

    @property
    def agent_id(self) -> str:
        return naming.split_slot(self.agent)[0]

    @property
    def run(self) -> int:
        return naming.split_slot(self.agent)[1]


@dataclass
class Config:
    raw: dict
    models: dict[str, Model]  # by path name
    evals: dict[str, Eval]
    agents: dict[str, Agent]
    cells: list[Cell]
    posttrainbench: ptb.Checkout | None = None  # PostTrainBench's pinned checkout (config key posttrainbench)

    def ptb_agent(self, agent: Agent) -> str | None:
        """The checkout's agents/<dir> a real-CLI agent runs, or None (no checkout, or ptflow's scripted agent or an
        agent with its own command)."""
        if (
            self.posttrainbench is None
            or not agent.spec.agent_cli
            or agent.command
            or agent.cli not in self.cli_versions
        ):
            return None
        return agent.solve or agent.cli

    def model_by_id(self, model_id: str) -> Model:
        return self.models[naming.model_to_path(model_id)]

    @property
    def judge(self) -> dict | None:
        """The judge of agent-CLI traces, or None when none is configured or it is turned off (enabled: false)."""
        judge = self.raw.get("judge")
        if not judge or judge.get("enabled", True) is False:
            return None
        return {k: v for k, v in judge.items() if k != "enabled"}

    @property
    def cli_versions(self) -> dict[str, str]:
        """The pinned version of every real agent CLI (config ``agent_clis``, default PostTrainBench's pins)."""
        from ptflow.config.clis import CLIS

        pins = self.raw.get("agent_clis") or {}
        return {name: (pins.get(name) or {}).get("version", cli.pinned) for name, cli in CLIS.items()}

    @property
    def node_major(self) -> int:
        """Node.js major version of the agent image (config ``agent_clis.node``)."""
        from ptflow.config.clis import NODE_MAJOR

        return int((self.raw.get("agent_clis") or {}).get("node", NODE_MAJOR))

    @property
    def image_build_args(self) -> dict[str, str]:
        """What an image recipe may declare as build arguments: ``NODE_MAJOR`` and ``<CLI>_CLI_VERSION`` per CLI."""
        from ptflow.config.clis import build_arg

        return {"NODE_MAJOR": str(self.node_major), **{build_arg(n): v for n, v in self.cli_versions.items()}}

    def model_named(self, name: str) -> Model:
        """A model by path name: a matrix model or the instruct counterpart one of them names."""
        if name in self.models:
            return self.models[name]
        for m in self.models.values():
            if m.instruct and m.instruct.name == name:
                return m.instruct
        raise KeyError(name)

    def evaluated_model(self, cell: Cell) -> Model:
        """What a cell's evaluation starts from when nothing trained it: the base model, or its instruct
        counterpart for agents of kind instruct."""
        model = self.models[cell.model]
        return model.instruct if self.agent_for(cell.agent).spec.evaluates_instruct else model

    def agent_for(self, slot: str) -> Agent:
        """The agent of a cell slot (``sft``, ``claude-opus-4-5@run2``)."""
        return self.agents[naming.split_slot(slot)[0]]

    def parent_slot(self, slot: str) -> str | None:
        """The slot a training starts from (``from:``), in the same run: run k of grpo starts from run k of sft."""
        agent_id, run = naming.split_slot(slot)
        start = self.agents[agent_id].start_from
        return naming.slot(start, run) if start else None

    def trained_params(self, slot: str) -> dict:
        """The agent's params for this run: runs k >= 2 of a seeded trainer get seed + k - 1 (repeats would be
        identical otherwise); run 1 keeps the configured seed."""
        agent_id, run = naming.split_slot(slot)
        params = self.agents[agent_id].params
        if run > 1 and "seed" in params:
            return canonical({**params, "seed": params["seed"] + run - 1})
        return params

    def training_cells(self) -> list[Cell]:
        """Every (model, eval, agent slot) whose checkpoint is needed: matrix cells plus their `from` ancestors."""
        needed: dict[Cell, None] = {}
        for cell in self.cells:
            slot: str | None = cell.agent
            while slot is not None and self.agent_for(slot).trains:
                needed[Cell(cell.model, cell.eval, slot)] = None
                slot = self.parent_slot(slot)
        return list(needed)

    def training_hash(self, cell: Cell) -> str:
        """Hash of everything that defines a cell's training; changes here make the checkpoint stale."""
        agent = self.agent_for(cell.agent)
        model = self.models[cell.model]
        parent = self.parent_slot(cell.agent)
        spec = {
            "model": model.id,
            "revision": model.revision,
            "tiny": model.tiny,
            "eval": cell.eval,
            "dataset": self.evals[cell.eval].dataset,
            "agent": {
                "kind": agent.kind,
                "params": self.trained_params(cell.agent),
                "cli": agent.cli,
                "model": agent.model,
            },
            "from": self.training_hash(Cell(cell.model, cell.eval, parent)) if parent else None,
        }
        if agent.spec.agent_cli:  # only here, so the hashes (and checkpoints) of other kinds stay as they were
            spec["agent"].update(hours=agent.hours, command=agent.command, grace_minutes=agent.grace_minutes)
        if cell.run > 1:  # only for repeats, so run 1 keeps the hash a cell had before repeats existed
            spec["run"] = cell.run
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def canonical(value):
    """Nested mappings with sorted keys. Snakemake compares params by their text, so without this a config whose
    keys were merely reordered (an editor, yaml.safe_dump) would look changed and rerun finished trainings."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def _where(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def explain_schema_error(err) -> str:
    """One line from a jsonschema ValidationError: where, what, and what to do."""
    where = _where(err.absolute_path)
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        hints = [
            f"'{k}' (did you mean '{m[0]}'?)" if (m := difflib.get_close_matches(k, allowed, 1)) else f"'{k}'"
            for k in extra
        ]
        return f"config error at {where}: unknown key {', '.join(hints)}; allowed keys: {', '.join(allowed)}"
    if err.validator == "required":
        return f"config error at {where}: {err.message}; add it (see docs/configuration.md)"
    if err.validator in ("minimum", "exclusiveMinimum"):
        return f"config error at {where}: {err.instance!r} is too small ({err.message}); use a positive number"
    if err.validator == "enum":
        allowed = ", ".join(repr(v) for v in err.validator_value)
        return f"config error at {where}: {err.instance!r} is not one of {allowed}"
    if err.validator == "minItems":
        return f"config error at {where}: the list is empty; give at least {err.validator_value} entry"
    if err.validator == "oneOf" and list(err.absolute_path)[-1:] == ["sampling"]:
        return (
            f"config error at {where}: {err.instance!r} must be 'greedy' or a mapping of temperature (> 0), top_p, seed"
        )
    if err.validator == "oneOf":
        return f"config error at {where}: {err.instance!r} must be 'all' or a non-empty list of ids"
    return f"config error at {where}: {err.message}"


def validate_schema(cfg: dict) -> None:
    """Shape, types and unknown keys, checked by snakemake.utils.validate against the JSON schema."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    try:
        validate(cfg, str(CONFIG_SCHEMA))
    except WorkflowError as exc:
        cause = exc.__context__ if hasattr(exc.__context__, "absolute_path") else None
        if cause is None:
            raise ConfigError(f"config error: {exc}") from None
        raise ConfigError(explain_schema_error(cause)) from None


def _unknown(kind: str, key: str, value: str, known) -> ConfigError:
    known = list(known)
    close = difflib.get_close_matches(value, known, 1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(
        f"config error at {key}: {value!r} is not {'an' if kind[0] in 'aeiou' else 'a'} {kind} id{hint}; "
        f"known: {', '.join(known)} — fix the spelling or add it under {kind}s"
    )


def _unique(entries: list[dict], section: str) -> None:
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        if entry["id"] in seen:
            raise ConfigError(
                f"config error at {section}[{i}].id: duplicate id {entry['id']!r} "
                f"(also {section}[{seen[entry['id']]}]); give each entry its own id"
            )
        seen[entry["id"]] = i


def build_models(entries: list[dict]) -> dict[str, Model]:
    """The ``models:`` entries, checked and parsed (by path name); their shape is the schema's (``build_config``
    checks both). The aggregate job reads its models through this too (``ptflow.stages.matrix_score``)."""
    _unique(entries, "models")
    models = {}
    for i, m in enumerate(entries):
        try:
            name = naming.model_to_path(m["id"])
        except naming.NameError_ as exc:
            raise ConfigError(f"config error at models[{i}].id: {exc}") from None
        if m["source"] == "local" and not m.get("tiny"):
            raise ConfigError(
                f"config error at models[{i}]: source 'local' needs a 'tiny' block (layers, hidden, "
                "heads, seed) describing the model to create"
            )
        if m["source"] == "hub" and not m.get("revision"):
            raise ConfigError(
                f"config error at models[{i}].revision: hub model {m['id']!r} needs a pinned revision "
                "(a commit hash or tag) so runs are reproducible"
            )
        tiny = m.get("tiny")
        if tiny and tiny["hidden"] % tiny["heads"]:
            raise ConfigError(
                f"config error at models[{i}].tiny: hidden={tiny['hidden']} is not divisible by "
                f"heads={tiny['heads']}; choose values where hidden % heads == 0"
            )
        instruct = None
        if "instruct" in m:
            ref = m["instruct"] if isinstance(m["instruct"], dict) else {"id": m["instruct"], "revision": "main"}
            try:
                naming.check_repo_id(ref["id"])
            except naming.NameError_ as exc:
                raise ConfigError(f"config error at models[{i}].instruct: {exc}") from None
            if m["source"] != "hub":
                raise ConfigError(
                    f"config error at models[{i}].instruct: only hub models have an instruct counterpart; remove it "
                    "(a local model can take an agent's cells as its reference: scoring.reference_agent)"
                )
            instruct = Model(ref["id"], "hub", ref["revision"], None, m.get("gated", False))
        models[name] = Model(
            m["id"], m["source"], m.get("revision", "main"), canonical(tiny), m.get("gated", False), instruct
        )
    return models


def _build_evals(entries: list[dict]) -> dict[str, Eval]:
    _unique(entries, "evals")
    evals = {}
    for i, e in enumerate(entries):
        if ptb.is_checkout_task(e["task"]):
            evals[e["id"]] = _checkout_eval(i, e)
            continue
        if "max_new_tokens" not in e:
            raise ConfigError(f"config error at evals[{i}]: eval {e['id']!r} needs max_new_tokens (its first budget)")
        if e.get("keys"):
            raise ConfigError(
                f"config error at evals[{i}].keys: only an eval from the PostTrainBench checkout takes keys; "
                "ptflow's tasks name their grader's keys under grader.keys"
            )
        ds = e.get("dataset")
        preprocess = e.get("preprocess", "gsm8k" if ds else "none")
        try:
            naming.check_safe_id("eval", e["id"])
            if ds:
                naming.check_repo_id(ds["repo"])
        except naming.NameError_ as exc:
            raise ConfigError(f"config error at evals[{i}]: {exc}") from None
        if ds is None:
            if preprocess != "none" or e["task"] == "ptflow":
                raise ConfigError(
                    f"config error at evals[{i}]: eval {e['id']!r} needs a 'dataset' (source, repo) "
                    "to preprocess or evaluate with task 'ptflow'"
                )
        elif ds["source"] == "local" and "generator" not in ds:
            raise ConfigError(f"config error at evals[{i}].dataset: source 'local' needs a 'generator' block")
        elif ds["source"] == "hub" and not ds.get("revision"):
            raise ConfigError(
                f"config error at evals[{i}].dataset.revision: hub dataset {ds['repo']!r} needs a pinned revision"
            )
        if e["task"] == "ptflow" and preprocess == "none":
            raise ConfigError(
                f"config error at evals[{i}]: task 'ptflow' evaluates the preprocessed test parquet;"
                " set preprocess: gsm8k or name an inspect task"
            )
        _check_eval_settings(i, e)
        ds = canonical(ds)
        evals[e["id"]] = Eval(
            e["id"],
            ds,
            e["task"],
            e["max_new_tokens"],
            preprocess,
            tuple(e.get("retry_max_new_tokens", ())),
            canonical(dict(e.get("task_args") or {})),
            e.get("limit"),
            e.get("epochs"),
            e.get("max_connections"),
            canonical(e.get("sampling")),
            canonical(e.get("grader")),
            tuple(e.get("keys", ())),
        )
    return evals


# ptflow's own evaluation settings: the checkout's evaluate.py and run_task.sh decide these for a posttrainbench eval.
_OWN_EVAL_SETTINGS = ("dataset", "preprocess", "task_args", "epochs", "sampling", "grader", "max_new_tokens",
                      "max_connections")  # fmt: skip


def _checkout_eval(i: int, e: dict) -> Eval:
    """An eval run by the PostTrainBench checkout: its id, the checkout's eval dir, the ladder's lower budgets, a
    limit, the key names its evaluate.py reads. Mixing in ptflow's own settings is refused (one line)."""
    where = f"config error at evals[{i}]"
    try:
        naming.check_safe_id("eval", e["id"])
    except naming.NameError_ as exc:
        raise ConfigError(f"{where}: {exc}") from None
    mixed = [k for k in _OWN_EVAL_SETTINGS if k in e]
    if mixed:
        raise ConfigError(
            f"{where}.{mixed[0]}: eval {e['id']!r} runs the PostTrainBench checkout's evaluate.py "
            f"({e['task']}), which decides its {mixed[0]}; remove it, or use ptflow's own task for this eval"
        )
    name = ptb.eval_dir_name(e["task"])
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"{where}.task: {e['task']!r}: write posttrainbench/<directory under src/eval/tasks>")
    lower = list(e.get("retry_max_new_tokens", ()))
    if lower != sorted(lower, reverse=True) or len(set(lower)) != len(lower):
        raise ConfigError(f"{where}.retry_max_new_tokens: {lower} must fall (run_task.sh's second, then third budget)")
    return Eval(e["id"], None, e["task"], None, "none", tuple(lower), {}, e.get("limit"), keys=tuple(e.get("keys", ())))


def eval_from_entry(entry: dict) -> Eval:
    """One ``evals:`` entry with the semantic checks (its shape is the schema's: ``build_config`` checks both)."""
    return _build_evals([entry])[entry["id"]]


def _check_eval_settings(i: int, e: dict) -> None:
    """What the schema cannot say of an eval's evaluation settings (task spec, budgets, grader); task names of
    inspect's registry and files are resolved at preflight, which imports the task code."""
    where = f"config error at evals[{i}]"
    try:
        kind = tasks.task_kind(e["task"])
    except ValueError as exc:
        raise ConfigError(f"{where}.task: {exc}") from None
    if kind == "toy" and e.get("task_args"):
        raise ConfigError(f"{where}.task_args: task 'ptflow' takes no task_args (its data is the test parquet)")
    previous = e["max_new_tokens"]
    for value in e.get("retry_max_new_tokens", ()):
        if value >= previous:
            raise ConfigError(
                f"{where}.retry_max_new_tokens: {e['retry_max_new_tokens']} must each be below the budget before "
                f"(max_new_tokens {e['max_new_tokens']}); list lower budgets in falling order"
            )
        previous = value
    facts = tasks.facts(e["task"])
    grader = e.get("grader")
    if facts.grader_arg and not grader:
        raise ConfigError(
            f"{where}: task {e['task']!r} is graded by an LLM; add grader: {{model: <inspect model, e.g. "
            "openai/gpt-5-mini>, keys: [<NAME of the env var holding its key>]}"
        )
    if grader and not facts.grader_arg:
        raise ConfigError(
            f"{where}.grader: task {e['task']!r} takes no grader ptflow knows of; remove grader (a task of your own "
            "takes its judge model through task_args)"
        )
    if grader and facts.grader_arg in (e.get("task_args") or {}):
        raise ConfigError(f"{where}.task_args.{facts.grader_arg}: the grader comes from grader.model; remove it here")
    secret_like = [k for k in (grader or {}).get("model_args", {}) if looks_like_secret(k)]
    if secret_like:
        raise ConfigError(
            f"{where}.grader.model_args: {', '.join(secret_like)} looks like a secret; secrets stay in the "
            "environment (name the variable under grader.keys)"
        )
    if not facts.sources_import_task:  # else preflight derives them (it imports the task code anyway)
        try:
            facts.sources(dict(e.get("task_args") or {}))
        except ValueError as exc:
            raise ConfigError(f"{where}.task_args: {exc}") from None


def build_agents(entries: list[dict]) -> dict[str, Agent]:
    """The ``agents:`` entries, checked and parsed (by id, in config order); their shape is the schema's
    (``build_config`` checks both). The aggregate job reads its agents through this too
    (``ptflow.stages.matrix_score``)."""
    _unique(entries, "agents")
    agents = {}
    for i, a in enumerate(entries):
        try:
            naming.check_safe_id("agent", a["id"])
        except naming.NameError_ as exc:
            raise ConfigError(f"config error at agents[{i}].id: {exc}") from None
        kind = KINDS.get(a["kind"])
        if kind is None:
            close = difflib.get_close_matches(a["kind"], list(KINDS), 1)
            raise ConfigError(
                f"config error at agents[{i}].kind: {a['kind']!r} is not an agent kind"
                + (f" (did you mean '{close[0]}'?)" if close else "")
                + f"; kinds: {', '.join(KINDS)}"
            )
        params = a.get("params", {})
        missing = [k for k in kind.required_params if k not in params]
        if missing:
            raise ConfigError(
                f"config error at agents[{i}].params: a {kind.name} agent needs {', '.join(missing)}; "
                "add them (see docs/configuration.md)"
            )
        missing = [k for k in kind.required_fields if k not in a]
        if missing:
            raise ConfigError(f"config error at agents[{i}]: a {kind.name} agent needs {', '.join(missing)}")
        if "variant" in params and params["variant"] not in kind.variants:
            allowed = ", ".join(repr(v) for v in kind.variants) or "none (omit it)"
            raise ConfigError(
                f"config error at agents[{i}].params.variant: {params['variant']!r} is not a {kind.name} variant; "
                f"use one of {allowed}"
            )
        agents[a["id"]] = Agent(
            a["id"],
            a["kind"],
            canonical(dict(a.get("params", {}))),
            a.get("from"),
            a.get("cli"),
            a.get("model"),
            a.get("hours"),
            tuple(a.get("keys", ())),
            tuple(a["command"]) if "command" in a else None,
            float(a.get("grace_minutes", DEFAULT_GRACE_MINUTES)),
            int(a.get("repeats", DEFAULT_REPEATS)),
            a.get("on_restart", DEFAULT_ON_RESTART),
            float(a["sync_minutes"]) if "sync_minutes" in a else None,
            a.get("base_url"),
            a.get("solve"),
        )
        if kind.agent_cli and "command" not in a:
            from ptflow.config.clis import CLIS, SCRIPTED

            if a["cli"] not in CLIS and a["cli"] != SCRIPTED:
                close = difflib.get_close_matches(a["cli"], [*CLIS, SCRIPTED], 1)
                raise ConfigError(
                    f"config error at agents[{i}].cli: {a['cli']!r} is not an agent CLI ptflow knows"
                    + (f" (did you mean '{close[0]}'?)" if close else "")
                    + f"; use one of {', '.join([*CLIS, SCRIPTED])}, or give the agent its own 'command' list"
                )
    for i, a in enumerate(entries):
        start = a.get("from")
        if start is None:
            continue
        if start not in agents:
            raise _unknown("agent", f"agents[{i}].from", start, agents)
        if not agents[start].trains:
            raise ConfigError(
                f"config error at agents[{i}].from: {start!r} trains nothing; omit 'from' to start from the base model"
            )
        seen, cur = {a["id"]}, start
        while cur is not None:
            if cur in seen:
                raise ConfigError(
                    f"config error at agents[{i}].from: 'from' chain of {a['id']!r} loops back to "
                    f"{cur!r}; break the cycle"
                )
            seen.add(cur)
            cur = agents[cur].start_from
    return agents


def _select(sel, known: dict, key: str, kind: str, to_name=lambda x: x) -> list[str]:
    if sel == "all":
        return list(known)
    out = []
    for i, value in enumerate(sel):
        try:
            name = to_name(value)
        except naming.NameError_:
            name = None
        if name not in known:
            ids = [m.id for m in known.values()] if kind == "model" else list(known)
            raise _unknown(kind, f"{key}[{i}]", value, ids)
        if name in out:
            raise ConfigError(f"config error at {key}[{i}]: {value!r} is listed twice; list it once")
        out.append(name)
    return out


def _expand(raw: dict, models, evals, agents) -> list[Cell]:
    mx = raw["matrix"]
    to_model = naming.model_to_path
    chosen_models = _select(mx["models"], models, "matrix.models", "model", to_model)
    chosen_evals = _select(mx["evals"], evals, "matrix.evals", "eval")
    chosen_agents = _select(mx["agents"], agents, "matrix.agents", "agent")

    def patterns(key: str) -> list[dict]:
        out = []
        for i, pat in enumerate(mx.get(key, [])):
            p = {}
            if "model" in pat:
                p["model"] = _select([pat["model"]], models, f"matrix.{key}[{i}].model", "model", to_model)[0]
            if "eval" in pat:
                p["eval"] = _select([pat["eval"]], evals, f"matrix.{key}[{i}].eval", "eval")[0]
            if "agent" in pat:
                p["agent"] = _select([pat["agent"]], agents, f"matrix.{key}[{i}].agent", "agent")[0]
            out.append(p)
        return out

    def matches(cell: Cell, pat: dict) -> bool:
        return all(getattr(cell, k) == v for k, v in pat.items())

    excludes, includes = patterns("exclude"), patterns("include")
    cells: dict[Cell, None] = {}
    for m in chosen_models:
        for e in chosen_evals:
            for a in chosen_agents:
                cell = Cell(m, e, a)
                if not any(matches(cell, p) for p in excludes):
                    cells[cell] = None
    for pat in includes:
        for m in [pat["model"]] if "model" in pat else chosen_models:
            for e in [pat["eval"]] if "eval" in pat else chosen_evals:
                for a in [pat["agent"]] if "agent" in pat else chosen_agents:
                    cells[Cell(m, e, a)] = None
    if not cells:
        raise ConfigError(
            "config error at matrix: no cells remain after exclude; select at least one "
            "(model, eval, agent) or loosen matrix.exclude"
        )
    # agents that evaluate each model's instruct counterpart have cells only for models that name one
    for a in {c.agent for c in cells}:
        if agents[a].spec.evaluates_instruct and not any(models[c.model].instruct for c in cells if c.agent == a):
            raise ConfigError(
                f"config error at agents: agent {a!r} (kind {agents[a].kind}) evaluates instruct counterparts, but "
                "no model of the matrix names one; add models[].instruct or drop the agent from the matrix"
            )
    return [
        Cell(c.model, c.eval, naming.slot(c.agent, run))
        for c in cells
        if models[c.model].instruct or not agents[c.agent].spec.evaluates_instruct
        for run in range(1, agents[c.agent].repeats + 1)
    ]


def build_config(raw: dict[str, Any]) -> Config:
    """Validate a raw config dict (schema, then semantics) and expand its matrix."""
    validate_schema(raw)
    models = build_models(raw["models"])
    evals = _build_evals(raw["evals"])
    agents = build_agents(raw["agents"])
    cells = _expand(raw, models, evals, agents)
    _check_scoring(raw.get("scoring") or {}, models, {c.eval for c in cells}, agents, cells)
    try:
        checkout = ptb.Checkout.from_config(raw.get("posttrainbench"))
    except ValueError as exc:
        raise ConfigError(f"config error at {exc}") from None
    cfg = Config(raw, models, evals, agents, cells, checkout)
    _check_posttrainbench(cfg)
    return cfg


def _check_posttrainbench(cfg: Config) -> None:
    """A run is PostTrainBench's or ptflow's per eval, never a mix (docs/posttrainbench.md)."""
    checkout_evals = sorted(e.id for e in cfg.evals.values() if e.from_checkout)
    if cfg.posttrainbench is None:
        if checkout_evals:
            raise ConfigError(
                f"config error at evals: {checkout_evals[0]!r} runs PostTrainBench's evaluate.py from a checkout; "
                "add posttrainbench: {commit: <40 hex>, path: <checkout> | repo: <URL>}"
            )
        solving = [a.id for a in cfg.agents.values() if a.solve]
        if solving:
            raise ConfigError(
                f"config error at agents: {solving[0]!r} names a PostTrainBench solve dir; add posttrainbench: "
                "{commit, path | repo}, or remove solve"
            )
        return
    prompted = {c.eval for c in cfg.cells if cfg.ptb_agent(cfg.agent_for(c.agent))}
    own = sorted(e for e in prompted if not cfg.evals[e].from_checkout)
    if own:
        raise ConfigError(
            f"config error at evals: {own[0]!r} uses ptflow's task {cfg.evals[own[0]].task} while its agent cells "
            f"are prompted from the PostTrainBench checkout; use task: posttrainbench/{own[0]}, or drop "
            "posttrainbench for ptflow's own evaluation"
        )
    if (cfg.raw.get("judge") or {}).get("cli"):
        raise ConfigError(
            "config error at judge.cli: with posttrainbench the judge is PostTrainBench's (its prompt from the "
            "checkout, an agent CLI in the cell's task dir); use judge: {agent: codex, model: ..., keys: [...]}"
        )


def _check_scoring(scoring: dict, models: dict, evals_in_matrix: set, agents: dict, cells: list) -> None:
    """PostTrainBench's weights need, per eval, an instruct reference for every model (when there is more than one
    eval and no fixed weights): its instruct counterpart evaluated by an agent of kind instruct, the reference table,
    or a named agent's cells. Found missing here, not after the GPU-hours."""
    ref = scoring.get("reference_agent")
    if ref is not None and ref in agents and not agents[ref].trains:
        raise ConfigError(
            f"config error at scoring.reference_agent: {ref!r} trains nothing, so its cells are the base model's "
            "scores and every gap would be 0; name an agent that post-trains (e.g. sft)"
        )
    if len(evals_in_matrix) < 2 or scoring.get("weights") or scoring.get("reference"):
        return  # one eval weighs 1; fixed weights or a table need no measured reference
    if ref is not None and ref in agents and any(c.agent_id == ref for c in cells):
        return
    measured = {c.model for c in cells if agents[c.agent_id].spec.evaluates_instruct}
    lacking = sorted(models[m].id for m in {c.model for c in cells} - measured)
    if lacking:
        hint = (
            f"scoring.reference_agent {ref!r} is not an agent of this matrix; "
            if ref is not None
            else "no instruct reference: "
        )
        raise ConfigError(
            f"config error at scoring: {hint}the weights of PostTrainBench's score need one for model(s) "
            f"{', '.join(lacking)}; add models[].instruct with an agent of kind instruct, scoring.reference (a "
            "zero-shot table), scoring.reference_agent (an agent's cells, e.g. sft) or scoring.weights"
        )
