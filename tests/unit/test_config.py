"""Config errors are one clear line naming key, value and fix; the matrix expands as configured."""

import pytest

from ptflow.config.load import load
from ptflow.config.matrix import Cell, build_config
from ptflow.config.validate import ConfigError
from tests.conftest import REPO


def error_of(raw) -> str:
    with pytest.raises(ConfigError) as info:
        build_config(raw)
    msg = str(info.value)
    assert "\n" not in msg, "config errors are one line"
    return msg


def test_default_config_expands_to_twelve_cells(default_raw):
    cfg = build_config(default_raw)
    assert len(cfg.cells) == 2 * 2 * 3
    assert Cell("ptflow--tiny-llama-h64", "add", "sft") in cfg.cells
    # grpo builds on sft: both train; baseline does not.
    assert len(cfg.training_cells()) == 8


def test_posttrainbench_matrix_size():
    cfg = load(REPO, ["config/posttrainbench-ptflow.yaml"], base_dir=REPO).cfg
    # 8 agents + baseline, and the 4 instruct counterparts evaluated zero-shot (the weights' reference)
    assert len(cfg.cells) == 4 * 7 * 9 + 4 * 7
    assert len(cfg.training_cells()) == 4 * 7 * 8


def test_unknown_key_names_it_and_suggests(default_raw):
    default_raw["agents"][1]["params"]["stepz"] = 3
    msg = error_of(default_raw)
    assert "agents[1].params" in msg and "'stepz'" in msg and "did you mean 'steps'" in msg


def test_gradient_checkpointing_must_be_a_boolean(default_raw):
    default_raw["agents"][1]["params"]["gradient_checkpointing"] = "no"
    msg = error_of(default_raw)
    assert "agents[1].params.gradient_checkpointing" in msg and "'no'" in msg and "boolean" in msg


def test_unknown_top_level_key(default_raw):
    default_raw["matirx"] = {}
    msg = error_of(default_raw)
    assert "unknown key 'matirx'" in msg and "did you mean 'matrix'" in msg


def test_typo_in_matrix_agent(default_raw):
    default_raw["matrix"]["agents"] = ["baseline", "gpro"]
    msg = error_of(default_raw)
    assert "matrix.agents[1]" in msg and "'gpro'" in msg and "did you mean 'grpo'" in msg


def test_typo_in_matrix_model(default_raw):
    default_raw["matrix"]["models"] = ["ptflow/tiny-llama-h46"]
    msg = error_of(default_raw)
    assert "matrix.models[0]" in msg and "ptflow/tiny-llama-h64" in msg


def test_duplicate_ids(default_raw):
    default_raw["evals"].append(dict(default_raw["evals"][0]))
    msg = error_of(default_raw)
    assert "evals[2].id" in msg and "duplicate id 'add'" in msg and "evals[0]" in msg


def test_empty_matrix_after_exclude(default_raw):
    default_raw["matrix"]["exclude"] = [{"eval": "add"}, {"eval": "sub"}]
    msg = error_of(default_raw)
    assert "no cells remain" in msg


def test_empty_selection(default_raw):
    default_raw["matrix"]["evals"] = []
    msg = error_of(default_raw)
    assert "matrix.evals" in msg and "'all' or a non-empty list" in msg


@pytest.mark.parametrize(
    "path, value",
    [
        (("agents", 1, "params", "steps"), 0),
        (("agents", 1, "params", "learning_rate"), -0.1),
        (("evals", 0, "max_new_tokens"), 0),
        (("models", 0, "tiny", "layers"), -2),
    ],
)
def test_non_positive_numbers(default_raw, path, value):
    node = default_raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    msg = error_of(default_raw)
    where = ".".join(str(p) for p in path).replace(".1.", "[1].").replace(".0.", "[0].").replace(".0", "[0]")
    assert where.split(".")[0] in msg and repr(value) in msg and "positive" in msg


def test_missing_required_key(default_raw):
    del default_raw["paths"]["scratch"]
    msg = error_of(default_raw)
    assert "paths" in msg and "'scratch' is a required property" in msg


def test_unknown_from_agent(default_raw):
    default_raw["agents"][2]["from"] = "sfft"
    msg = error_of(default_raw)
    assert "agents[2].from" in msg and "did you mean 'sft'" in msg


def test_from_cycle(default_raw):
    default_raw["agents"][1]["from"] = "grpo"
    msg = error_of(default_raw)
    assert "loops back" in msg


def test_from_baseline_is_refused(default_raw):
    default_raw["agents"][2]["from"] = "baseline"
    assert "trains nothing" in error_of(default_raw)


