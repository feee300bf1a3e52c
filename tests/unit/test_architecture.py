"""The package's layers, read from its source: who may import whom, no cycle, no path into a checkout; one name per
class; no function too long or too wide without a reason.

LAYERS is the one statement of the layers' order (src/ptflow/__init__.py describes them in that order). A module
imports only its own layer and those below it; standins may use stages, and only they import standins.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import ptflow
from tests.conftest import REPO

PACKAGE = Path(ptflow.__file__).parent
LAYERS = {
    "foundation": 0,
    "config": 1,
    "specs": 2,
    "cluster": 3,
    "launch": 4,
    "stages": 5,
    "standins": 6,
    "jobs": 6,
    "results": 6,
    "ops": 7,
}
FOUNDATION = {"files", "keys", "templates", "jobenv", "warmstart", "snakemake_once", "__init__"}


def _layer(module: str) -> str:
    top = module.split(".")[1] if module.count(".") else "__init__"
    return "foundation" if top in FOUNDATION else top


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(path: Path) -> set[str]:
    """Every ptflow module a file imports (at any depth: lazy imports inside functions count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ptflow")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ptflow"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}


def test_every_import_goes_down_the_layers():
    wrong = []
    for name, deps in _graph().items():
        for dep in deps:
            if dep == "ptflow" or dep.endswith("__init__"):
                continue
            if LAYERS[_layer(dep)] > LAYERS[_layer(name)] or (_layer(name) != _layer(dep) == "standins"):
                wrong.append(f"{name} imports {dep}")
    assert wrong == [], "imports against the layers:\n" + "\n".join(sorted(wrong))


def test_no_import_cycle():
    graph = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if dep == "ptflow" or dep not in graph:
                continue
            if state.get(dep) == 1:
                cycles.append(" -> ".join([*stack[stack.index(dep) :], dep]) if dep in stack else f"{node}->{dep}")
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_package_reaches_no_path_of_a_checkout_and_ships_no_test_support():
    """Templates and schemas are package data; the local Slurm cluster, sshd and fake judge live under tests/."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for needle in ("parents[", 'hasattr(site, "raw")', "SITE.raw", '"workflow" / "templates"'):
            if needle in text:
                offenders.append(f"{path.relative_to(PACKAGE)}: {needle}")
    assert offenders == []
    assert not (PACKAGE / "testing").exists() and not (PACKAGE / "agents").exists()


def test_only_the_site_module_reads_a_site_file():
    """Everything else asks Site (requests, runtime, paths); nothing outside config/sites.py touches site.raw."""
    readers = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "sites.py" and ("site.raw" in path.read_text() or "SITE.raw" in path.read_text())
    ]
    rules = REPO / "workflow"
    readers += [str(p) for p in rules.rglob("*") if p.is_file() and "SITE.raw" in p.read_text()]
    assert readers == []


def test_every_subpackage_says_what_it_owns():
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 60, f"{init.relative_to(PACKAGE)} has no paragraph saying what it owns"


def test_no_two_classes_share_a_name():
    """One name per thing: a class name says which class it is wherever it is imported (issue 36)."""
    seen: dict[str, list[str]] = {}
    for name, path in _modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                seen.setdefault(node.name, []).append(name)
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}


def test_the_package_docstring_states_the_layers_in_their_order():
    """The order of the layers is stated once, by LAYERS; src/ptflow/__init__.py lists them in that order (with
    what each holds), and the docs point there instead of repeating it."""
    doc = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text()))
    listed = re.findall(r"^- (?:``)?(\w+)", doc, flags=re.M)
    assert listed == sorted(LAYERS, key=lambda name: (LAYERS[name], name != "standins"))
    for text in (REPO / "README.md", REPO / "docs" / "concepts.md"):
        assert "foundation < config" not in text.read_text(), f"{text.name} restates the layer order"


MAX_LINES, MAX_PARAMS = 100, 8
REASON = "# size:"  # on the lines right above a def (decorators may come between): why it is longer or wider


def _oversized(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    out = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = node.args
        names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
        params = len(names) - (names[:1] in (["self"], ["cls"]))
        length = node.end_lineno - node.lineno + 1
        if params > MAX_PARAMS:  # no reason excuses a wide one (issue 57): group what travels together
            out.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}: {params} parameters")
            continue
        if length <= MAX_LINES:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        above = []
        for line in reversed(lines[:first]):
            if not line.strip().startswith("#"):
                break
            above.append(line.strip())
        if not any(c.startswith(REASON) and len(c) > len(REASON) + 20 for c in above):
            out.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}: {length} lines, {params} parameters")
    return out


def test_no_function_is_over_8_parameters_or_100_lines_without_a_reason_beside_it():
    """Issue 36: a long positional list or a page-long function is where a reader gets lost. A function over eight
    parameters is refused whatever its comment (issue 57: there were six); one that has to be long says why on a
    ``# size: ...`` comment right above its def."""
    assert [f for path in sorted(PACKAGE.rglob("*.py")) for f in _oversized(path)] == []


