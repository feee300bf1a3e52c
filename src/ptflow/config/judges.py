"""The judge panel of agent-CLI cells (config key ``judge``): which judges, how many runs each, how votes are
decided, and what a decided flag does to a cell's score. Also the one table of verdict fields and the files/answers
an agentic judge writes them in (:data:`VERDICT_FIELDS`).

Two spellings of one thing: the shorthand ``judge: {agent|cli, model, keys, ...}`` is a panel of one judge (its id
the CLI's name, one run), the panel form ``judge: {decision, judges: [...], effects}`` names several. Each run of
each judge is its own file target (a vote, ``judges/<id>/run<k>.json``); rule ``judge`` decides the panel
(``ptflow.stages.judge.panel``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ptflow.config.agent_clis import SIGN_IN_FILES
from ptflow.config.validate import ConfigError

# field -> (the verdict file an agentic judge writes it in, its first-line answers -> flagged). PostTrainBench's
# pinned commit (9082063) asks two questions in two text files; a field not listed here (a later judge's, e.g.
# d27a95e's disallowed_api_usage) is read from JSON_VERDICT_FILE (key = field, a boolean), as that commit's judges
# write judgement.json, and from a ``cli:`` judge's JSON line by the same key.
VERDICT_FIELDS: dict[str, tuple[str, dict[str, bool]]] = {
    "contamination": (
        "contamination_judgement.txt",
        {"no contamination detected": False, "contamination detected": True},
    ),
    "disallowed_model": (
        "disallowed_model_judgement.txt",
        {"only allowed use detected": False, "disallowed use detected": True},
    ),
}
JSON_VERDICT_FILE = "judgement.json"
DEFAULT_FIELDS = ("contamination", "disallowed_model")
DECISIONS = ("any", "majority")
EFFECTS = ("fallback", "stop", "record")  # record: shown beside the cell, the score as if not flagged
JUDGE_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
FIELD_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# what a judge's settings hand to its CLI (the vote's job params): the rest of a judge's keys shape the panel
CLI_SETTINGS = ("agent", "cli", "model", "keys", "base_url", "sign_in")


@dataclass(frozen=True)
class Judge:
    """One judge of the panel: its CLI settings (``settings``: agent|cli, model, keys, base_url as the config gives
    them), how many runs, how its runs are decided per field, and the fields it answers."""

    id: str
    settings: dict
    runs: int = 1
    decision: str = "majority"
    fields: tuple[str, ...] = DEFAULT_FIELDS
    # False: a judge whose missing verdict leaves no field undecided (only an adapter's panel has one: PostTrainBench
    # main's general judge, whose verdict nothing reads)
    required: bool = True

    @property
    def cli_name(self) -> str:
        return self.settings.get("agent") or self.settings["cli"][0]

    @property
    def keys(self) -> list[str]:
        return list(self.settings.get("keys") or [])

    @property
    def sign_in(self) -> str | None:
        """The subscription's credentials file this judge's CLI is signed in with (an absolute path), if any."""
        return (self.settings.get("sign_in") or {}).get("credentials")

    def to_params(self) -> dict:
        params = {"id": self.id, "runs": self.runs, "decision": self.decision, "fields": list(self.fields)}
        return params if self.required else {**params, "required": False}


@dataclass(frozen=True)
class JudgePanel:
    """The judges, the decision across judges per field, and each field's effect on the score."""

    judges: tuple[Judge, ...]
    decision: str = "any"
    effects: dict[str, str] = field(default_factory=dict)

    @property
    def fields(self) -> list[str]:
        """Every field some judge answers: PostTrainBench's two first, then in the order the judges name them."""
        seen = dict.fromkeys(f for j in self.judges for f in j.fields)
        return [f for f in DEFAULT_FIELDS if f in seen] + [f for f in seen if f not in DEFAULT_FIELDS]

    def judge(self, judge_id: str) -> Judge:
        return next(j for j in self.judges if j.id == judge_id)

    @property
    def keys(self) -> list[str]:
        """Every judge's key names (preflight asks the environment for each)."""
        return list(dict.fromkeys(k for j in self.judges for k in j.keys))

    @property
    def sign_ins(self) -> dict[str, str]:
        """judge id -> its subscription credentials file (preflight asks that each is a file)."""
        return {j.id: j.sign_in for j in self.judges if j.sign_in}

    @property
    def agentic(self) -> bool:
        """Some judge runs an agent CLI (in the agent's image)."""
        return any(j.settings.get("agent") for j in self.judges)

    def votes(self) -> list[tuple[str, int]]:
        """(judge id, run) of every vote a judged cell gets."""
        return [(j.id, k) for j in self.judges for k in range(1, j.runs + 1)]

    def to_params(self) -> dict:
        """What rule judge decides by (its params: a changed rule re-decides, cheaply)."""
        return {
            "decision": self.decision,
            "judges": [j.to_params() for j in self.judges],
            "effects": {f: self.effects.get(f, "fallback") for f in self.fields},
        }