def test_bad_model_id(default_raw):
    default_raw["models"][0]["id"] = "bad--name/x"
    assert "models[0].id" in error_of(default_raw)


def test_hub_model_needs_revision(default_raw):
    default_raw["models"][0] = {"id": "Qwen/Qwen3-1.7B-Base", "source": "hub"}
    assert "pinned revision" in error_of(default_raw)


def test_exclude_and_include(default_raw):
    default_raw["matrix"]["agents"] = ["baseline", "sft"]
    default_raw["matrix"]["exclude"] = [{"model": "ptflow/tiny-llama-h96"}]
    default_raw["matrix"]["include"] = [{"model": "ptflow/tiny-llama-h96", "eval": "add", "agent": "grpo"}]
    cfg = build_config(default_raw)
    assert set(cfg.cells) == {
        Cell("ptflow--tiny-llama-h64", "add", "baseline"),
        Cell("ptflow--tiny-llama-h64", "add", "sft"),
        Cell("ptflow--tiny-llama-h64", "sub", "baseline"),
        Cell("ptflow--tiny-llama-h64", "sub", "sft"),
        Cell("ptflow--tiny-llama-h96", "add", "grpo"),
    }
    # the included grpo cell pulls in its sft start as a training, not as a cell
    assert Cell("ptflow--tiny-llama-h96", "add", "sft") in cfg.training_cells()


def test_training_hash_follows_params_and_parent(default_raw):
    before = build_config(default_raw)
    default_raw["agents"][1]["params"]["steps"] += 1
    after = build_config(default_raw)
    sft = Cell("ptflow--tiny-llama-h64", "add", "sft")
    grpo = Cell("ptflow--tiny-llama-h64", "add", "grpo")
    assert before.training_hash(sft) != after.training_hash(sft)
    assert before.training_hash(grpo) != after.training_hash(grpo), "a changed parent changes the child"
    other = Cell("ptflow--tiny-llama-h96", "sub", "sft")
    default_raw["agents"][1]["params"]["steps"] -= 1
    assert build_config(default_raw).training_hash(other) == before.training_hash(other)


def test_missing_trainer_param_is_a_config_error(default_raw):
    del default_raw["agents"][2]["params"]["seed"]
    msg = error_of(default_raw)
    assert "agents[2].params" in msg and "needs seed" in msg


def test_reordered_keys_give_identical_params(default_raw):
    """Snakemake compares params as text: reordering keys in YAML must not look like a change."""
    before = build_config(default_raw)
    for agent in default_raw["agents"]:
        agent["params"] = dict(reversed(list(agent.get("params", {}).items())))
    default_raw["evals"][0]["dataset"]["generator"] = dict(
        reversed(list(default_raw["evals"][0]["dataset"]["generator"].items()))
    )
    after = build_config(default_raw)
    assert [repr(a.params) for a in before.agents.values()] == [repr(a.params) for a in after.agents.values()]
    assert repr(before.evals["add"].dataset) == repr(after.evals["add"].dataset)


def test_repeats_add_runs_without_touching_run_one(default_raw):
    before = build_config(default_raw)
    default_raw["agents"][1]["repeats"] = 3  # sft; grpo (from sft) keeps one run
    cfg = build_config(default_raw)
    sft = [c for c in cfg.cells if c.agent_id == "sft"]
    assert {c.agent for c in sft} == {"sft", "sft@run2", "sft@run3"} and len(sft) == 4 * 3
    run1, run2 = Cell("ptflow--tiny-llama-h64", "add", "sft"), Cell("ptflow--tiny-llama-h64", "add", "sft@run2")
    assert cfg.training_hash(run1) == before.training_hash(run1)  # adding repeats reruns nothing that exists
    assert cfg.training_hash(run2) != cfg.training_hash(run1)
    assert cfg.trained_params("sft@run3")["seed"] == cfg.trained_params("sft")["seed"] + 2
    assert cfg.agent_for("sft@run2").id == "sft" and run2.run == 2 and run2.agent_id == "sft"


def test_repeated_chain_trains_each_run_from_its_own_parent(default_raw):
    default_raw["agents"][2]["repeats"] = 2  # grpo from sft
    cfg = build_config(default_raw)
    assert cfg.parent_slot("grpo@run2") == "sft@run2"
    assert Cell("ptflow--tiny-llama-h64", "add", "sft@run2") in cfg.training_cells()


