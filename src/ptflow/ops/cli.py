"""``ptflow``: operate a matrix — plan (with GPU-hours), status per cell, cancel, logs, and remote runs over SSH.

    ptflow plan [--json] [snakemake args]           what the dry-run plans and what it will request
    ptflow status [-d WORKDIR] [--watch] [--json]    each cell's state and job, verdicts, cells by cause, the spend
    ptflow cancel [-d WORKDIR] --cell M/E/A | --agent A | --all
    ptflow rerun [-d WORKDIR] --cause C | --cell M/E/A [--fixed] [--run] [snakemake args]   failed cells again
    ptflow logs [-d WORKDIR] CELL                    paths and tails of every log of a cell
    ptflow report [-d WORKDIR] [--port N]            serve results/report (with inspect's log viewer)
    ptflow export --posttrainbench DIR [-d WORKDIR] [--configfile F ...]   cells as PostTrainBench's results dir
    ptflow remote {preflight,stage,run,status,cancel,logs,driver} ...   the same on a login node over SSH
    ptflow doctor --site NAME [snakemake config args]    login-node checks + one short job per partition
    ptflow smoke [--cell M/E/A] [--hours 1] [snakemake args]   one cell with a short budget first
    ptflow interactive --site NAME --nodes N [--command CMD]   salloc + Ray + a shell on the head
    ptflow ray-launcher [-o ray_bare.sub] [--check SBATCH FLAGS]   NeMo-RL's bare-metal launcher script

The configuration is read the way the workflow reads it (embedded default, --configfile, --config); status,
cancel and logs take it from the latest Snakemake run in WORKDIR unless given.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from ptflow.cluster import slurm
from ptflow.cluster.limits import LimitsError, for_matrix
from ptflow.config.load import SHARED_CONFIG_ENV, find_workflow, shared_config
from ptflow.config.matrix import Cell

# the configuration of a snakemake command line (also used by remote, doctor and smoke)
from ptflow.config.validate import ConfigError

# the configuration of a snakemake command line (also used by remote, doctor and smoke)
from ptflow.ops.context import Context, SmkArgs, load_context, parse_cell, parse_smk_args  # noqa: F401
from ptflow.results.causes import CAUSES

LOG = logging.getLogger("ptflow.ops.cli")


def context_for_workdir(ns) -> Context:
    """Config from explicit options, else from the latest run's command line in the working directory."""
    from ptflow.ops.status import read_run_logs

    workdir = Path(ns.directory).resolve()
    explicit = parse_smk_args(ns.smk or [])
    if explicit.configfiles or explicit.config or explicit.snakefile:
        explicit.directory = workdir
        return load_context(explicit)
    runs = read_run_logs(workdir)
    if runs and runs[-1].command:
        text = runs[-1].path.read_text(errors="replace")
        run_dir = next(
            (Path(ln.split(":", 1)[1].strip()) for ln in text.splitlines() if ln.strip().startswith("Run directory:")),
            None,
        )
        found = parse_smk_args(runs[-1].command[1:], run_dir=run_dir)
        found.directory = workdir
        return load_context(found)
    return load_context(SmkArgs(directory=workdir))


# ---- commands ----


def cmd_plan(ns, rest: list[str]) -> int:
    from ptflow.ops.plan import make_plan, render
    from ptflow.ops.plan_estimate import profile_jobs
    from ptflow.ops.plan_jobs import dry_run

    smk = parse_smk_args(rest)
    args = list(rest)
    if smk.snakefile is None and not (Path(smk.directory or ".") / "Snakefile").is_file():
        smk.snakefile = find_workflow() / "Snakefile"
        args = ["-s", str(smk.snakefile), *args]
    with tempfile.TemporaryDirectory(prefix="ptflow-plan-") as tmp:
        shared = Path(tmp) / "config.pickle"
        try:
            text = dry_run(args, env={**os.environ, SHARED_CONFIG_ENV: str(shared)})
        except RuntimeError:
            load_context(smk)  # a configuration error is said in one line
            raise
        # the configuration the dry-run used (a Snakefile other than ptflow's leaves none: read it here)
        ctx = load_context(smk, shared_config(shared))
    limits = for_matrix(ctx.cfg, ctx.site)
    plan = make_plan(ctx.cfg, ctx.site, ctx.layout, ctx.workdir, text, limits, profile_jobs(ctx.snakefile.parent))
    from ptflow.ops.spend_view import spend_view

    spend = spend_view(ctx.cfg, ctx.layout, ctx.workdir, ctx.snakefile.parent)  # the caps, the most it may spend
    if ns.json:
        print(json.dumps({**plan.to_json(), "spend": spend.to_json()}, indent=2))
    else:
        print(render(plan) + "\n" + "\n".join(spend.plan_lines()))
    return 0


