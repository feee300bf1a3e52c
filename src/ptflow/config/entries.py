"""The entries of a config: its models, evals and agents, each parsed from its section and checked.

The schema (``ptflow.config.validate``) has checked each entry's shape; these builders add what a schema cannot
express (path-safe ids, no duplicates, pinned revisions, a grader where a task needs one, ``from`` chains without
cycles) and give each entry its typed value. Besides the config's own build (``ptflow.config.matrix.build_config``),
the aggregate job reads its models and agents through :func:`build_models` and :func:`build_agents`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from ptflow.config import naming, tasks
from ptflow.config import posttrainbench as ptb
from ptflow.config.kinds import KINDS, AgentKind
from ptflow.config.validate import ConfigError, canonical, check_unique_ids, unknown_id_error
from ptflow.keys import looks_like_secret


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
    rescore: tuple[str, ...] = ()  # scorers rule rescore applies to its cells' stored inspect logs (tasks.RESCORERS)
    # evaluation seeds (None: matrix.seeds, applied by build_config; (): none): each its own evaluation of a cell
    seeds: tuple[int, ...] | None = None
    seed_changes_data: bool = False  # the seed shuffles samples (gpqamain): a greedy model still gets every seed
    # posttrainbench/<eval> of a checkout whose evaluation is main's seeded final evaluation: what its
    # run_final_eval.sh says of the task (its seeds and seed_changes_data come from it too; set by config.load)
    final: ptb.FinalEval | None = None

    @property
    def seeded(self) -> bool:
        return bool(self.seeds)

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


# An agent's defaults, each written here once. build_agents fills them into Agent, and what reads a train job's
# params (ptflow.stages.train.agent.cell) fills in the same ones: those params leave on_restart and sync_minutes out
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


def build_models(entries: list[dict]) -> dict[str, Model]:
    """The ``models:`` entries, checked and parsed (by path name); their shape is the schema's (``build_config``
    checks both). The aggregate job reads its models through this too (``ptflow.results.settings``)."""
    check_unique_ids(entries, "models")
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


def build_evals(entries: list[dict]) -> dict[str, Eval]:
    """The ``evals:`` entries, checked and parsed (by id); their shape is the schema's (``build_config`` checks
    both)."""
    check_unique_ids(entries, "evals")
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
            _rescore(i, e),
            tuple(e["seeds"]) if "seeds" in e else None,
            bool(e.get("seed_changes_data", False)),
        )
    return evals


def _rescore(i: int, e: dict) -> tuple[str, ...]:
    """The eval's rescorers: its own list (``rescore``; [] for none), else its task's default."""
    names = tuple(e["rescore"]) if "rescore" in e else tasks.facts(e["task"]).rescore
    unknown = [n for n in names if n not in tasks.RESCORERS]
    if unknown:
        raise ConfigError(
            f"config error at evals[{i}].rescore: {unknown[0]!r} is not a rescorer; use {', '.join(tasks.RESCORERS)}"
        )
    return names


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
    if e.get("seeds"):
        raise ConfigError(
            f"{where}.seeds: eval {e['id']!r} runs the PostTrainBench checkout's evaluate.py, which takes no --seed "
            "(9082063's and d27a95e's one-shot evaluate.py); main's seeded final evaluation takes the seeds its own "
            "run_final_eval.sh --default-seeds gives: the checkout decides; remove seeds here"
        )
    if e.get("rescore"):
        raise ConfigError(
            f"{where}.rescore: eval {e['id']!r} runs the PostTrainBench checkout's evaluate.py, which keeps no inspect "
            "log ptflow can read; remove rescore, or rescore ptflow's own task of this eval (inspect_evals/...)"
        )
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
    return Eval(
        e["id"],
        None,
        e["task"],
        None,
        "none",
        tuple(lower),
        {},
        e.get("limit"),
        keys=tuple(e.get("keys", ())),
        seeds=() if "seeds" in e else None,
    )


def eval_from_entry(entry: dict) -> Eval:
    """One ``evals:`` entry with the semantic checks (its shape is the schema's: ``build_config`` checks both)."""
    return build_evals([entry])[entry["id"]]


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
    (``ptflow.results.settings``)."""
    check_unique_ids(entries, "agents")
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
            from ptflow.config.agent_clis import CLI_PACKAGES, SCRIPTED

            if a["cli"] not in CLI_PACKAGES and a["cli"] != SCRIPTED:
                close = difflib.get_close_matches(a["cli"], [*CLI_PACKAGES, SCRIPTED], 1)
                raise ConfigError(
                    f"config error at agents[{i}].cli: {a['cli']!r} is not an agent CLI ptflow knows"
                    + (f" (did you mean '{close[0]}'?)" if close else "")
                    + f"; use one of {', '.join([*CLI_PACKAGES, SCRIPTED])}, or give the agent its own 'command' list"
                )
    for i, a in enumerate(entries):
        start = a.get("from")
        if start is None:
            continue
        if start not in agents:
            raise unknown_id_error("agent", f"agents[{i}].from", start, agents)
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
