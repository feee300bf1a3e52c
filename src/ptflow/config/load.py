"""Loading the configuration the one way the workflow does, for the workflow, the ``ptflow`` command, tests and bench.

The workflow's ``config`` is the embedded default (``config/config.yaml`` of the workflow), then each
``--configfile``, then ``--config key=value`` items, merged as Snakemake merges them: mappings key by key, lists and
scalars replaced (``snakemake.utils.update_config``; ``--config`` values parsed by Snakemake's own parser). Snakemake
does that merge for the workflow itself; :func:`merged_config` repeats it for everyone else, and :func:`resolve`
turns a merged config into the validated :class:`Loaded` (config, site, layout) for both.
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import yaml

from ptflow.config.layout import Layout
from ptflow.config.matrix import Config, build_config
from ptflow.config.sites import Site, load_site
from ptflow.config.validate import ConfigError
from ptflow.files import atomic_path

WORKFLOW_ENV = "PTFLOW_WORKFLOW"
# A file where the workflow leaves the config Snakemake merged (share_config): `ptflow plan` sets it for its dry-run.
SHARED_CONFIG_ENV = "PTFLOW_SHARED_CONFIG"


@dataclass
class Loaded:
    cfg: Config
    site: Site
    layout: Layout


def default_config(workflow: Path) -> Path:
    return Path(workflow) / "config" / "config.yaml"


def sites_dir(raw: dict, workflow: Path) -> Path:
    return Path(raw.get("sites_dir") or Path(workflow) / "config" / "sites")


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"config error: cannot read {path}: {exc.strerror}; check the --configfile path") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config error: {path} does not hold a mapping of keys")
    return data


def merged_config(
    workflow: Path, configfiles=(), config_items=(), *, base_dir: Path | None = None, overrides: dict | None = None
) -> dict:
    """The workflow's ``config`` for these command-line settings (relative config files from ``base_dir``)."""
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    raw = _read_yaml(default_config(workflow))
    for f in configfiles:
        path = Path(f) if Path(f).is_absolute() else Path(base_dir or Path.cwd()) / f
        update_config(raw, _read_yaml(path))
    try:
        update_config(raw, parse_config(list(config_items)))
    except ValueError as exc:
        raise ConfigError(f"config error at --config: {exc}; write e.g. --config site=local") from None
    update_config(raw, overrides or {})
    return raw


def resolve(raw: dict, workflow: Path, workdir: Path | None = None) -> Loaded:
    """Validate a merged config and load its site; relative site paths are relative to ``workdir`` (the workflow's
    --directory), as they are for the workflow's jobs."""
    cfg = build_config(raw)
    old = Path.cwd()
    if workdir is not None:
        os.chdir(workdir)
    try:
        site = load_site(raw["site"], sites_dir(raw, workflow))
    finally:
        os.chdir(old)
    layout = Layout.from_config(raw, site.paths)
    _check_checkout_protocol(cfg, layout)
    from ptflow.config.spend import spend_settings

    spend_settings(cfg, workflow)  # a cap that cannot work (no price, a subscription, a CLI that prints its spend
    # late) or a price table that is not one: refused here, in one line
    return Loaded(cfg, site, layout)


def _check_checkout_protocol(cfg: Config, layout: Layout) -> None:
    """A run whose evals come from a checkout ptflow does not run part by part (evaluation, sandbox keys, results,
    and the judges where its cells are judged: ``posttrainbench.checkout_protocol``) is refused here, at planning, in
    one line naming the part, where the checkout is already on this filesystem at its commit. Turning the judge off
    skips the judges part only. A checkout the rule posttrainbench_checkout has yet to clone is checked by that rule
    (``ptflow.stages.posttrainbench.checkout``), before any cell."""
    from ptflow.config import posttrainbench as ptb

    checkout = cfg.posttrainbench
    if checkout is None or not any(cfg.evals[c.eval].from_checkout for c in cfg.cells):
        return
    where = Path(checkout.location(layout.scratch))
    if not (where / ".git").exists():
        return
    try:
        ptb.git(where, "cat-file", "-e", f"{checkout.commit}^{{commit}}")
    except ptb.CheckoutError:
        return  # not at this commit (yet): the checkout rule clones or refuses it in its own line
    try:
        protocol = ptb.checkout_protocol(str(where), checkout.commit)
        protocol.check(judged=bool(cfg.judge))
        if protocol.part("evaluation") == ptb.EVAL_FINAL:
            _with_final_eval(cfg, str(where), checkout.commit)
    except ptb.CheckoutError as exc:
        raise ConfigError(f"config error at posttrainbench: {exc}") from None


