"""``ptflow rerun``: run again exactly the cells whose failure has a given cause (``--cause``) or the cells listed
(``--cell``), each at the step that failed (``ptflow.results.causes``): the agent or trainer's training, an
evaluation without its training, one seed's evaluation, a judge's vote without its agent.

Files drive it, as they drive Snakemake: the cells' final outputs are the targets, and the failed step's output,
where a finished-but-failed step left one (eval.json ``eval_failed``, a no-verdict judge.json, a manifest whose
agent left no model), is handed to ``--forcerun`` so that step and what depends on it run again; a step that left
nothing is missing and runs anyway. The earlier steps' outputs are there, so they do not run. What Snakemake will
run is printed first (its dry run's jobs per rule); ``--run`` runs it. A cause a rerun cannot fix as things stand
(a refused key, out of memory) is refused with its what-to-do line unless ``--fixed`` says it was done. Cells
accepted as failures (scoring.overrides' ``accepted``, which ``ptflow status`` reads into ``CellStatus.accepted``:
``ptflow.results.overrides.accepted_cells``) are never rerun.

The Snakemake arguments are those given after the options, else the latest run's command line in the working
directory (its targets dropped, as Snakemake's own parser reads them).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ptflow.config.layout import Layout
from ptflow.config.matrix import Cell, Config
from ptflow.results.causes import CAUSES, EVALUATE, EVALUATE_SEED, JUDGE, Diagnosis
from ptflow.results.cell_state import CellStatus


@dataclass
class CellRerun:
    """One cell to run again: its cause, the step, Snakemake's targets and the outputs it must make again."""

    cell: Cell
    diagnosis: Diagnosis
    targets: list[str]
    forcerun: list[str] = field(default_factory=list)


@dataclass
class RerunPlan:
    cells: list[CellRerun]
    refused: dict[str, list[str]]  # cause -> cells it refuses (the fix first)
    accepted: list[str]  # selected cells accepted as failures: left alone
    not_failed: list[str]  # listed cells that have no cause (scored, running, waiting)
    # cause -> what to do as its first refused cell's diagnosis says it (a refused key names its variable)
    todo: dict[str, str] = field(default_factory=dict)

    @property
    def targets(self) -> list[str]:
        return list(dict.fromkeys(t for c in self.cells for t in c.targets))

    @property
    def forcerun(self) -> list[str]:
        return list(dict.fromkeys(f for c in self.cells for f in c.forcerun))


def _not_verdicts(cell_dir: Path) -> list[Path]:
    """The judge votes a no-verdict judge.json was decided from that gave no verdict (all of them where none says)."""
    votes = sorted((cell_dir / "judges").glob("*/run*.json"))
    silent = []
    for vote in votes:
        try:
            data = json.loads(vote.read_text())
        except (OSError, ValueError):
            silent.append(vote)
            continue
        if not isinstance(data, dict) or data.get("status") in ("no_verdict", "failed"):
            silent.append(vote)
    return silent or votes


def _failed_seeds(cell_dir: Path) -> list[Path]:
    """A seeded eval's seeds whose eval.json says every try failed."""
    out = []
    for seed_json in sorted((cell_dir / "seeds").glob("*/eval.json")):
        try:
            if json.loads(seed_json.read_text()).get("status") == "eval_failed":
                out.append(seed_json)
        except (OSError, ValueError):
            out.append(seed_json)
    return out


def cell_rerun(cell: Cell, diagnosis: Diagnosis, layout: Layout, workdir: Path) -> CellRerun:
    """What to hand Snakemake for one cell: its eval.json (and judge.json where it was judged) as targets, and the
    failed step's existing output to make again."""
    cell_dir = layout.cell_dir(cell.model, cell.eval, cell.agent)
    eval_json = layout.eval_json(cell.model, cell.eval, cell.agent)
    judge_json = layout.judge_json(cell.model, cell.eval, cell.agent)
    targets = [eval_json] + ([judge_json] if (workdir / judge_json).exists() else [])

    def rel(path: Path) -> str:  # as Snakemake names outputs: relative to its working directory
        return str(path.relative_to(workdir))

    if diagnosis.step == JUDGE:
        force = [judge_json, *(rel(p) for p in _not_verdicts(workdir / cell_dir))]
        return CellRerun(cell, diagnosis, [judge_json], force)
    if diagnosis.step in (EVALUATE, EVALUATE_SEED):
        seeds = [rel(p) for p in _failed_seeds(workdir / cell_dir)]
        force = seeds or ([eval_json] if (workdir / eval_json).exists() else [])
        return CellRerun(cell, diagnosis, targets, force)
    manifest = layout.manifest(cell.model, cell.eval, cell.agent)
    return CellRerun(cell, diagnosis, targets, [manifest] if (workdir / manifest).exists() else [])