def test_instruct_agent_has_cells_only_for_models_with_a_counterpart(default_raw):
    default_raw["models"] = [
        {"id": "Qwen/Qwen3-1.7B-Base", "source": "hub", "revision": "main", "instruct": "Qwen/Qwen3-1.7B"},
        {"id": "org/other-Base", "source": "hub", "revision": "main"},
    ]
    default_raw["agents"].append({"id": "instruct", "kind": "instruct"})
    default_raw["scoring"] = {"reference": {"zeroshot": {}}}
    cfg = build_config(default_raw)
    inst = [c for c in cfg.cells if c.agent == "instruct"]
    assert {c.model for c in inst} == {"Qwen--Qwen3-1.7B-Base"}
    assert cfg.evaluated_model(inst[0]).id == "Qwen/Qwen3-1.7B" and cfg.model_named("Qwen--Qwen3-1.7B").id
    default_raw["models"] = default_raw["models"][1:]
    with pytest.raises(ConfigError, match="agent 'instruct' .* no model of the matrix names one"):
        build_config(default_raw)


def test_weights_need_a_reference_before_anything_runs(default_raw):
    default_raw["scoring"] = {}  # two evals, tiny models without counterparts, no table, no reference agent
    with pytest.raises(ConfigError, match=r"config error at scoring: no instruct reference: .*ptflow/tiny-llama-h64"):
        build_config(default_raw)
    default_raw["scoring"] = {"reference_agent": "nope"}
    with pytest.raises(ConfigError, match="scoring.reference_agent 'nope' is not an agent of this matrix"):
        build_config(default_raw)
    default_raw["scoring"] = {"reference_agent": "baseline"}
    with pytest.raises(ConfigError, match="'baseline' trains nothing"):
        build_config(default_raw)
    default_raw["scoring"] = {"reference_agent": "nope"}
    default_raw["matrix"]["evals"] = ["add"]  # one eval weighs 1: no reference needed
    build_config(default_raw)


def test_judge_can_be_turned_off(default_raw):
    default_raw["judge"] = {"cli": ["x"], "model": "m", "keys": ["K"]}
    assert build_config(default_raw).judge == {"cli": ["x"], "model": "m", "keys": ["K"]}
    default_raw["judge"]["enabled"] = False
    assert build_config(default_raw).judge is None


def test_the_shared_config_is_the_workflows_own(tmp_path, monkeypatch, default_raw):
    """`ptflow plan` reads back the config its dry-run merged: every value and type as the workflow had it."""
    import datetime

    from ptflow.config.load import SHARED_CONFIG_ENV, share_config, shared_config

    raw = {**default_raw, "note": datetime.date(2026, 11, 22), "seeds": (1, 2)}
    path = tmp_path / "config.pickle"
    assert shared_config(path) is None  # nothing shared: the plan merges the config itself
    monkeypatch.delenv(SHARED_CONFIG_ENV, raising=False)
    share_config(raw)
    assert not path.exists()  # only where asked
    monkeypatch.setenv(SHARED_CONFIG_ENV, str(path))
    share_config(raw)
    assert shared_config(path) == raw


# ---- one fact, one place: each default and enumeration is written once, in ptflow.config.entries (agents) or
# ptflow.config.sites (sites); the schemas' descriptions and the documents quote it, and these tests keep the quotes
# equal (the schemas hold no `default:` keyword: snakemake's validate would write it into the config, and so into
# the params of cells that never set it).

AGENT_DEFAULTS = {  # agent key -> its default (ptflow.config.entries)
    "grace_minutes": "DEFAULT_GRACE_MINUTES",
    "sync_minutes": "DEFAULT_SYNC_MINUTES",
    "repeats": "DEFAULT_REPEATS",
}
SITE_DEFAULTS = {  # site key -> its default (ptflow.config.sites)
    "max_resumes": "DEFAULT_MAX_RESUMES",
    "controller_wait_minutes": "CONTROLLER_WAIT_MINUTES",
}
DOCUMENTS = ("docs/configuration.md", "docs/resuming-and-faults.md", "docs/concepts.md", "README.md")


def _stated_defaults(text: str, key: str) -> list[float]:
    """Every default a document states for `key`: the first 'default N' after each mention of it, before the next
    list item or table row."""
    import re

    found = []
    for mention in re.finditer(rf"`{re.escape(key)}`", text):
        rest = text[mention.end() : mention.end() + 400]
        window = re.split(r"\n\s*[-|]|`[a-z_]+`:? \(|\| `", rest, maxsplit=1)[0]
        stated = re.search(r"\bdefault:? ([0-9][0-9.]*)\b", window)
        if stated:
            found.append(float(stated.group(1)))
    return found


def _schema_property(schema: str, *path: str) -> dict:
    import yaml

    node = yaml.safe_load((REPO / "src/ptflow/config/schemas" / schema).read_text())
    for key in path:
        node = node[key]
    return node