def _snapshot(ctx: Context):
    from ptflow.ops.status import snapshot
    from ptflow.results.overrides import accepted_cells, config_overrides

    overrides = config_overrides(ctx.cfg, ctx.snakefile.parent)  # scoring.overrides, shown beside their cells
    accepted = accepted_cells(ctx.cfg, ctx.snakefile.parent)  # and its accepted failures
    return snapshot(ctx.cfg, ctx.layout, ctx.workdir, overrides=overrides, accepted=accepted)


def cmd_status(ns) -> int:
    from ptflow.ops.status import table, write_grid_png
    from ptflow.results.causes import by_cause
    from ptflow.results.cell_state import LIVE

    ctx = context_for_workdir(ns)
    png = Path(ns.png) if ns.png else ctx.workdir / ctx.layout.results / "status.png"
    from ptflow.ops.spend_view import spend_view

    while True:
        snap = _snapshot(ctx)
        spend = spend_view(ctx.cfg, ctx.layout, ctx.workdir, ctx.snakefile.parent)
        if not ns.no_png:
            write_grid_png(snap, png)
        if ns.json:
            out = {
                "cells": [c.to_dict() for c in snap.cells],
                "counts": snap.counts(),
                "causes": by_cause(snap.cells),  # the cells not scored, by cause (ptflow.results.causes)
                "driver_active": snap.driver_active,
                "run_ids": snap.run_ids,
                "slurm_error": snap.slurm_error,
                "png": None if ns.no_png else str(png),
                "spend": spend.to_json(),  # the spend so far and the caps (ptflow.ops.spend_view)
            }
            text = json.dumps(out, indent=2)
        else:
            text = table(snap) + "\n" + "\n".join(spend.status_lines())
            text += "" if ns.no_png else f"\nstate grid: {png}"
        if ns.watch:
            sys.stdout.write("\x1b[H\x1b[2J" + time.strftime("%H:%M:%S ") + f"ptflow status {ctx.workdir}\n")
        print(text, flush=True)
        if not ns.watch:
            return 0
        if not snap.driver_active and not any(c.state in LIVE for c in snap.cells):
            return 0
        time.sleep(ns.interval)


def cmd_cancel(ns) -> int:
    from ptflow.results.cell_state import LIVE, SLURM_STATE_MAP

    ctx = context_for_workdir(ns)
    snap = _snapshot(ctx)
    if snap.slurm_error:
        raise SystemExit(f"cannot read the jobs from Slurm: {snap.slurm_error}")
    if ns.all:
        chosen = None
    else:
        cells = {parse_cell(c, ctx.cfg) for c in ns.cell or []}
        for agent in ns.agent or []:
            if agent not in ctx.cfg.agents:
                raise SystemExit(f"--agent {agent!r} is not an agent id; known: {', '.join(ctx.cfg.agents)}")
            cells |= {c for c in ctx.cfg.cells if c.agent_id == agent}
        chosen = cells
    live, ended = [], []
    for jid, rec in sorted(snap.jobs.items()):
        if chosen is not None and (jid not in snap.job_cells or snap.job_cells[jid][1] not in chosen):
            continue
        (live if SLURM_STATE_MAP.get(rec.base_state) in LIVE else ended).append(jid)
    slurm.cancel(live)
    print(f"cancelled {len(live)} job(s){': ' + ' '.join(live) if live else ''}")
    if ended:
        print(f"{len(ended)} job(s) of the selection had already ended (counted as done): {' '.join(ended)}")
    if live and snap.driver_active:
        print(
            "note: the Snakemake driver is still running; with --retries it resubmits cancelled jobs — "
            "stop it (ptflow remote driver --stop, or Ctrl-C in its terminal) to end the run"
        )
    return 0


