"""An agent cell's spend budget as its train job keeps it (the settings come from ``ptflow.config.spend``, handed to
the job in rule train's params value, ``ptflow.config.spend.CellSpend``): before the CLI starts, the matrix cap (the
other agent cells' spend so far, the cells read from the run's ledger;
reached: the cell writes ``not_started.json`` in its trace dir and fails in one line, its agent never started);
while it runs, :class:`SpendWatch` reads the CLI's stream as it grows (the CLI module's ``usage`` over stdout.log so
far), rewrites the live spend file and says when the cell's cap is reached, and ``launch.run_agent`` then stops the
agent as its time budget does (TERM, KILL after 30 s): its final_model is kept and evaluated, the manifest says
``agent_run.stopped_by: "spend_cap"`` with the spend and the cap.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ptflow.config.spend import LIVE_FILE, MATRIX_CAP_REACHED, NOT_STARTED_FILE, CellSpend, Dollars, usd_of
from ptflow.files import write_json_atomic
from ptflow.stages.train.agent.clis import CLIS
from ptflow.stages.train.agent.context import AgentCellError

WATCH_SECONDS = 2.0  # how often the stream is read while the agent runs (what the cap may overshoot by)


def cell_dollars(spend: CellSpend, cli: str | None, model: str | None, stdout: Path) -> tuple[dict | None, Dollars]:
    """The usage the CLI reported in ``stdout`` so far and its dollars at the cell's price."""
    usage = cli_usage(cli, stream_usage_events(stdout))
    return usage, usd_of(usage, model=model, price=spend.price, subscription=spend.subscription)


def _slim(ev: dict) -> dict:
    """An event with what the CLIs' ``usage`` read of it (ids, types, usage, tokens, cost), its content dropped: a
    long run's stream is not held whole."""
    out = {k: v for k, v in ev.items() if k not in ("message", "item", "part")}
    if isinstance(ev.get("message"), dict):
        out["message"] = {k: ev["message"][k] for k in ("id", "usage") if k in ev["message"]}
    if isinstance(ev.get("part"), dict):
        out["part"] = {k: ev["part"][k] for k in ("tokens", "cost") if k in ev["part"]}
    return out


def stream_usage_events(stdout: Path) -> list[dict]:
    """stdout.log's JSONL events, slimmed (every attempt's: the cell's spend is theirs together)."""
    events = []
    try:
        fh = open(stdout, "rb")  # noqa: SIM115 - closed below; no log yet is no events
    except FileNotFoundError:
        return []
    with fh:
        for raw in fh:
            if raw.startswith(b"{"):
                try:
                    ev = json.loads(raw.decode(errors="replace"))
                except json.JSONDecodeError:
                    continue  # a line the CLI is still writing
                if isinstance(ev, dict):
                    events.append(_slim(ev))
    return events


def cli_usage(cli: str | None, events: list[dict]) -> dict | None:
    spec = CLIS.get(cli)
    spent = spec.usage(events) if spec is not None and spec.usage is not None else None
    return None if spent is None else spent.to_json()


def recorded_usd(trace_dir: Path, manifest: Path) -> float | None:
    """A cell's spend so far: its live spend file (a running cell's, or a finished one's last), else its manifest's
    ``agent_run.spend`` (or the CLI's own ``cost_usd``); None where neither says."""
    for path, pick in ((trace_dir / LIVE_FILE, lambda d: d.get("usd")),
                       (manifest, lambda d: _manifest_usd(d.get("agent_run") or {}))):  # fmt: skip
        try:
            usd = pick(json.loads(path.read_text()))
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(usd, int | float):
            return float(usd)
    return None


def _manifest_usd(run: dict) -> float | None:
    spend = run.get("spend") if isinstance(run.get("spend"), dict) else {}
    if spend.get("usd") is not None:
        return spend["usd"]
    usage = run.get("api_usage") if isinstance(run.get("api_usage"), dict) else {}
    return usage.get("cost_usd")


def matrix_spent(cells: list[dict]) -> tuple[float, int]:
    """The matrix's agent cells' spend so far (each ``{"trace_dir", "manifest"}``): USD, and how many cells spent
    without a price (not counted)."""
    usd, unknown = 0.0, 0
    for cell in cells:
        spent = recorded_usd(Path(cell["trace_dir"]), Path(cell["manifest"]))
        if spent is None:
            unknown += Path(cell["trace_dir"], LIVE_FILE).is_file()
        else:
            usd += spent
    return round(usd, 6), unknown


@dataclass(frozen=True)
class MatrixCapReached:
    """The matrix cap reached before a run starts: what was spent, by how many cells, and the agent cells that have
    not started (no manifest: never started, or stopped before their agent finished) and so are no targets of the
    run (``ptflow.jobs.rule_values.RuleInputs``), nor started by it."""

    cap_usd: float
    spent_usd: float
    spent_cells: int
    waiting: tuple[str, ...]  # cell keys (model/eval/agent)

    def line(self) -> str:
        return (f"matrix spend cap ${self.cap_usd:.2f} reached (${self.spent_usd:.2f} spent by {self.spent_cells} "
                f"cells): {len(self.waiting)} agent cells not started; raise spend.max_usd to go on")  # fmt: skip

    def note(self) -> str:
        """What a waiting cell's fallback says on the leaderboard."""
        return (f"not started: {MATRIX_CAP_REACHED} (${self.spent_usd:.2f} spent of the matrix's "
                f"${self.cap_usd:.2f}, spend.max_usd)")  # fmt: skip


