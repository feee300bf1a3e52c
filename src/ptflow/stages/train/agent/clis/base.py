"""What ptflow does with one agent CLI (claude, codex, gemini): the variables it reads its key and base URL from,
its default command, the settings it needs in the cell's private home to run non-interactively with every tool
approved, how to read its stream-json output (the trace, the API spend, a refused key) and its judge command.

Its package facts (npm package, pin, binary, API host) are ``ptflow.config.agent_clis``, which config and the image
build read without this code. One module per CLI (``clis/claude.py`` ...) holds one :class:`AgentCli`;
``clis/__init__.py`` is the registry. Nothing here runs the CLI (``stages/train/agent/launch.py`` does) or reads a
secret's value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ptflow.config.agent_clis import CliPackage
from ptflow.files import write_text_atomic


@dataclass(frozen=True)
class CellHome:
    """Where the CLI will see its files: ``home`` and ``task_dir`` as paths *inside* the runtime (the container's
    view on container sites), ``host_home`` where ptflow writes them on the node."""

    host_home: Path
    home: str
    task_dir: str


@dataclass
class ApiUsage:
    """Tokens (and USD, where the CLI prices them itself: claude's ``total_cost_usd``) an agent's CLI reported in its
    stream output. ``input_tokens`` counts every prompt token, the cached ones (``cached_tokens``) included."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float | None = None

    def add(self, other: ApiUsage) -> ApiUsage:
        cost = (
            None if self.cost_usd is None and other.cost_usd is None else (self.cost_usd or 0) + (other.cost_usd or 0)
        )
        return ApiUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            None if cost is None else round(cost, 6),
        )

    def to_json(self) -> dict:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "cost_usd": self.cost_usd,
        }


def total(parts: list[ApiUsage]) -> ApiUsage | None:
    """The sum of what a CLI reported, None where it reported nothing."""
    out = None
    for part in parts:
        out = part if out is None else out.add(part)
    return out


def count(value) -> int:
    """A token count from an event (absent or not a number: 0)."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class AgentCli:
    package: CliPackage  # its name, npm package, pin, binary and API host (ptflow.config.agent_clis)
    key_var: str  # the variable the CLI reads its API key from
    accepted_keys: tuple[str, ...]  # key names an agent may list for this CLI (first one found is passed on)
    base_url_var: str | None  # the CLI's own base-URL setting (a gateway, or the tests' provider stand-in)
    command: tuple[str, ...]  # argv template: {model} {prompt} {task_dir} {hours}
    # writes the per-CLI settings into the cell's home; returns the (non-secret) environment the CLI needs
    write_home: Callable[[CellHome, dict], dict[str, str]]
    # one JSONL event of the CLI's stdout as markdown lines (None: not this CLI's shape)
    trace_lines: Callable[[dict], list[str] | None]
    env: dict[str, str] = field(default_factory=dict)  # fixed variables (PostTrainBench's solve.sh)
    # the judge's argv template ({model} {prompt}), when it differs from ``command``
    judge_command: tuple[str, ...] | None = None
    # did the provider refuse the key? (exit code, this attempt's JSONL events) -> bool: from the CLI's structured
    # output (exit codes, error events with the HTTP status), so the cell fails at once naming the key
    auth_failed: Callable[[int, list[dict]], bool] | None = None
    # the API spend its JSONL events report (every session in them): an ApiUsage, or None where they report none
    usage: Callable[[list[dict]], ApiUsage | None] | None = None
    # the API error that ended the run, as the CLI states it in its events or exit code: ``{"http_status": 429,
    # "type": "rate_limit_error"}`` (either may be None), None where it reports none (ptflow.results.causes reads it)
    api_error: Callable[[int, list[dict]], dict | None] | None = None

    @property
    def name(self) -> str:
        return self.package.name

    def key_env(self, agent_keys: list[str], environ: dict[str, str]) -> dict[str, str]:
        """The key variable the CLI reads, from the first of the agent's keys this CLI accepts that is set."""
        for name in agent_keys:
            if name in self.accepted_keys and environ.get(name):
                return {self.key_var: environ[name]}
        return {}


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


AUTH_STATUSES = (401, 403)


def http_status(text: str) -> int | None:
    """The HTTP status a CLI's error event states (``unexpected status 401 Unauthorized``), if any."""
    m = re.search(r"\b([1-5][0-9][0-9])\b", text)
    return int(m.group(1)) if m else None


def clip(text: str, n: int = 4000) -> str:
    return text if len(text) <= n else text[:n] + f"… [{len(text) - n} more characters]"
