"""Agent cells as the tests write them: an agent as a dict of the keys a test cares about, made the typed
``ptflow.specs.AgentCliSpec`` (the other fields at what a train job's params leave out), and a cell as its model and
eval (``ptflow.specs.CellRef``)."""

from __future__ import annotations

from pathlib import Path

from ptflow.config.model import DEFAULT_GRACE_MINUTES
from ptflow.specs import AgentCliSpec, CellRef
from ptflow.stages.train.agent_cell import AgentJob


def agent_spec(**fields) -> AgentCliSpec:
    """An AgentCliSpec from the given fields; a ``checkout`` entry (the checkout's place) is left out."""
    fields.pop("checkout", None)
    base = {"cli": None, "model": None, "hours": 1, "grace_minutes": DEFAULT_GRACE_MINUTES, "command": None,
            "keys": [], "trace_dir": "", "hf_home": None}  # fmt: skip
    return AgentCliSpec(**{**base, **fields})


def cell_ref(cell: dict, agent: str = "a") -> CellRef:
    return CellRef(cell["model"], cell["model"].rsplit("/", 1)[-1], cell["eval"], agent)


def agent_job(start_model: str, train_parquet: str | None, out: Path, *, agent: dict, cell: dict, **kw) -> AgentJob:
    """The AgentJob of a test's agent dict (with its checkout's place under ``checkout.path``) and cell dict."""
    checkout = Path(agent["checkout"]["path"]) if agent.get("checkout") else None
    spec = agent_spec(**agent)
    return AgentJob(spec, cell_ref(cell, spec.id), start_model, train_parquet, Path(out), checkout=checkout, **kw)
