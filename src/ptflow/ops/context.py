"""The workflow's configuration as a snakemake command line gives it (shared by the ``ptflow`` commands)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptflow.config import naming
from ptflow.config.layout import Layout
from ptflow.config.load import find_workflow, load, resolve
from ptflow.config.matrix import Cell, Config
from ptflow.config.sites import Site


@dataclass
class SmkArgs:
    snakefile: Path | None = None
    directory: Path | None = None
    configfiles: tuple[str, ...] = ()
    config: tuple[str, ...] = ()
    run_dir: Path | None = None  # where relative --configfile paths were typed


def parse_smk_args(argv: list[str], run_dir: Path | None = None) -> SmkArgs:
    """-s/--snakefile, -d/--directory, --configfile(s) and --config of a snakemake command line."""
    out = SmkArgs(run_dir=run_dir)
    files: list[str] = []
    items: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, eq, val = arg.partition("=")
        if key in ("-s", "--snakefile"):
            out.snakefile = Path(val if eq else argv[i + 1])
            i += 1 if eq else 2
        elif key in ("-d", "--directory"):
            out.directory = Path(val if eq else argv[i + 1])
            i += 1 if eq else 2
        elif key in ("--configfile", "--configfiles", "--config", "-C"):
            target = files if key.startswith("--configfile") else items
            if eq:
                target.append(val)
            i += 1
            while i < len(argv) and not argv[i].startswith("-"):
                target.append(argv[i])
                i += 1
        else:
            i += 1
    out.configfiles, out.config = tuple(files), tuple(items)
    return out


@dataclass
class Context:
    cfg: Config
    site: Site
    layout: Layout
    workdir: Path
    snakefile: Path


def load_context(args: SmkArgs, raw: dict | None = None) -> Context:
    """The configuration of a snakemake command line, read the way the workflow reads it (ptflow.config.load); or,
    given ``raw``, the config that workflow merged (ptflow.config.load.share_config) validated the same way."""
    workdir = (args.directory or Path.cwd()).resolve()
    workflow = find_workflow(args.snakefile)
    if raw is None:
        loaded = load(workflow, args.configfiles, args.config, base_dir=args.run_dir or Path.cwd(), workdir=workdir)
    else:
        loaded = resolve(raw, workflow, workdir)
    return Context(loaded.cfg, loaded.site, loaded.layout, workdir, workflow / "Snakefile")


def parse_cell(spec: str, cfg: Config) -> Cell:
    """``model/eval/agent``; model as path name (org--name) or hub id (org/name)."""
    parts = spec.strip("/").split("/")
    if len(parts) < 3:
        raise SystemExit(f"cell {spec!r}: write MODEL/EVAL/AGENT, e.g. {cfg.cells[0].key}")
    model = "/".join(parts[:-2])
    model = naming.model_to_path(model) if "/" in model else model
    cell = Cell(model, parts[-2], parts[-1])
    if cell not in cfg.cells:
        raise SystemExit(f"cell {spec!r} is not in the matrix; cells: {', '.join(c.key for c in cfg.cells[:6])} ...")
    return cell