def matrix_cap_reached(cap_usd: float | None, cells: list[dict], root: Path = Path(".")) -> MatrixCapReached | None:
    """Whether the matrix's agent cells (``ptflow.config.spend.agent_cells``: each its ``cell`` key, trace dir and
    manifest, relative to ``root``) have together spent ``cap_usd`` (spend.max_usd) or more; None where there is no
    cap or it is not reached, or no cell is left to start. A cheap read: each cell's live spend file or manifest."""
    if cap_usd is None:
        return None
    spent, counted, waiting = 0.0, 0, []
    for cell in cells:
        trace, manifest = root / cell["trace_dir"], root / cell["manifest"]
        usd = recorded_usd(trace, manifest)
        if usd is not None:
            spent, counted = spent + usd, counted + 1
        if not manifest.is_file():
            waiting.append(cell["cell"])
    if spent < cap_usd or not waiting:
        return None
    return MatrixCapReached(float(cap_usd), round(spent, 6), counted, tuple(waiting))


def check_matrix_cap(spend: CellSpend | None, trace_dir: Path, agent_id: str, log) -> None:
    """Before the agent starts: where the matrix's other agent cells (the run's ledger, ``spend.ledger``) have spent
    its cap, write ``not_started.json`` in the cell's trace dir and fail in one line (the agent is never started;
    raising the cap and running again starts it). Otherwise remove such a marker of an earlier run. A ledger that
    cannot be read starts no agent either: the cap could not be kept."""
    marker = trace_dir / NOT_STARTED_FILE
    if spend is None or spend.matrix_cap_usd is None:
        marker.unlink(missing_ok=True)
        return
    cap = float(spend.matrix_cap_usd)
    spent, unknown = matrix_spent(ledger_cells(spend.ledger, agent_id, exclude=trace_dir))
    if spent < cap:
        marker.unlink(missing_ok=True)
        return
    write_json_atomic(marker, {"reason": MATRIX_CAP_REACHED, "spent_usd": spent, "cap_usd": cap,
                               "unpriced_cells": unknown, "time": time.time()})  # fmt: skip
    raise AgentCellError(
        f"agent {agent_id}: not started: {MATRIX_CAP_REACHED} (${spent:.2f} spent of the matrix's ${cap:.2f}, "
        "spend.max_usd); finished cells stay scored; raise the cap to run it"
    )


def ledger_cells(ledger: str | None, agent_id: str, exclude: Path) -> list[dict]:
    """The matrix's agent cells in the run's ledger (``ptflow.config.spend.write_ledger``) but the one whose trace
    dir is ``exclude`` (this cell: its own earlier attempts are its own cap's business)."""
    try:
        cells = json.loads(Path(ledger).read_text())["cells"]
    except (OSError, TypeError, ValueError, KeyError) as exc:
        raise AgentCellError(
            f"agent {agent_id}: not started: the matrix cap's ledger {ledger} cannot be read ({type(exc).__name__}); "
            "it is written when the workflow starts (run the workflow, not the job alone), or remove spend.max_usd"
        ) from None
    own = exclude.resolve()
    return [c for c in cells if Path(c["trace_dir"]).resolve() != own]


class SpendWatch:
    """Reads the CLI's stream as it grows every ``WATCH_SECONDS`` (a background thread while the agent runs),
    rewrites the live spend file, and sets ``reached`` once the cell's cap is reached (``launch.run_agent`` stops the
    agent then)."""

    def __init__(self, spend: CellSpend, cli: str | None, model: str | None, stdout: Path, log):
        self.spend, self.cli, self.model, self.stdout, self.log = spend, cli, model, stdout, log
        self.reached = threading.Event()
        self.last: Dollars | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ptflow-agent-spend", daemon=True)

    def check(self) -> Dollars:
        usage, dollars = cell_dollars(self.spend, self.cli, self.model, self.stdout)
        self.last = dollars
        record = {**dollars.to_json(), "api_usage": usage, "cap_usd": self.spend.cap_usd, "time": time.time()}
        write_json_atomic(Path(self.spend.live), record)
        cap = self.spend.cap_usd
        if cap is not None and dollars.usd is not None and dollars.usd >= cap and not self.reached.is_set():
            self.log(f"spend cap reached: ${dollars.usd:.4f} of ${cap:.2f} ({dollars.why}): stopping the agent")
            self.reached.set()
        return dollars

    def _run(self) -> None:
        while not self._stop.wait(WATCH_SECONDS):
            try:
                self.check()
            except OSError as exc:  # a full or flaky disk: the next look tries again
                self.log(f"spend watch: {exc}")

    def __enter__(self) -> SpendWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.check()  # the final spend, after the last of the stream


def spend_record(spend: CellSpend | None, cli: str | None, model: str | None, stdout: Path, stopped: bool) -> dict:
    """The manifest's ``agent_run`` fields of the spend: ``spend`` (USD, how, why, the cap) and, where the cap
    stopped the agent, ``stopped_by: "spend_cap"``."""
    from ptflow.config.spend import SPEND_CAP

    if spend is None:
        return {}
    _, dollars = cell_dollars(spend, cli, model, stdout)
    record = {"spend": {**dollars.to_json(), "cap_usd": spend.cap_usd}}
    return {**record, "stopped_by": SPEND_CAP} if stopped else record
