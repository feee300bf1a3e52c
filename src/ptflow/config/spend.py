"""What agent cells may spend and what their spend costs: the price table (``config/prices.yaml``, its schema
``schemas/prices.schema.json``), the config's caps (``agents[].max_spend_usd``, ``agents[].subscription``,
``spend: {prices, max_usd, max_usd_per_cell}``), the one function that turns a CLI's reported usage into dollars
(:func:`usd_of`), and what a train job is handed of them (:func:`train_spend`).

Dollars come from facts only: the CLI's own price where it gives one (claude's ``total_cost_usd``, opencode's
``cost``), else the tokens times the table's price for the agent's model, else none, with why. A subscription agent
is not billed per token: it is never priced and shows as "subscription". Nothing here runs a CLI or reads a stream
(``ptflow.stages.train.agent.spend`` watches a running cell's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from ptflow.config.validate import SCHEMA_DIR, ConfigError

PRICES_SCHEMA = SCHEMA_DIR / "prices.schema.json"
DEFAULT_PRICES = "config/prices.yaml"  # relative to the workflow (the checkout), as scoring.reference is
PER_MILLION = 1_000_000
SUBSCRIPTION = "subscription"  # how a subscription agent's spend is shown
NOT_PRICED = "n/a (tokens only, no price)"  # how a cell with tokens but no dollars is shown
NOT_STARTED_FILE = "not_started.json"  # in a cell's trace dir: its agent was not started (the matrix cap)
MATRIX_CAP_REACHED = "matrix spend cap reached"  # that marker's reason (ptflow.results.causes classifies it)
SPEND_CAP = "spend_cap"  # agent_run.stopped_by of a cell its own cap stopped
LIVE_FILE = "spend.json"  # in a cell's trace dir: its spend so far, rewritten as the agent runs
# The CLIs whose stream reports tokens as they are spent (claude: every assistant message's usage; opencode: every
# step_finish); codex prints its usage at turn.completed and gemini at its result event, once per session: a cap
# could only stop them after the fact.
LIVE_SPEND_CLIS = ("claude", "opencode")
LATE_SPEND = {"codex": "turn (turn.completed)", "gemini": "session (its result event)"}


@dataclass(frozen=True)
class Dollars:
    """A cell's spend in USD (None: unknown), how it was found (``cli``: the CLI priced it; ``prices``: tokens x the
    table; ``subscription``; ``unpriced``: tokens but no price; ``none``: no usage reported) and why, in words."""

    usd: float | None
    basis: str
    why: str

    def to_json(self) -> dict:
        return {"usd": self.usd, "basis": self.basis, "why": self.why}

    def text(self) -> str:
        if self.basis == SUBSCRIPTION:
            return SUBSCRIPTION
        return f"${self.usd:.2f}" if self.usd is not None else NOT_PRICED


def price_for(prices: dict, model: str | None) -> dict | None:
    """The table's entry for an agent's model: its name as given, else its last path part (``models/gemini-3-pro-
    preview``, ``openai/gpt-5``)."""
    if not model:
        return None
    return prices.get(model) or prices.get(model.rsplit("/", 1)[-1])


def usd_of(usage: dict | None, *, model: str | None, price: dict | None, subscription: bool = False) -> Dollars:
    """An ApiUsage (``agent_run.api_usage``'s shape: input tokens with the cached ones included, cached, output,
    the CLI's own ``cost_usd``) in dollars: the CLI's own price, else tokens x ``price`` (USD per million: input,
    cached_input, output), else None with why."""
    if subscription:
        return Dollars(None, SUBSCRIPTION, "a subscription agent: not billed per token")
    if not usage:
        return Dollars(None, "none", "its CLI reported no usage")
    if usage.get("cost_usd") is not None:
        return Dollars(round(float(usage["cost_usd"]), 6), "cli", "priced by its CLI")
    if price is None:
        return Dollars(None, "unpriced", f"no price for {model or 'its model'}")
    cached = int(usage.get("cached_tokens") or 0)
    fresh = max(int(usage.get("input_tokens") or 0) - cached, 0)
    usd = (
        fresh * price["input"]
        + cached * price.get("cached_input", price["input"])
        + int(usage.get("output_tokens") or 0) * price["output"]
    ) / PER_MILLION
    return Dollars(round(usd, 6), "prices", f"tokens x the price table for {model}")


def load_prices(path: Path) -> dict:
    """The price table at ``path``, checked against its schema; one line naming the file and key otherwise."""
    from jsonschema import Draft202012Validator

    try:
        table = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"config error at spend.prices: cannot read {path} ({exc.strerror}); give a price table "
                          f"(see {DEFAULT_PRICES})") from None  # fmt: skip
    except yaml.YAMLError as exc:
        raise ConfigError(f"config error at spend.prices: {path} is not YAML ({exc})") from None
    if isinstance(table, dict) and table.get("date") is not None:
        table["date"] = str(table["date"])  # YAML reads 2026-11-29 as a date
    validator = Draft202012Validator(json.loads(PRICES_SCHEMA.read_text()))
    errors = sorted(validator.iter_errors(table), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        raise ConfigError(f"config error at spend.prices: {path} at {where}: {err.message} "
                          f"(see {PRICES_SCHEMA.name})")  # fmt: skip
    return table


@dataclass(frozen=True)
class SpendSettings:
    """The config's spend settings: the price table (None where no cap needs it and none is given), the matrix
    cap, each agent's cap (its own or ``spend.max_usd_per_cell``) and which agents are subscriptions."""

    table: dict | None
    matrix_cap: float | None
    agent_caps: dict[str, float]
    subscriptions: frozenset[str]

    def price(self, model: str | None) -> dict | None:
        return price_for((self.table or {}).get("models") or {}, model)

    def dollars(self, agent, usage: dict | None) -> Dollars:
        """An agent's (``ptflow.config.entries.Agent``) cell's usage in dollars."""
        return usd_of(usage, model=agent.model, price=self.price(agent.model),
                      subscription=agent.id in self.subscriptions)  # fmt: skip

    def cap_of(self, agent_id: str) -> float | None:
        return self.agent_caps.get(agent_id)

    @property
    def any_cap(self) -> bool:
        return self.matrix_cap is not None or bool(self.agent_caps)


def spend_settings(cfg, workflow: Path | str) -> SpendSettings:
    """The spend settings of a validated config (``ptflow.config.matrix.Config``), refused in one line where a cap
    cannot work: a cap on an agent that is not a real CLI's, on a subscription, or on a model with no price."""
    raw = cfg.raw.get("spend") or {}
    entries = {a["id"]: (i, a) for i, a in enumerate(cfg.raw.get("agents") or [])}
    default_cap = raw.get("max_usd_per_cell")
    subscriptions = frozenset(i for i, (_, a) in entries.items() if a.get("subscription"))
    path = Path(raw.get("prices") or DEFAULT_PRICES)
    path = path if path.is_absolute() else Path(workflow) / path
    table = load_prices(path) if ("prices" in raw or path.is_file()) else None
    caps: dict[str, float] = {}
    for agent in cfg.agents.values():
        i, entry = entries[agent.id]
        own = entry.get("max_spend_usd")
        cap = own if own is not None else (default_cap if agent.spec.agent_cli else None)
        if cap is None:
            continue
        where = f"agents[{i}].max_spend_usd" if own is not None else "spend.max_usd_per_cell"
        _check_capped(agent, where, agent.id in subscriptions, table, own is not None)
        if agent.id not in subscriptions:  # spend.max_usd_per_cell passes subscriptions by: they are not billed
            caps[agent.id] = float(cap)
    matrix_cap = raw.get("max_usd")
    return SpendSettings(table, float(matrix_cap) if matrix_cap is not None else None, caps, subscriptions)


def _check_capped(agent, where: str, subscription: bool, table: dict | None, own: bool) -> None:
    """A cap this agent's cells can keep: a real CLI that reports tokens, billed per token, its model priced."""
    from ptflow.config.agent_clis import CLI_PACKAGES

    if not agent.spec.agent_cli or agent.cli not in CLI_PACKAGES:
        raise ConfigError(f"config error at {where}: agent {agent.id} is not a real agent CLI's (claude, codex, "
                          "gemini, opencode), whose stream reports its spend; remove the cap")  # fmt: skip
    if agent.cli not in LIVE_SPEND_CLIS and not subscription:
        raise ConfigError(
            f"config error at {where}: {agent.cli} (agent {agent.id}) prints its spend only when its "
            f"{LATE_SPEND[agent.cli]} ends, so a cap cannot stop it while it spends; remove the cap (spend.max_usd, "
            f"the matrix cap, still counts its finished cells)"
        )
    if subscription:
        if own:
            raise ConfigError(f"config error at {where}: agent {agent.id} is a subscription (not billed per "
                              "token); remove its cap or its subscription: true")  # fmt: skip
        return
    if price_for((table or {}).get("models") or {}, agent.model) is None:
        raise ConfigError(
            f"config error at {where}: no price for {agent.model!r} (agent {agent.id}) in the price table "
            f"(spend.prices, default {DEFAULT_PRICES}); add its USD per million input/cached_input/output tokens"
        )


@dataclass(frozen=True)
class CellSpend:
    """What an agent cell's train job is handed of the spend settings (in rule train's params value, beside the
    compared spec: a changed cap or price reruns no finished cell): its cap, its model's price, whether it is a
    subscription, its live spend file, and with a matrix cap that cap and the run's ledger of the matrix's agent
    cells (:func:`write_ledger`; a path, so what a job is handed stays the same size whatever the matrix's)."""

    cap_usd: float | None
    price: dict | None
    subscription: bool
    live: str
    matrix_cap_usd: float | None = None
    ledger: str | None = None


def train_spend(settings: SpendSettings, agent, trace_dir: str, ledger: str) -> CellSpend | None:
    """An agent cell's :class:`CellSpend`. Every agent cell gets one, capped or not: its manifest records its dollars
    (the leaderboard's column). None for agents of other kinds."""
    if not agent.spec.agent_cli:
        return None
    return CellSpend(
        cap_usd=settings.cap_of(agent.id),
        price=settings.price(agent.model),
        subscription=agent.id in settings.subscriptions,
        live=str(Path(trace_dir) / LIVE_FILE),
        matrix_cap_usd=settings.matrix_cap,
        ledger=ledger if settings.matrix_cap is not None else None,
    )


def agent_cells(cfg, layout) -> list[dict]:
    """The matrix's agent cells (cli-agent) as the matrix cap counts them: each its trace dir and manifest."""
    return [
        {"cell": c.key, "trace_dir": layout.agent_trace_dir(c.model, c.eval, c.agent),
         "manifest": layout.manifest(c.model, c.eval, c.agent)}
        for c in cfg.cells
        if cfg.agent_for(c.agent).spec.agent_cli
    ]  # fmt: skip


def write_ledger(settings: SpendSettings, cfg, layout) -> str | None:
    """The run's ledger of the matrix cap (``Layout.spend_ledger``): the matrix's agent cells, written once when the
    run starts (the driver's onstart, ``ptflow.ops.run_hooks``), before any job; each agent cell's job reads it to
    count the others' spend. Its path; None (and nothing written) without a matrix cap."""
    from ptflow.files import write_json_atomic

    if settings.matrix_cap is None:
        return None
    path = layout.spend_ledger()
    write_json_atomic(path, {"cap_usd": settings.matrix_cap, "cells": agent_cells(cfg, layout)})
    return path
