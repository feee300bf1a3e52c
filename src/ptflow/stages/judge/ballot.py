"""What one vote is about and what it casts: the cell as its judge reads it (:class:`JudgedCell`) and the vote
itself, its judge and its place in the panel (:class:`Ballot`); and the fresh dir a judge runs in beside the cell's
kept workspace."""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ptflow.config.judges import DEFAULT_FIELDS


@dataclass(frozen=True)
class JudgedCell:
    """An agent cell as its judge reads it: who it is (``{model, eval, agent}``), what its agent run left (the
    manifest's ``agent_run``: ``trace_dir``, the kept ``workspace``, the ``cli``), its readable trace (trace.md),
    and for a cell of a PostTrainBench eval the checkout (``{path, eval_dir}``: the checkout's judge judges it)."""

    cell: dict
    run: dict
    trace_md: Path
    checkout: dict | None = None

    @property
    def workspace(self) -> Path | None:
        """The workspace the agent left, kept for its judges (None: none kept)."""
        kept = self.run.get("workspace")
        return Path(kept) if kept and Path(kept).is_dir() else None

    def no_workspace(self) -> dict:
        return {"status": "no_verdict", "reason": f"the cell kept no workspace for the judge "
                f"({self.run.get('workspace') or 'none'})"}  # fmt: skip


@dataclass(frozen=True)
class Ballot:
    """One vote to cast: its judge (the CLI settings of config key ``judge``: ``agent`` or ``cli``, ``model``,
    ``keys``, ``base_url``, ``sign_in``; None: no judge configured), the file the vote is written to, and which of the
    panel's votes it is (``{judge, run, fields}``, for a PostTrainBench checkout's own panel also ``protocol``,
    ``auth_json``, ``base_url``; None: a judge outside a panel)."""

    judge: dict | None
    path: str | Path
    vote: dict | None = None

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields the judge answers."""
        return tuple((self.vote or {}).get("fields") or DEFAULT_FIELDS)

    @property
    def credentials(self) -> str | None:
        """The subscription credentials file the judge's CLI is signed in with (config ``sign_in``), if any."""
        return ((self.judge or {}).get("sign_in") or {}).get("credentials")

    @property
    def label(self) -> str:
        """The vote's prefix for the dirs it runs in (the panel's other votes of the cell may run at the same time)."""
        return f"{self.vote['judge']}-run{self.vote['run']}-" if self.vote else ""

    def kept(self, trace_dir: Path) -> Path:
        """Where what the judge leaves (its output, trace, verdict files) is kept: the vote's own dir (the vote's
        file without ``.json``), or a judge outside a panel: the cell's trace dir."""
        return Path(self.path).with_suffix("") if self.vote else trace_dir

    def argv(self) -> list[str]:
        """A cli judge's argv: placeholders {model} {python}, and {judge} {run} (a run may be told which it is)."""
        judge = self.judge or {}
        values = {"model": judge.get("model", ""), "python": sys.executable, "judge": "", "run": 1}
        if self.vote:
            values |= {"judge": self.vote["judge"], "run": self.vote["run"]}
        return [part.format(**values) for part in judge["cli"]]


def fresh_root(workspace: Path, label: str) -> Path:
    """A new dir beside the kept workspace (scratch: the same filesystem, so its files can be linked, not copied),
    after removing what a vote of the same label killed at its time limit left there."""
    prefix = f"{workspace.name}.judge-{label}"
    for stale in workspace.parent.glob(f"{prefix}*"):
        shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=workspace.parent))
