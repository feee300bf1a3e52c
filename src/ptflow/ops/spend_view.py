"""The spend budget as ``ptflow status`` and ``ptflow plan`` show it: the agent cells' spend so far (each cell's live
spend file or its manifest's ``agent_run.spend``, ``ptflow.stages.train.agent.spend.recorded_usd``), the cells whose
dollars are unknown (tokens but no price) or not billed (subscription), the caps (``ptflow.config.spend``), the cells
the matrix cap left unstarted (their ``not_started.json``), and for the plan the most the matrix may spend: each
agent cell's cap summed, no more than the matrix cap. Unknown dollars are said, never estimated."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ptflow.config.spend import MATRIX_CAP_REACHED, NOT_STARTED_FILE, SUBSCRIPTION, agent_cells, spend_settings
from ptflow.stages.train.agent.spend import matrix_cap_reached, recorded_usd


@dataclass
class SpendView:
    spent_usd: float = 0.0
    priced_cells: int = 0
    unknown_cells: list[str] = field(default_factory=list)  # spent tokens, no dollars (no price)
    subscription_agents: list[str] = field(default_factory=list)
    agent_cells: int = 0
    matrix_cap: float | None = None
    caps: dict[str, float] = field(default_factory=dict)  # agent id -> its cells' cap
    capped_cells: dict[str, int] = field(default_factory=dict)  # agent id -> its cells in the matrix
    not_started: list[str] = field(default_factory=list)  # cells the matrix cap left unstarted
    cap_reached: str = ""  # the matrix cap reached: the line the workflow says when it starts (else empty)

    @property
    def most(self) -> float | None:
        """The most the matrix may spend: each agent cell's cap summed, at most the matrix cap; None where a cell
        of an agent without a cap (and billed per token) makes it unbounded and no matrix cap bounds it."""
        uncapped = sum(n for a, n in self.capped_cells.items() if a not in self.caps)
        cells = sum(self.caps[a] * n for a, n in self.capped_cells.items() if a in self.caps)
        if uncapped:
            return self.matrix_cap
        return cells if self.matrix_cap is None else min(cells, self.matrix_cap)

    def caps_text(self) -> str:
        parts = [f"matrix ${self.matrix_cap:.2f} (spend.max_usd)" if self.matrix_cap is not None else "no matrix cap"]
        parts += [f"{a} ${c:.2f} per cell" for a, c in sorted(self.caps.items())]
        parts += [f"{a} {SUBSCRIPTION}" for a in self.subscription_agents]
        return "; ".join(parts)

    def status_lines(self) -> list[str]:
        unknown = f"; {len(self.unknown_cells)} cells unknown (tokens, no price)" if self.unknown_cells else ""
        lines = [f"spend so far: ${self.spent_usd:.2f} over {self.priced_cells} of {self.agent_cells} agent cells"
                 f"{unknown}; caps: {self.caps_text()}"]  # fmt: skip
        if self.not_started:
            lines.append(f"not started: {MATRIX_CAP_REACHED} ({len(self.not_started)} cells: "
                         f"{', '.join(self.not_started)}); raise spend.max_usd to run them")  # fmt: skip
        return lines

    def plan_lines(self) -> list[str]:
        most = self.most
        bound = f"${most:.2f}" if most is not None else "unbounded (an agent billed per token has no cap)"
        spent = f"  spent so far: ${self.spent_usd:.2f} over {self.priced_cells} of {self.agent_cells} agent cells"
        reached = [f"  {self.cap_reached}"] if self.cap_reached else []
        return ["Spend", f"  caps: {self.caps_text()}", f"  most the matrix may spend: {bound}", spent, *reached]

    def to_json(self) -> dict:
        return {"spent_usd": self.spent_usd, "priced_cells": self.priced_cells, "unknown_cells": self.unknown_cells,
                "subscription_agents": self.subscription_agents, "agent_cells": self.agent_cells,
                "matrix_cap_usd": self.matrix_cap, "caps_usd": self.caps, "most_usd": self.most,
                "not_started": self.not_started, "cap_reached": self.cap_reached}  # fmt: skip


def spend_view(cfg, layout, workdir: Path, workflow: Path) -> SpendView:
    """The matrix's spend so far and its caps, read from the cells' files under ``workdir``."""
    settings = spend_settings(cfg, workflow)
    view = SpendView(matrix_cap=settings.matrix_cap, caps=dict(settings.agent_caps))
    view.subscription_agents = sorted(settings.subscriptions & {c.agent_id for c in cfg.cells})
    for cell in cfg.cells:
        agent = cfg.agent_for(cell.agent)
        if not agent.spec.agent_cli:
            continue
        view.agent_cells += 1
        view.capped_cells[agent.id] = view.capped_cells.get(agent.id, 0) + (agent.id not in settings.subscriptions)
        trace = workdir / layout.agent_trace_dir(cell.model, cell.eval, cell.agent)
        manifest = workdir / layout.manifest(cell.model, cell.eval, cell.agent)
        if (trace / NOT_STARTED_FILE).is_file():
            view.not_started.append(cell.key)
        usd = recorded_usd(trace, manifest)
        if usd is not None:
            view.spent_usd, view.priced_cells = round(view.spent_usd + usd, 6), view.priced_cells + 1
        elif agent.id not in settings.subscriptions and _spent_tokens(trace, manifest):
            view.unknown_cells.append(cell.key)
    # the matrix cap reached: the cells the workflow leaves out of its next run (no manifest), as it decides it
    reached = matrix_cap_reached(settings.matrix_cap, agent_cells(cfg, layout), root=workdir)
    if reached:
        view.cap_reached = reached.line()
        view.not_started += [key for key in reached.waiting if key not in view.not_started]
    return view


def _spent_tokens(trace: Path, manifest: Path) -> bool:
    for path, key in ((trace / "spend.json", "api_usage"), (manifest, "agent_run")):
        try:
            data = json.loads(path.read_text()).get(key) or {}
        except (OSError, ValueError, AttributeError):
            continue
        usage = data.get("api_usage", data) if key == "agent_run" else data
        if isinstance(usage, dict) and (usage.get("input_tokens") or usage.get("output_tokens")):
            return True
    return False