def cmd_rerun(ns, rest: list[str]) -> int:
    """The cells of some causes (or those listed) at their failed step: what will run first, then (--run) run it."""
    from ptflow.ops import rerun
    from ptflow.ops.plan_jobs import dry_run
    from ptflow.ops.status import read_run_logs

    if not ns.cause and not ns.cell:
        raise SystemExit("ptflow rerun: name --cause CAUSE (ptflow status lists them) or --cell MODEL/EVAL/AGENT")
    ns.smk = rest  # Snakemake's arguments give the config too; none: the latest run's
    ctx = context_for_workdir(ns)
    snap = _snapshot(ctx)
    cells = [parse_cell(c, ctx.cfg) for c in ns.cell or []]
    try:
        plan = rerun.plan_rerun(ctx.cfg, ctx.layout, ctx.workdir, snap.cells, ns.cause or [], cells, fixed=ns.fixed)
    except ValueError as exc:
        raise SystemExit(f"ptflow rerun: {exc}") from None
    for line in rerun.describe(plan):
        print(line)
    if not plan.cells:
        print("nothing to rerun")
        return 1 if plan.refused else 0
    runs = read_run_logs(ctx.workdir)
    args = rerun.command_args(
        plan, rerun.snakemake_args(rest, runs[-1].command if runs else [], ctx.workdir, ctx.snakefile)
    )
    stats = rerun.jobs_per_rule(dry_run(args))
    print("it will run: " + (", ".join(f"{rule} {n}" for rule, n in stats.items() if rule != "total") or "no job"))
    if not ns.run:
        print("dry run: ptflow rerun ... --run runs it")
        return 0
    return rerun.run(args)