@pytest.mark.parametrize(
    ("key", "module", "name"),
    [(k, "entries", n) for k, n in AGENT_DEFAULTS.items()] + [(k, "sites", n) for k, n in SITE_DEFAULTS.items()],
)
def test_a_default_is_written_once_and_quoted_alike(key, module, name):
    import importlib
    import re

    value = float(getattr(importlib.import_module(f"ptflow.config.{module}"), name))
    if module == "entries":
        prop = _schema_property("config.schema.json", "properties", "agents", "items", "properties", key)
    else:
        prop = _schema_property("site.schema.json", "properties", key)
    assert "default" not in prop, f"{key}: the schema's `default:` would be written into the config"
    stated = [float(v) for v in re.findall(r"\bdefault:? ([0-9][0-9.]*)\b", prop["description"])]
    assert stated == [value], f"the schema's description of {key} says default {stated}, {module}.{name} is {value:g}"
    quoted = {doc: _stated_defaults((REPO / doc).read_text(), key) for doc in DOCUMENTS}
    assert quoted["docs/configuration.md"], f"docs/configuration.md states no default of {key}"
    wrong = {doc: v for doc, values in quoted.items() for v in values if v != value}
    assert wrong == {}, f"{key}: {module}.{name} is {value:g}, documents say {wrong}"


def test_on_restart_modes_and_default_are_the_config_entries():
    from ptflow.config.entries import DEFAULT_ON_RESTART, ON_RESTART_MODES

    prop = _schema_property("config.schema.json", "properties", "agents", "items", "properties", "on_restart")
    assert tuple(prop["enum"]) == ON_RESTART_MODES and "default" not in prop
    assert f"({DEFAULT_ON_RESTART}, default)" in prop["description"]
    # the record a train job writes (the evaluation's schema of train records) takes the same modes
    import json

    record = json.loads((REPO / "src/ptflow/config/schemas/eval.schema.json").read_text())
    enums = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("on_restart"), dict) and "enum" in node["on_restart"]:
                enums.append(tuple(node["on_restart"]["enum"]))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(record)
    assert enums and set(enums) == {ON_RESTART_MODES}
    row = next(line for line in (REPO / "docs/configuration.md").read_text().splitlines() if "| `on_restart` |" in line)
    assert f"`{DEFAULT_ON_RESTART}` (default)" in row and all(f"`{m}`" in row for m in ON_RESTART_MODES)


def test_rescorers_default_to_the_tasks_and_an_unknown_or_a_checkout_one_is_refused(default_raw):
    from ptflow.config.entries import eval_from_entry

    gsm8k = {"id": "gsm8k", "task": "inspect_evals/gsm8k", "max_new_tokens": 64}
    assert eval_from_entry(gsm8k).rescore == ("exact_numeric",)  # the task's default (PostTrainBench's rescoring)
    assert eval_from_entry({**gsm8k, "rescore": []}).rescore == ()
    assert build_config(default_raw).evals["add"].rescore == ()  # the toy task: none unless asked
    with pytest.raises(ConfigError, match=r"evals\[0\]\.rescore: 'exactly' is not a rescorer; use exact_numeric"):
        eval_from_entry({**gsm8k, "rescore": ["exactly"]})
    checkout = {"id": "gsm8k", "task": "posttrainbench/gsm8k", "rescore": ["exact_numeric"]}
    with pytest.raises(ConfigError, match=r"rescore: eval 'gsm8k' runs the PostTrainBench checkout's evaluate.py"):
        eval_from_entry(checkout)


def test_evaluation_seeds_from_the_matrix_or_the_eval_and_never_for_a_checkout_eval(default_raw):
    raw = {**default_raw, "matrix": {**default_raw["matrix"], "seeds": [72332, 87681]}}
    raw["evals"] = [{**e, "seeds": [72332]} if e["id"] == "sub" else e for e in default_raw["evals"]]
    evals = build_config(raw).evals
    assert evals["add"].seeds == (72332, 87681) and evals["sub"].seeds == (72332,) and evals["add"].seeded
    assert build_config(default_raw).evals["add"].seeds == () and not build_config(default_raw).evals["add"].seeded
    from ptflow.config.entries import eval_from_entry

    with pytest.raises(ConfigError, match=r"seeds: eval 'gsm8k' runs the PostTrainBench checkout's evaluate.py, which "
                       "takes no --seed"):  # fmt: skip
        eval_from_entry({"id": "gsm8k", "task": "posttrainbench/gsm8k", "seeds": [1]})
    twice = {**default_raw, "evals": [{**e, "seeds": [1, 1]} for e in default_raw["evals"]]}
    with pytest.raises(ConfigError, match=r"evals\[0\]\.seeds"):  # distinct non-negative integers (the schema)
        build_config(twice)
