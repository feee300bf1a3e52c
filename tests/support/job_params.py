"""The ``params`` of every job of every shipped config with every site, as Snakemake evaluates them: the golden
record that tests/unit/test_job_params.py compares with (a job whose params change reruns, so a finished cell would
run again).

Each (config, site) is planned in a forked child (one import of Snakemake and ptflow for all of them) with Snakemake's
API in a fresh working directory, under a fixed environment (``ENV``: the account, partition and user the site files
read; HOME in the working directory). A config with ``posttrainbench:`` is planned twice: first to learn the
checkout checkpoint's marker and the paths the run uses, then with a FIXTURE marker at that place (object ids
derived from each path's name) and a FIXTURE checkout of empty files, so the cells' params hold object ids instead of
Snakemake's "to be determined".

Each param is kept as the repr Snakemake compares to decide a rerun (so key order and list/tuple count); paths are
written relative to ``<workdir>`` and ``<repo>``. Regenerate with
``.venv/bin/python -m tests.support.job_params --update`` - only when a change of params is meant (say which cells
rerun in the commit).
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "unit" / "data" / "golden_params"
SITES = sorted(p.stem for p in (REPO / "config" / "sites").glob("*.yaml"))
# config/posttrainbench-reference.yaml is PostTrainBench's leaderboard table (scoring.reference) and
# config/prices.yaml the price table of the spend budget (spend.prices): data a run config names, not run configs.
NOT_RUN_CONFIGS = {"posttrainbench-reference", "prices"}
CONFIGS = ["config"] + sorted(
    p.stem for p in (REPO / "config").glob("*.yaml") if p.stem not in NOT_RUN_CONFIGS | {"config"}
)
ENV = {"PTFLOW_ACCOUNT": "golden-account", "PTFLOW_PARTITION": "golden-partition", "USER": "golden"}
CHECKOUT_RULE = "posttrainbench_checkout"


def combos() -> list[tuple[str, str]]:
    return [(c, s) for c in CONFIGS for s in SITES]


def golden_path(config: str, site: str) -> Path:
    return GOLDEN / f"{config}__{site}.json.gz"


def _plan(config: str, site: str, workdir: Path) -> tuple[dict, tuple[str, dict] | None]:
    """{job: {param: repr}} of a fresh run's DAG, and the checkout checkpoint's (marker, spec) if it has one (in
    this process: call it in a child)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        ConfigSettings,
        DAGSettings,
        DeploymentSettings,
        OutputSettings,
        Quietness,
        ResourceSettings,
        StorageSettings,
        WorkflowSettings,
    )

    configfiles = [] if config == "config" else [REPO / "config" / f"{config}.yaml"]
    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
        workflow_api = api.workflow(
            resource_settings=ResourceSettings(),
            config_settings=ConfigSettings(configfiles=configfiles, config={"site": site}),
            storage_settings=StorageSettings(),
            workflow_settings=WorkflowSettings(),
            deployment_settings=DeploymentSettings(),
            snakefile=REPO / "Snakefile",
            workdir=workdir,
        )
        workflow = workflow_api.dag(DAGSettings()).workflow_api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True)
        workflow._build_dag()
        params, checkout = {}, None
        for job in workflow.dag.jobs:
            key = job.rule.name + "".join(f" {k}={v}" for k, v in sorted(job.wildcards_dict.items()))
            # what Snakemake compares to decide a rerun (persistence: repr of each value): key order and
            # list-vs-tuple count, not only the values; a param derived from the job's input, output, threads or
            # resources is not compared (rule train's evaluation: tests/unit/test_snakemake_contract.py)
            derived = {name for name, value in job.rule.params.items() if job.rule._is_deriving_function(value)}
            params[key] = {name: repr(value) for name, value in job.params.items() if name not in derived}
            if job.rule.name == CHECKOUT_RULE:
                checkout = (str(job.output[0]), dict(job.params.spec))
        return params, checkout


def _fixture_marker(path: Path, spec: dict, checkout: Path) -> None:
    """A FIXTURE of the checkout checkpoint's marker: the commit and paths of the checkout job's params, each path's
    object id the sha1 of its name (the real marker holds git's ids), and a FIXTURE checkout at ``checkout`` where
    each used file is empty (the image recipes the checkout builds are read for their build arguments: none)."""
    objects = {p: hashlib.sha1(p.encode()).hexdigest() for p in spec["paths"]}
    for rel in spec["paths"]:
        target = checkout / rel
        if target.suffix:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("")
        else:
            target.mkdir(parents=True, exist_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"commit": spec["commit"], "path": str(checkout), "objects": objects}))


def _normalised(value, workdir: str, user: str):
    """Strings (the params' reprs, a refusal) with this run's places written as placeholders."""
    if isinstance(value, dict):
        return {_normalised(k, workdir, user): _normalised(v, workdir, user) for k, v in value.items()}
    for real, shown in ((workdir, "<workdir>"), (str(REPO), "<repo>"), (user, ENV["USER"])):
        value = value.replace(real, shown)
    return value


def _collect_child(config: str, site: str, out: str) -> None:
    # A user of its own: site files put results under /shared/$USER and the like, where the fixture marker goes;
    # children running at once must not share it. Shown as ENV's user in the record.
    user = f"{ENV['USER']}-{os.getpid()}"
    workdir = Path(tempfile.mkdtemp(prefix=f"golden-{config}-{site}-")).resolve()
    os.environ.update(ENV, USER=user, LOGNAME=user, HOME=str(workdir / "home"))
    made = []
    try:
        params, checkout = _plan(config, site, workdir)
        if checkout is not None:
            marker = workdir / checkout[0]
            made = _new_top(marker)
            _fixture_marker(marker, checkout[1], workdir / "ptb-checkout")
            params, _ = _plan(config, site, workdir)
            params[f"{CHECKOUT_RULE} (done: fixture marker)"] = {}
        result = {"jobs": _normalised(params, str(workdir), user)}
    except Exception as exc:  # a refused combination is recorded too: its message must not change either
        result = {"refused": _normalised(" ".join(str(exc).split()) or repr(exc), str(workdir), user)}
    finally:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    Path(out).write_text(json.dumps(result, sort_keys=True))