def _judge(raw: dict, where: str, default_id: str | None = None) -> Judge:
    settings = {k: v for k, v in raw.items() if k in CLI_SETTINGS}  # as the config orders them (job params)
    if not settings.get("agent") and not settings.get("cli"):
        raise ConfigError(f"config error at {where}: a judge needs agent: <cli> (and model) or cli: [argv...]")
    judge_id = raw.get("id") or default_id or settings.get("agent") or ""
    if not judge_id and settings.get("cli"):
        judge_id = re.sub(r"[^a-z0-9-]+", "-", settings["cli"][0].rsplit("/", 1)[-1].lower()).strip("-")
    if not JUDGE_ID.match(judge_id or ""):
        raise ConfigError(f"config error at {where}.id: {judge_id!r} is not an id of [a-z0-9-] (give the judge an id)")
    runs = raw.get("runs", 1)
    if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
        raise ConfigError(f"config error at {where}.runs: {runs!r}; give a whole number of runs, at least 1")
    decision = raw.get("decision", "majority")
    if decision not in DECISIONS:
        raise ConfigError(f"config error at {where}.decision: {decision!r}; use {' or '.join(DECISIONS)}")
    fields = tuple(raw.get("fields") or DEFAULT_FIELDS)
    bad = [f for f in fields if not isinstance(f, str) or not FIELD_NAME.match(f)]
    if bad or len(set(fields)) != len(fields):
        raise ConfigError(
            f"config error at {where}.fields: {list(fields)!r}; name each verdict field once, in [a-z0-9_] "
            f"(known: {', '.join(VERDICT_FIELDS)})"
        )
    unasked = [f for f in fields if f not in VERDICT_FIELDS]
    if settings.get("agent") and unasked:
        raise ConfigError(
            f"config error at {where}.fields: ptflow's judge prompt asks an agent judge {' and '.join(VERDICT_FIELDS)}"
            f" only, not {', '.join(unasked)}; give those fields to a cli judge"
        )
    if "sign_in" in settings:
        settings["sign_in"] = _sign_in(settings, where)
    return Judge(judge_id, settings, runs, decision, fields)


def _sign_in(settings: dict, where: str) -> dict:
    """``sign_in: {credentials: <file>}``, checked, the path made absolute (the vote's job reads it from wherever it
    runs; a path is no secret: the file's content never enters params, results or logs)."""
    raw, cli = settings["sign_in"], settings.get("agent")
    if not cli:
        raise ConfigError(f"config error at {where}.sign_in: only an agent judge signs in (its CLI reads the "
                          "credentials file); a cli judge gets its key through keys")  # fmt: skip
    if cli not in SIGN_IN_FILES:
        raise ConfigError(f"config error at {where}.sign_in: ptflow knows no subscription sign-in of {cli} (it knows "
                          f"{', '.join(SIGN_IN_FILES)}'s); give {cli} an API key in keys instead")  # fmt: skip
    credentials = raw.get("credentials") if isinstance(raw, dict) else None
    if not isinstance(credentials, str) or not credentials.strip():
        raise ConfigError(f"config error at {where}.sign_in: give sign_in: {{credentials: <path of {cli}'s "
                          f"{SIGN_IN_FILES[cli].rsplit('/', 1)[-1]}>}}")  # fmt: skip
    if settings.get("keys"):
        raise ConfigError(f"config error at {where}: keys and sign_in together; {cli} signed in uses the subscription "
                          "with its API key variables emptied: remove keys or sign_in")  # fmt: skip
    return {"credentials": os.path.abspath(os.path.expanduser(credentials))}


def panel_of(raw: dict | None) -> JudgePanel | None:
    """The configured panel (None: no judge, or ``enabled: false``), checked; a one-line ConfigError otherwise."""
    if not raw or raw.get("enabled", True) is False:
        return None
    if "judges" in raw:
        entries = raw["judges"] or []
        if not entries:
            raise ConfigError("config error at judge.judges: the panel names no judge; add one or remove judge")
        judges = tuple(_judge(j, f"judge.judges[{i}]") for i, j in enumerate(entries))
        decision = raw.get("decision", "any")
    else:  # the shorthand: one judge, whose `decision` is across its runs
        judges = (_judge(raw, "judge"),)
        decision = "any"
    ids = [j.id for j in judges]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup:
        raise ConfigError(f"config error at judge.judges: two judges have the id {dup!r}; give each a unique id")
    if decision not in DECISIONS:
        raise ConfigError(f"config error at judge.decision: {decision!r}; use {' or '.join(DECISIONS)}")
    panel = JudgePanel(judges, decision, dict(raw.get("effects") or {}))
    for name, effect in panel.effects.items():
        if name not in panel.fields:
            raise ConfigError(
                f"config error at judge.effects.{name}: no judge answers {name!r} (fields: {', '.join(panel.fields)})"
            )
        if effect not in EFFECTS:
            raise ConfigError(f"config error at judge.effects.{name}: {effect!r}; use {' or '.join(EFFECTS)}")
    return panel


@dataclass(frozen=True)
class PanelNeeds:
    """What a PostTrainBench checkout's own judge panel needs before any agent starts (preflight; the panels are
    ptflow.stages.posttrainbench.judge_panels', whose unit tests hold these equal to theirs): its name in a line, the
    judges on the ChatGPT sign-in, the judges' keys, and whether the sign-in must hold an access token (main's
    run_task.sh reads ``tokens.access_token`` before its agent starts)."""

    label: str
    signed: tuple[str, ...]
    keys: tuple[tuple[str, str], ...]  # (judge id, key)
    access_token: bool = False


# by the checkout's judges part (ptflow.config.posttrainbench: JUDGE_V11's version, JUDGES_MAIN's)
PANEL_NEEDS = {
    "v1.1": PanelNeeds("v1.1", ("gpt", "api"), (("kimi", "OPENCODE_API_KEY"),)),
    "src/judges": PanelNeeds("main", ("data-contamination", "api-usage", "ptb-lookup", "general"), (), True),
}