def plan_rerun(
    cfg: Config,
    layout: Layout,
    workdir: Path,
    statuses: list[CellStatus],
    causes: list[str],
    cells: list[Cell],
    fixed: bool = False,
) -> RerunPlan:
    """The cells selected by cause or by name, as Snakemake targets, less the accepted and the refused."""
    unknown = [c for c in causes if c not in CAUSES]
    if unknown:
        raise ValueError(f"--cause {', '.join(unknown)}: not a cause; causes: {', '.join(CAUSES)}")
    by_key = {st.key: st for st in statuses}
    plan = RerunPlan([], {}, [], [])
    listed = {c.key for c in cells}
    for cell in cfg.cells:
        st = by_key.get(cell.key)
        diag = Diagnosis(**st.cause) if st is not None and st.cause else None
        if cell.key in listed and diag is None:
            plan.not_failed.append(f"{cell.key} ({st.state if st else 'unknown'})")
            continue
        if diag is None or (cell.key not in listed and diag.cause not in causes):
            continue
        if st.accepted:  # scoring.overrides' accepted failures, as ptflow status read them
            plan.accepted.append(cell.key)
        elif not CAUSES[diag.cause].rerun and not fixed:
            plan.refused.setdefault(diag.cause, []).append(cell.key)
            plan.todo.setdefault(diag.cause, diag.todo())
        else:
            plan.cells.append(cell_rerun(cell, diag, layout, workdir))
    return plan


def snakemake_args(given: list[str], latest_command: list[str], workdir: Path, snakefile: Path) -> list[str]:
    """The arguments of the rerun's Snakemake: those given, else the latest run's (its targets and ``--forcerun``
    dropped, read by Snakemake's own parser), with the working directory and the Snakefile it needs."""
    args = list(given) if given else list(latest_command[1:])
    if not given and args:
        from snakemake.cli import get_argument_parser

        parsed, _ = get_argument_parser().parse_known_args(args)
        drop = set(parsed.targets or ()) | set(parsed.forcerun or ())
        # "--" too: it ended the options before the targets, and would make the rerun's options targets
        args = [a for a in args if a not in drop and a not in ("-R", "--forcerun", "--")]
    keys = {a.split("=", 1)[0] for a in args}
    if not keys & {"-d", "--directory"}:
        args += ["--directory", str(workdir)]
    if not keys & {"-s", "--snakefile"} and not (workdir / "Snakefile").is_file():
        args += ["--snakefile", str(snakefile)]
    return args


def command_args(plan: RerunPlan, args: list[str]) -> list[str]:
    """Targets first (an option taking several values cannot swallow them), ``--forcerun`` last (it takes every
    value after it)."""
    out = [*plan.targets, *args, "--rerun-incomplete"]
    return out + (["--forcerun", *plan.forcerun] if plan.forcerun else [])


def describe(plan: RerunPlan) -> list[str]:
    """What the rerun selected, cell by cell, and what it leaves alone and why."""
    lines = []
    for cause, keys in plan.refused.items():
        todo = plan.todo.get(cause) or CAUSES[cause].todo
        lines.append(f"refused: {len(keys)} cell(s) of cause {cause}: {todo} ({', '.join(keys)})")
    if plan.accepted:
        lines.append(f"accepted as failures, not rerun: {', '.join(plan.accepted)}")
    if plan.not_failed:
        lines.append(f"nothing to rerun (no failure): {', '.join(plan.not_failed)}")
    for c in plan.cells:
        again = ", ".join(c.forcerun) if c.forcerun else "its missing outputs"
        lines.append(f"rerun {c.cell.key}: cause {c.diagnosis.cause}, step {c.diagnosis.step} (makes again: {again})")
    return lines


def jobs_per_rule(dry_run_text: str) -> dict[str, int]:
    """The dry run's ``Job stats`` table (rule -> jobs), as ``ptflow plan`` reads it."""
    from ptflow.ops.plan_jobs import parse_dry_run

    return parse_dry_run(dry_run_text)[1]


def run(args: list[str]) -> int:
    """Run Snakemake for real, in the foreground (it is the run's driver), its output straight to the terminal."""
    return subprocess.run([str(Path(sys.executable).with_name("snakemake")), *args]).returncode
