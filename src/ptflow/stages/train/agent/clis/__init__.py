"""The agent CLIs ptflow drives in ``cli-agent`` cells and judges, one module each (see ``base.py`` for what each
does): the registry ``CLIS``, the environment a CLI starts from, and the settings written into the cell's private
home. The CLIs' package facts (names, pins, Node.js) are ``ptflow.config.agent_clis``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ptflow.keys import looks_like_secret
from ptflow.stages.train.agent.clis.base import AgentCli, CellHome
from ptflow.stages.train.agent.clis.claude import CLAUDE
from ptflow.stages.train.agent.clis.codex import CODEX
from ptflow.stages.train.agent.clis.gemini import GEMINI
from ptflow.stages.train.agent.clis.opencode import OPENCODE

CLIS: dict[str, AgentCli] = {c.name: c for c in (CLAUDE, CODEX, GEMINI, OPENCODE)}

__all__ = ["CLIS", "AgentCli", "CellHome", "CliUser", "JudgeCliUser", "cell_environment", "get", "prepare_cli_home"]


class CliUser(Protocol):
    """Who runs a CLI in a cell, as its environment and home need it: an agent (``ptflow.specs.AgentCliSpec``) or a
    judge (:class:`JudgeCliUser`): the CLI, its model, the key names it may see (its eval's grader's too) and the
    provider's base URL."""

    @property
    def cli(self) -> str | None: ...

    @property
    def model(self) -> str | None: ...

    @property
    def keys(self) -> Sequence[str]: ...

    @property
    def grader_keys(self) -> Sequence[str]: ...

    @property
    def base_url(self) -> str | None: ...


@dataclass(frozen=True)
class JudgeCliUser:
    """An agentic judge as a :class:`CliUser` (config ``judge``: its CLI, model, keys and base URL)."""

    cli: str
    model: str
    keys: Sequence[str] = ()
    grader_keys: Sequence[str] = ()
    base_url: str | None = None


def get(name: str) -> AgentCli | None:
    return CLIS.get(name)


def cell_environment(agent: CliUser, environ: dict[str, str]) -> dict[str, str]:
    """The environment the agent CLI starts from: the job's, without any secret the agent may not see.

    A variable whose name looks like a secret (``ptflow.keys``) passes only when the agent's ``keys`` or its eval's
    grader (``grader_keys``) name it. A real CLI then gets its provider's key in the variable it reads (codex:
    ``CODEX_API_KEY`` from ``OPENAI_API_KEY``, as PostTrainBench's run_task.sh does), and the other names of that
    key are dropped unless the eval's grader needs them: each CLI sees only its own provider's key."""
    grader = set(agent.grader_keys)
    allowed = set(agent.keys) | grader
    env = {k: v for k, v in environ.items() if not looks_like_secret(k) or k in allowed}
    cli = CLIS.get(agent.cli)
    if cli is not None:
        mapped = cli.key_env(list(agent.keys), environ)
        for name in cli.accepted_keys:
            if name != cli.key_var and name not in grader:
                env.pop(name, None)
        env.update(mapped)
    return env


def prepare_cli_home(
    agent: CliUser, host_home: Path, home: str, task_dir: str, root: bool, host_values: dict | None = None
) -> dict[str, str]:
    """Write the real CLI's settings into the cell's private home (fresh each attempt, so the user's own dotfiles
    never apply) and return the non-secret environment it needs: HOME, the base URL (config ``base_url``), the
    CLI's fixed variables and what its settings need. Nothing for a custom or scripted agent but HOME.
    ``host_values``: where the home is a host dir, the real values of the variables a PostTrainBench checkout's
    settings (copied into the home first) set to container paths (None: drop the variable)."""
    env = {"HOME": home}
    cli = CLIS.get(agent.cli)
    if cli is None:
        return env
    ctx = {"model": agent.model, "task_dir": task_dir, "base_url": agent.base_url, "root": root,
           "host_values": host_values}  # fmt: skip
    env.update(cli.env)
    env.update(cli.write_home(CellHome(host_home, home, task_dir), ctx))
    if agent.base_url and cli.base_url_var:
        env[cli.base_url_var] = agent.base_url
    return env