def _new_top(path: Path) -> list[Path]:
    """The first of ``path``'s parents that does not exist yet (removed afterwards): a site's absolute results dir
    (/shared/<user>/...) is made only for this child's own user."""
    missing = [p for p in path.parents if not p.exists()]
    return [missing[-1]] if missing else []


def collect(config: str, site: str) -> dict:
    """{"jobs": {job: params}} or {"refused": one line}, planned in a forked child."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = tmp.name
    try:
        child = multiprocessing.get_context("fork").Process(target=_collect_child, args=(config, site, out))
        child.start()
        child.join()
        if child.exitcode != 0:
            raise RuntimeError(f"planning {config} with site {site} crashed (exit {child.exitcode})")
        return json.loads(Path(out).read_text())
    finally:
        Path(out).unlink(missing_ok=True)


def warm_imports() -> None:
    """Import what every child needs once, before forking: Snakemake and ptflow, and every module one plan imports
    (learnt by planning the default in a child: the Snakefile's imports, jsonschema, yte, ...). Each child then
    plans without importing; 49 children each imported them again (a third of the module's CPU)."""
    import importlib

    import snakemake.api  # noqa: F401
    import snakemake.workflow  # noqa: F401

    sys.path.insert(0, str(REPO / "src"))
    import ptflow.config.load  # noqa: F401

    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = tmp.name
    try:
        child = multiprocessing.get_context("fork").Process(target=_modules_of_a_plan, args=(out,))
        child.start()
        child.join()
        names = json.loads(Path(out).read_text()) if child.exitcode == 0 else []
    finally:
        Path(out).unlink(missing_ok=True)
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - only a warm-up: the child imports what this could not
            pass


def _modules_of_a_plan(out: str) -> None:
    before = set(sys.modules)
    workdir = Path(tempfile.mkdtemp(prefix="golden-warm-")).resolve()
    os.environ.update(ENV, HOME=str(workdir / "home"))
    try:
        _plan("config", "local", workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    Path(out).write_text(json.dumps(sorted(set(sys.modules) - before - {"__main__"})))


def read_golden(config: str, site: str) -> dict:
    return json.loads(gzip.decompress(golden_path(config, site).read_bytes()))


def write_golden(config: str, site: str, record: dict) -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    data = json.dumps(record, sort_keys=True, indent=0).encode()
    # mtime 0: the same params give the same bytes
    golden_path(config, site).write_bytes(gzip.compress(data, mtime=0))


def param_differences(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """How one job's params (name -> repr) differ, one line each: the key path of each changed value, or where only
    the order of keys or a list/tuple spelling differs (Snakemake reruns for those too)."""
    out = []
    for name in sorted(set(old) | set(new)):
        if old.get(name) == new.get(name):
            continue
        if name not in new or name not in old:
            out.append(f"{name}: {'removed' if name not in new else 'added'}")
            continue
        values = differences(ast.literal_eval(old[name]), ast.literal_eval(new[name]), name)
        out.extend(
            values
            or [f"{name}: same values, other key order or list/tuple ({_first_difference(old[name], new[name])})"]
        )
    return out


def _first_difference(old: str, new: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    return f"at {at}: ...{old[max(0, at - 60) : at + 60]!r} -> ...{new[max(0, at - 60) : at + 60]!r}"


def differences(old, new, where: str = "") -> list[str]:
    """Each key path whose value differs (added, removed or changed), as one line."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            path = f"{where}.{key}" if where else str(key)
            if key not in new:
                out.append(f"{path}: removed (was {json.dumps(old[key])[:200]})")
            elif key not in old:
                out.append(f"{path}: added ({json.dumps(new[key])[:200]})")
            else:
                out.extend(differences(old[key], new[key], path))
        return out
    if type(old) is not type(new) and isinstance(old, list | tuple) and isinstance(new, list | tuple):
        return [f"{where}: {type(old).__name__} -> {type(new).__name__} (Snakemake reruns for that too)"]
    if old != new:
        return [f"{where}: {json.dumps(old)[:200]} -> {json.dumps(new)[:200]}"]
    return []


def record_differences(golden: dict, now: dict) -> list[str]:
    """Every difference of two records, one line each, naming the job and key path."""
    if "refused" in golden or "refused" in now:
        return [] if golden == now else [f"refusal: {golden.get('refused')!r} -> {now.get('refused')!r}"]
    old, new = golden["jobs"], now["jobs"]
    out = [f"{job}: job gone" for job in sorted(set(old) - set(new))]
    out += [f"{job}: job added" for job in sorted(set(new) - set(old))]
    return out + [
        f"{job}: {line}" for job in sorted(set(old) & set(new)) for line in param_differences(old[job], new[job])
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write the golden records from this checkout")
    args = parser.parse_args()
    warm_imports()
    changed = 0
    for config, site in combos():
        record = collect(config, site)
        if args.update:
            write_golden(config, site, record)
        diff = (
            record_differences(read_golden(config, site), record) if golden_path(config, site).exists() else ["(new)"]
        )
        changed += bool(diff)
        jobs = len(record.get("jobs", {}))
        print(f"{config} x {site}: {jobs} jobs{' refused' if 'refused' in record else ''}; {len(diff)} differences")
    return 1 if changed and not args.update else 0


if __name__ == "__main__":
    sys.exit(main())