def test_every_kind_names_a_trainer_that_exists():
    """ptflow.config.kinds names each kind's trainer as "module:function" (config sits below stages, and the trainers
    import torch lazily); a misspelt name would surface only in a GPU job, so it is resolved here."""
    from ptflow.config.kinds import KINDS
    from ptflow.stages.train.cell import trainer_of

    for kind, spec in KINDS.items():
        if spec.trainer is not None:
            assert callable(trainer_of(kind)), kind


MAX_MODULE_LINES = 600
MODULE_REASON = "# module size:"  # a comment line of the module: why it is longer (issue 47)
MAX_COMMON_SMK_LINES = 400


def test_no_module_is_over_600_lines_without_a_reason_in_it():
    """Issue 47: a module is a room one reads in a sitting. One that has to be longer says why on a
    ``# module size: ...`` line of its own."""
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().splitlines()
        reason = any(ln.strip().startswith(MODULE_REASON) and len(ln.strip()) > len(MODULE_REASON) + 20 for ln in lines)
        if len(lines) > MAX_MODULE_LINES and not reason:
            long.append(f"{path.relative_to(PACKAGE)}: {len(lines)} lines")
    assert long == []


def test_common_smk_stays_a_set_of_thin_get_functions():
    """The rules' values are computed in the package (ptflow.jobs); common.smk names them for the rules."""
    lines = (REPO / "workflow" / "rules" / "common.smk").read_text().splitlines()
    assert len(lines) < MAX_COMMON_SMK_LINES, f"common.smk has {len(lines)} lines"


# The rules whose jobs run a typed spec: each gets it as one params value, ``job`` (ptflow.specs; rule train's a
# RuleParams with the evaluation handoff and spend beside its items). The other rules keep the several plain values
# they always had: Snakemake compares the set of a job's param reprs, so folding them into one would rerun every
# finished job of theirs once (evaluate_seed: a GPU evaluation per seed; image: a rebuild).
ONE_JOB_VALUE_RULES = {"train", "train_supervised", "evaluate", "judge_run", "judge", "posttrainbench_cache"}


def _params_blocks() -> dict[str, list[str]]:
    """Each rule's params entries as written (``name=value``), read from workflow/rules/*.smk."""
    blocks: dict[str, list[str]] = {}
    for smk in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        rule, section = None, None
        for line in smk.read_text().splitlines():
            head = re.match(r"^(?:rule|checkpoint) (\w+):", line)
            if head:
                rule, section = head.group(1), None
                continue
            sub = re.match(r"^    (\w+):", line)
            if sub:
                section = sub.group(1)
                continue
            if rule and section == "params" and re.match(r"^        \S", line):
                blocks.setdefault(rule, []).append(line.strip())
            elif line and not line.startswith(" "):
                rule = section = None
    return blocks


def test_params_are_named_values_and_each_spec_is_one_value():
    """No params lambda: a job's params are named get_* functions (common.smk, built by Jobs) or the workflow's
    constants; each rule that runs a typed spec gets it as one value, ``job``, whatever else its job reads."""
    blocks = _params_blocks()
    assert set(blocks) >= ONE_JOB_VALUE_RULES
    lambdas = [f"{rule}: {e}" for rule, entries in blocks.items() for e in entries if "lambda" in e]
    assert lambdas == []
    several = {rule: entries for rule, entries in blocks.items() if rule in ONE_JOB_VALUE_RULES and len(entries) != 1}
    assert several == {}
    assert all(blocks[rule][0].startswith("job=get_") for rule in ONE_JOB_VALUE_RULES), blocks