def _with_final_eval(cfg: Config, where: str, commit: str) -> None:
    """A checkout whose evaluation is PostTrainBench main's seeded final evaluation: each checkout eval becomes a
    seeded eval with what the checkout's run_final_eval.sh says of its task (``posttrainbench.final_eval``): its
    default seeds, ``seed_changes_data`` where the seed does more than drive sampling, its final-eval script (by the
    grader keys set here, as ``--check`` chooses) and its per-stage max-tokens arguments. The checkout decides the
    seeds: an eval's own ``seeds`` are refused when the config is built."""
    from dataclasses import replace

    from ptflow.config import posttrainbench as ptb

    # with no grader key set here (a job's environment, a plan without keys), its default: OPENAI_API_KEY's script;
    # a missing key is then refused by preflight and the evaluation, not by every config load
    graders = tuple(k for k in ptb.GRADER_KEYS if os.environ.get(k)) or ptb.GRADER_KEYS[:1]
    for eval_id, e in list(cfg.evals.items()):
        if e.from_checkout:
            final = ptb.final_eval(where, commit, ptb.eval_dir_name(e.task), graders)
            seeds, changes = final.seeds, not final.seed_only_samples
            cfg.evals[eval_id] = replace(e, seeds=seeds, seed_changes_data=changes, final=final)


def share_config(raw: dict) -> None:
    """Where ``$PTFLOW_SHARED_CONFIG`` names a file, the merged config the workflow got goes there (pickled: every
    value as Snakemake has it). ``ptflow plan`` reads back the configuration its dry-run used, profile config files
    included, instead of merging it again (:func:`merged_config` imports the whole of Snakemake: as long again as a
    small dry-run's own work)."""
    path = os.environ.get(SHARED_CONFIG_ENV)
    if path:
        with atomic_path(path) as tmp:
            tmp.write_bytes(pickle.dumps(raw))


def shared_config(path: Path) -> dict | None:
    """The config a workflow left at ``path`` (:func:`share_config`), or None where it left none."""
    return pickle.loads(path.read_bytes()) if path.is_file() else None


def load(
    workflow: Path,
    configfiles=(),
    config_items=(),
    *,
    base_dir: Path | None = None,
    workdir: Path | None = None,
    overrides: dict | None = None,
) -> Loaded:
    raw = merged_config(workflow, configfiles, config_items, base_dir=base_dir, overrides=overrides)
    return resolve(raw, workflow, workdir)


def reference_table(raw: dict, workflow: Path) -> dict | None:
    """``scoring.reference``: the table itself, or the JSON/YAML file it names (relative to the workflow)."""
    ref = (raw.get("scoring") or {}).get("reference")
    if ref is None or isinstance(ref, dict):
        return ref
    path = Path(ref) if Path(ref).is_absolute() else Path(workflow) / ref
    if not path.is_file():
        raise ConfigError(
            f"config error at scoring.reference: no file {str(path)!r}; give the table inline or a path relative to "
            "the workflow directory (PostTrainBench's baselines.json shape)"
        )
    table = yaml.safe_load(path.read_text())  # YAML reads JSON too
    if not isinstance(table, dict) or not isinstance(table.get("zeroshot", table), dict):
        raise ConfigError(
            f"config error at scoring.reference: {path} is not a mapping {{zeroshot: {{model: {{eval: score}}}}}}"
        )
    return table


def _installed_from() -> Path | None:
    """The checkout this package was installed from in editable mode (PEP 610 direct_url.json), if any."""
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    try:
        text = metadata.distribution("ptflow").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    info = json.loads(text)
    if not info.get("dir_info", {}).get("editable") or not info.get("url", "").startswith("file://"):
        return None
    return Path(unquote(urlparse(info["url"]).path))


def _is_workflow(path: Path) -> bool:
    return (path / "Snakefile").is_file() and (path / "workflow" / "rules" / "common.smk").is_file()


def find_workflow(snakefile: str | Path | None = None) -> Path:
    """The workflow directory: the given Snakefile's, else ``$PTFLOW_WORKFLOW``, else the nearest directory from the
    current one upwards that holds ptflow's Snakefile, else the checkout ptflow was installed from (editable)."""
    if snakefile:
        return Path(snakefile).resolve().parent
    if os.environ.get(WORKFLOW_ENV):
        path = Path(os.environ[WORKFLOW_ENV]).resolve()
        if not _is_workflow(path):
            raise ConfigError(f"{WORKFLOW_ENV}={path} holds no ptflow workflow (Snakefile, workflow/rules/)")
        return path
    here = Path.cwd().resolve()
    for path in (here, *here.parents):
        if _is_workflow(path):
            return path
    installed = _installed_from()
    if installed and _is_workflow(installed):
        return installed
    raise ConfigError(
        "cannot find the ptflow workflow: run from its checkout, pass -s/--snakefile PATH, or export "
        f"{WORKFLOW_ENV}=<checkout>"
    )
