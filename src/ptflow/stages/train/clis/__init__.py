"""The agent CLIs ptflow drives in ``cli-agent`` cells, one module each (see ``base.py`` for what each knows)."""

from __future__ import annotations

from ptflow.stages.train.clis.base import AgentCli, CellHome
from ptflow.stages.train.clis.claude import CLAUDE
from ptflow.stages.train.clis.codex import CODEX
from ptflow.stages.train.clis.gemini import GEMINI

CLIS: dict[str, AgentCli] = {c.name: c for c in (CLAUDE, CODEX, GEMINI)}

__all__ = ["CLIS", "AgentCli", "CellHome", "get"]


def get(name: str) -> AgentCli | None:
    return CLIS.get(name)