def cell_logs(ctx: Context, cell: Cell) -> list[Path]:
    """Every log the cell produced: rule logs (+ launcher logs beside them), Slurm logs of its jobs."""
    from ptflow.ops.status import wildcard_str

    found: list[Path] = []
    for rule in ("train", "evaluate"):
        rule_log = ctx.workdir / ctx.layout.log(rule, cell.model, cell.eval, cell.agent)
        if rule_log.is_file():
            found.append(rule_log)
        stem = rule_log.with_suffix("")
        found += sorted(p for p in rule_log.parent.glob(f"{stem.name}.*") if p.is_file() and p != rule_log)
        if stem.is_dir():  # launcher logs rendered into the job's log dir
            found += sorted(p for p in stem.rglob("*") if p.is_file())
        slurm_dir = ctx.workdir / ".snakemake" / "slurm_logs" / f"rule_{rule}" / wildcard_str(cell)
        found += sorted(slurm_dir.glob("*.log"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0)
    return found


def tail(path: Path, lines: int) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(cannot read: {exc})"
    return "\n".join(data[-lines:])


def cmd_logs(ns) -> int:
    ctx = context_for_workdir(ns)
    cell = parse_cell(ns.cell, ctx.cfg)
    logs = cell_logs(ctx, cell)
    if not logs:
        print(f"no logs yet for {cell.key}")
        return 0
    for p in logs:
        print(f"==> {p} <==")
        if ns.lines:
            print(tail(p, ns.lines))
        print()
    return 0


def cmd_ray_launcher(ns) -> int:
    from ptflow.launch.ray import check_sbatch, render_sbatch

    path = render_sbatch(ns.output)
    print(f"wrote {path}: COMMAND=... sbatch --nodes=N --gres=gpu:G --partition=P --account=A {path}")
    if ns.check is None:
        return 0
    problems = check_sbatch(path, [a for a in ns.check if a != "--"])
    for p in problems:
        print(f"PROBLEM: {p}")
    if not problems:
        print(f"ok: bash -n and sbatch --test-only accept {path}")
    return 1 if problems else 0


def cmd_report(ns) -> int:
    """Serve the built report; every page but the inspect log viewer also opens straight from file://."""
    import threading

    from ptflow.ops.report_server import serve

    ctx = context_for_workdir(ns)
    site = ctx.workdir / ctx.layout.report_dir()
    if not (site / "index.html").is_file():
        raise SystemExit(f"no report at {site}: run the workflow first (its aggregate rule builds it)")
    server = serve(site, port=ns.port)
    print(f"serving {site} at http://127.0.0.1:{server.server_address[1]}/index.html (Ctrl-C stops)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
    return 0


def cmd_export(ns) -> int:
    """The evaluated cells in PostTrainBench's results layout (ptflow.results.ptb_export), for its aggregate scripts."""
    from ptflow.results import ptb_protocol
    from ptflow.results.overrides import accepted_cells, config_overrides
    from ptflow.results.ptb_export import export_posttrainbench

    if ns.configfile:
        ns.smk = ["--configfile", *ns.configfile, *(ns.smk or [])]
    ctx = context_for_workdir(ns)
    overrides = config_overrides(ctx.cfg, ctx.snakefile.parent)  # scoring.overrides: exported as decided
    accepted = accepted_cells(ctx.cfg, ctx.snakefile.parent)  # exported as failed runs (PostTrainBench's baseline)
    try:  # the checkout's aggregation, asked before anything is written: one ptflow cannot export to is refused
        part = ptb_protocol.results_part(ctx.workdir, ctx.layout)
    except ptb_protocol.ResultsPartError as exc:
        raise SystemExit(f"ptflow export: {exc}") from None
    summary = export_posttrainbench(
        ctx.cfg,
        ctx.layout,
        Path(ns.posttrainbench),
        workdir=ctx.workdir,
        site=ctx.site,
        overrides=overrides,
        accepted=accepted,
        results=part.layout if part is not None else ptb_protocol.AGGREGATE,
    )
    for line in summary.lines():
        print(line)
    for line in ptb_protocol.comparison_lines(ctx.cfg, ctx.layout, ctx.workdir, ctx.snakefile.parent, overrides,
                                              accepted):  # fmt: skip
        print(f"note: {line}")
    return 0


def _add_workdir_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("-d", "--directory", default=".", help="the workflow's working directory (default: .)")
    p.add_argument(
        "--smk",
        nargs=argparse.REMAINDER,
        help="snakemake config args (-s, --configfile, --config ...); default: those of the latest run",
    )


# the keys of ``ptflow status --json``'s object (cmd_status writes them)
STATUS_JSON = ("cells", "counts", "causes", "driver_active", "run_ids", "slurm_error", "png", "spend")


def _status_description() -> str:
    """What ``ptflow status`` shows, from ``ptflow.ops.status.SHOWS`` (the one list of what it prints)."""
    import textwrap

    from ptflow.ops.status import SHOWS

    lines = ["Each cell of the matrix as its files (eval.json, judge.json, manifests, rule logs) and Slurm (one squeue",
             "and one sacct call) show it. It prints:"]  # fmt: skip
    for line in SHOWS:
        lines += textwrap.wrap(line, 110, initial_indent="  - ", subsequent_indent="    ")
    return "\n".join(lines)


def _causes_epilog() -> str:
    """The causes ``--cause`` takes, from the one vocabulary (``ptflow.results.causes.CAUSES``): each with the step
    a rerun runs again and whether it needs ``--fixed``."""
    import textwrap

    width = max(len(name) for name in CAUSES) + 4
    lines = ["CAUSE is one of (the step a rerun runs again; --fixed: a rerun alone cannot fix it, so it is refused "
             "without --fixed):"]  # fmt: skip
    for cause in CAUSES.values():
        said = f"{cause.step}{'' if cause.rerun else ', --fixed'}: {cause.meaning}"
        lines += textwrap.wrap(said, 110, initial_indent=f"  {cause.name:<{width - 2}}", subsequent_indent=" " * width)
    return "\n".join(lines)


def _add_status(sub) -> None:
    """``ptflow status``: its help says what it prints (:func:`_status_description`)."""
    p = sub.add_parser(
        "status",
        help="every cell's state and job, verdict, cause of failure and the spend, from files and Slurm",
        description=_status_description(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_workdir_opts(p)
    p.add_argument("--json", action="store_true", help="the same as one JSON object: " + ", ".join(STATUS_JSON))
    p.add_argument("--watch", action="store_true", help="refresh in place until nothing runs")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between refreshes (default 10)")
    p.add_argument("--png", help="state grid PNG (default: <results>/status.png)")
    p.add_argument("--no-png", action="store_true", help="write no state grid")


def _add_rerun(sub) -> None:
    """``ptflow rerun``: its help lists the causes ``--cause`` takes (:func:`_causes_epilog`)."""
    p = sub.add_parser(
        "rerun",
        help="run again the cells of a failure cause (or listed) at their failed step; a dry run unless --run",
        description="Snakemake arguments after the options replace the latest run's (default).",
        epilog=_causes_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-d", "--directory", default=".", help="the workflow's working directory (default: .)")
    p.add_argument(
        "--cause",
        action="append",
        metavar="CAUSE",
        help="a cause ptflow status names (repeatable): one of those below",
    )
    p.add_argument("--cell", action="append", help="MODEL/EVAL/AGENT (repeatable)")
    p.add_argument(
        "--fixed", action="store_true", help="the cause's what-to-do was done: rerun causes a rerun alone cannot fix"
    )
    p.add_argument("--run", "--yes", action="store_true", help="run it (default: show what would run)")


def build_parser() -> argparse.ArgumentParser:
    from ptflow.ops import remote

    parser = argparse.ArgumentParser(prog="ptflow", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log every external command before it runs")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="cells by state, jobs per rule, GPU/node/CPU-hours, longest chain")
    p.add_argument("--json", action="store_true")

    _add_status(sub)

    p = sub.add_parser("cancel", help="scancel exactly the jobs of some cells")
    _add_workdir_opts(p)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--cell", action="append", help="MODEL/EVAL/AGENT (repeatable)")
    g.add_argument("--agent", action="append", help="every cell of an agent (repeatable)")
    g.add_argument("--all", action="store_true", help="every job of the runs in this working directory")

    _add_rerun(sub)

    p = sub.add_parser("logs", help="paths and tails of every log of a cell")
    _add_workdir_opts(p)
    p.add_argument("cell", help="MODEL/EVAL/AGENT")
    p.add_argument("-n", "--lines", type=int, default=20, help="lines of each log to show (0: paths only)")

    p = sub.add_parser("report", help="serve results/report over HTTP (the log viewer needs range requests)")
    _add_workdir_opts(p)
    p.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000; 0: any free port)")

    p = sub.add_parser(
        "export", help="write the evaluated cells as PostTrainBench's results dir (its scripts/aggregate_*.py read it)"
    )
    p.add_argument(
        "--posttrainbench",
        required=True,
        metavar="DIR",
        help="the results dir to write ($POST_TRAIN_BENCH_RESULTS_DIR); its other run dirs are left as they are",
    )
    p.add_argument(
        "--configfile", nargs="+", action="extend", metavar="FILE", help="the run's config (default: the latest run's)"
    )
    _add_workdir_opts(p)

    remote.add_parser(sub)

    from ptflow.ops import interactive

    p = sub.add_parser("interactive", help="salloc, Ray over the allocation, ray status, a shell on the head")
    interactive.add_arguments(p)

    p = sub.add_parser(
        "doctor", help="try the cluster: login-node checks and one short job per partition the matrix uses"
    )
    p.add_argument("--site", required=True, help="site name or path")
    p.add_argument("--wait", type=float, default=10, help="minutes to wait for the probe jobs (default 10)")
    p.add_argument("--workdir", help="where probe scripts and outputs go (default .ptflow/doctor/<time>)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("smoke", help="one cell of the matrix with a short budget, before submitting all of it")
    p.add_argument("--cell", help="MODEL/EVAL/AGENT (default: an agent cell on gsm8k x Qwen3-1.7B, as PostTrainBench)")
    p.add_argument("--hours", type=float, default=1.0, help="agent budget in hours (PostTrainBench's NUM_HOURS=1)")
    p.add_argument("--steps", type=int, default=10, help="training steps of trainer agents (default 10)")

    p = sub.add_parser("ray-launcher", help="write NeMo-RL's bare-metal launcher (ray_bare.sub) and check it")
    p.add_argument("-o", "--output", default="ray_bare.sub")
    p.add_argument(
        "--check",
        nargs=argparse.REMAINDER,
        help="then bash -n it and sbatch --test-only with these sbatch flags (e.g. --nodes=2 --gres=gpu:4 -p P -A A)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # plan passes every argument it does not know to snakemake
    passthrough = ("plan", "doctor", "smoke", "rerun")  # they pass every argument they do not know to snakemake
    if argv and argv[0] in passthrough or (len(argv) > 1 and argv[0] in ("-v", "--verbose") and argv[1] in passthrough):
        ns, rest = parser.parse_known_args(argv)
    else:
        ns, rest = parser.parse_args(argv), []
    logging.basicConfig(level=logging.DEBUG if ns.verbose else logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("snakemake").setLevel(logging.WARNING)  # -v is for ptflow's commands, not schema chatter
    try:
        if ns.command == "plan":
            return cmd_plan(ns, rest)
        if ns.command == "status":
            return cmd_status(ns)
        if ns.command == "cancel":
            return cmd_cancel(ns)
        if ns.command == "logs":
            return cmd_logs(ns)
        if ns.command == "rerun":
            return cmd_rerun(ns, rest)
        if ns.command == "report":
            return cmd_report(ns)
        if ns.command == "export":
            return cmd_export(ns)
        if ns.command == "remote":
            from ptflow.ops import remote

            return remote.main(ns)
        if ns.command in ("doctor", "smoke"):
            from ptflow.ops import doctor

            return doctor.main_doctor(ns, rest) if ns.command == "doctor" else doctor.main_smoke(ns, rest)
        if ns.command == "interactive":
            from ptflow.ops import interactive

            return interactive.run_command(ns)
        if ns.command == "ray-launcher":
            return cmd_ray_launcher(ns)
    except (ConfigError, LimitsError, slurm.SlurmUnavailable, RuntimeError) as exc:
        print(f"ptflow {ns.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {ns.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
