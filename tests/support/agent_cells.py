"""Agent cells as the tests write them: an agent as a dict of the keys a test cares about, made the typed
``ptflow.specs.AgentCliSpec`` (the other fields at what a train job's params leave out), and a cell as its model and
eval (``ptflow.specs.CellRef``)."""

from __future__ import annotations

from pathlib import Path

from ptflow.config.entries import DEFAULT_GRACE_MINUTES
from ptflow.config.spend import CellSpend
from ptflow.specs import AgentCliSpec, CellRef, CheckoutAgent, TrainSpec
from ptflow.stages.train.agent.context import AgentCell
from ptflow.stages.train.cell import Training, TrainRun


def agent_spec(**fields) -> AgentCliSpec:
    """An AgentCliSpec from the given fields; a ``checkout`` entry (the checkout's place) is left out."""
    fields.pop("checkout", None)
    if fields.get("posttrainbench") is not None:  # a test's checkout agent: the object ids are not read by the cell
        fields["posttrainbench"] = CheckoutAgent(
            **{"solve": None, "num_gpus": 1, "objects": {}, **fields["posttrainbench"]}
        )
    base = {"cli": None, "model": None, "hours": 1, "grace_minutes": DEFAULT_GRACE_MINUTES, "command": None,
            "keys": [], "trace_dir": "", "hf_home": None}  # fmt: skip
    return AgentCliSpec(**{**base, **fields})


def cell_ref(cell: dict, agent: str = "a") -> CellRef:
    return CellRef(cell["model"], cell["model"].rsplit("/", 1)[-1], cell["eval"], agent)


def agent_job(
    start_model: str,
    train_parquet: str | None,
    out: Path,
    *,
    agent: dict,
    cell: dict,
    runtime=None,
    resume=None,
    attempt: str | None = None,
    env: dict | None = None,
    threads: int | None = None,
    log=print,
    spend: CellSpend | None = None,
) -> AgentCell:
    """The AgentCell of a test's agent dict (with its checkout's place under ``checkout.path``) and cell dict: the
    training a train job hands the agent cell (its spec as the rule's params make it; ``spend``: its spend settings,
    ptflow.config.spend.train_spend)."""
    checkout = Path(agent["checkout"]["path"]) if agent.get("checkout") else None
    spec = agent_spec(**agent)
    train = TrainSpec(cell=cell_ref(cell, spec.id), kind="cli-agent", params={}, model_revision="main",
                      checkpoint_dir=str(Path(out).parent / "checkpoint"), config_hash="test", hf_home="",
                      runtime=runtime, agent=spec)  # fmt: skip
    run = TrainRun(
        start_model, train_parquet, str(Path(out).parent / "manifest.json"), threads=threads, log=log, spend=spend
    )
    return AgentCell.of(Training(train, run, Path(out), resume, attempt), checkout=checkout, env=env)
