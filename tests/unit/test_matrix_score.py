"""PostTrainBench's score on hand-made cell files: fallback, weights, uncertainty, repeats and time.

Expected numbers are computed here by hand from the inputs written, never taken from the code under test.
"""

import csv
import json
import math
from pathlib import Path

import jsonschema
import pytest

from ptflow.config.matrix import build_config
from ptflow.results.cells import ScoreError, read_cell, split_run
from ptflow.results.report import apply_accounting
from ptflow.results.scoring import reference_scores, score
from ptflow.results.settings import Settings, settings_from_config, settings_from_parsed
from ptflow.results.tables import write_outputs
from ptflow.stages.evaluate.run import validate_eval_json
from tests.conftest import REPO
from tests.support.cells import write_cell
from tests.support.posttrainbench import BASE_MODELS, BASELINES, EVALS, FACTORS

M1, M2 = "ptflow/tiny-a-Base", "ptflow/tiny-b-Base"


def reference(**instruct):
    """A PostTrainBench-shaped table with instruct scores per (counterpart name, eval)."""
    table = {"zeroshot": {}}
    for key, value in instruct.items():
        name, eval_id = key.split("__")
        table["zeroshot"].setdefault(name.replace("_", "-"), {})[eval_id] = value
    return table


def cells_of(paths, settings):
    return [read_cell(p, settings) for p in paths]


def by_key(result):
    return {c.key: c for c in result.cells}


@pytest.fixture
def matrix(tmp_path):
    """2 models x 1 eval: baseline cells plus one agent whose cells are set per test."""
    paths = [
        write_cell(tmp_path, M1, "add", "baseline", 0.20, stderr=0.04),
        write_cell(tmp_path, M2, "add", "baseline", 0.30, stderr=0.05),
    ]
    settings = Settings(reference=reference(tiny_a__add=0.9, tiny_b__add=0.8))
    return tmp_path, paths, settings


def test_clean_cells_score_as_measured(matrix):
    root, paths, settings = matrix
    run = {"time_taken": 1800.0, "hours": 1}
    paths += [
        write_cell(root, M1, "add", "agent", 0.60, agent_run=run, judge="clean", trace="# Agent trace\n"),
        write_cell(root, M2, "add", "agent", 0.70, agent_run=run, judge="clean", trace="# Agent trace\n"),
    ]
    result = score(cells_of(paths, settings), settings)
    a = result.agent("agent")
    assert a.score == pytest.approx(0.65) and a.fallbacks == 0
    assert by_key(result)["ptflow--tiny-a-Base/add/agent"].score_source == "cell"


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        ({"value": 0.95, "judge": "flagged"}, "judge flagged contamination: trained on the test split"),
        (
            {"value": None, "agent_run": {"time_taken": 36000.0, "hours": 10, "budget_exhausted": True}},
            "no final model",
        ),
        (
            {
                "value": None,
                "status": "eval_failed",
                "attempts": [{"max_new_tokens": 20, "ok": False, "error": "CUDA out of memory"}] * 4,
            },
            "evaluation failed after 4 tries: CUDA out of memory",
        ),
    ],
    ids=["flagged", "no-model", "eval-failed"],
)
def test_unusable_cell_falls_back_to_base_zero_shot(matrix, kwargs, reason):
    root, paths, settings = matrix
    value = kwargs.pop("value")
    paths += [write_cell(root, M1, "add", "agent", value, **kwargs), write_cell(root, M2, "add", "agent", 0.70)]
    result = score(cells_of(paths, settings), settings)
    cell = by_key(result)["ptflow--tiny-a-Base/add/agent"]
    assert cell.fallback and reason in cell.fallback_reason
    assert cell.score == 0.20 and cell.score_stderr == 0.04 and cell.score_source == "baseline cell"
    a = result.agent("agent")
    assert a.cells == 2 and a.fallbacks == 1, "the cell is kept, not dropped"
    assert a.score == pytest.approx((0.20 + 0.70) / 2), "counted as the base score, not as zero"


def test_missing_eval_json_of_an_expected_cell_falls_back(matrix):
    root, paths, settings = matrix
    paths.append(write_cell(root, M2, "add", "agent", 0.70))
    expected = [{"model": m, "eval": "add", "agent": a} for m in ("ptflow--tiny-a-Base", "ptflow--tiny-b-Base")
                for a in ("baseline", "agent")]  # fmt: skip
    result = score(cells_of(paths, settings), settings, expected)
    cell = by_key(result)["ptflow--tiny-a-Base/add/agent"]
    assert cell.status == "missing" and cell.fallback and "no eval.json" in cell.fallback_reason
    assert result.agent("agent").missing == 1 and result.agent("agent").score == pytest.approx(0.45)


def test_unjudged_cells_scored_by_default_or_fall_back_when_configured(matrix):
    root, paths, settings = matrix
    paths += [write_cell(root, M1, "add", "agent", 0.60, judge="skipped"), write_cell(root, M2, "add", "agent", 0.7)]
    assert score(cells_of(paths, settings), settings).agent("agent").score == pytest.approx(0.65)
    settings.unjudged = "fallback"
    result = score(cells_of(paths, settings), settings)
    assert by_key(result)["ptflow--tiny-a-Base/add/agent"].fallback_reason.startswith("not judged")
    assert result.agent("agent").score == pytest.approx(0.45)


def test_baseline_cell_missing_for_a_fallback_is_a_clear_error(tmp_path):
    paths = [write_cell(tmp_path, M1, "add", "agent", 0.9, judge="flagged")]
    settings = Settings(reference=reference(tiny_a__add=0.9))
    with pytest.raises(ScoreError, match=r"ptflow--tiny-a-Base/add/agent falls back .* run the baseline cell"):
        score(cells_of(paths, settings), settings)


def test_weights_reproduce_posttrainbench_factors_from_its_reference_table(tmp_path):
    """Base cells measured at PostTrainBench's base numbers + its table for the instruct models = factors.json."""
    zs = BASELINES["zeroshot"]
    paths = []
    for model in BASE_MODELS:
        for e in EVALS:
            base = zs[model.split("/")[1]][e]
            paths.append(write_cell(tmp_path, model, e, "baseline", base))
            paths.append(write_cell(tmp_path, model, e, "agent", min(1.0, base + 0.1)))
    settings = Settings(reference=BASELINES)
    result = score(cells_of(paths, settings), settings)
    weights = {r.eval: r.weight for r in result.weights}
    assert weights == pytest.approx(FACTORS, abs=1e-12)
    assert {r.instruct_source for r in result.weights} == {"reference table"}
    gsm8k = next(r for r in result.weights if r.eval == "gsm8k")
    inst = [zs[n]["gsm8k"] for n in ("Qwen3-1.7B", "Qwen3-4B", "SmolLM3-3B", "gemma-3-4b-it")]
    base = [zs[n]["gsm8k"] for n in ("Qwen3-1.7B-Base", "Qwen3-4B-Base", "SmolLM3-3B-Base", "gemma-3-4b-pt")]
    assert gsm8k.gap == pytest.approx(sum(inst) / 4 - sum(base) / 4)
    expected_base = sum(FACTORS[e] * sum(zs[m.split("/")[1]][e] for m in BASE_MODELS) / 4 for e in EVALS)
    assert result.agent("baseline").score == pytest.approx(expected_base)
    assert reference_scores(result)["base (zero-shot)"] == pytest.approx(expected_base)


def test_weights_from_measured_instruct_cells(tmp_path):
    paths = [
        write_cell(tmp_path, M1, "add", "baseline", 0.1),
        write_cell(tmp_path, M1, "sub", "baseline", 0.2),
        write_cell(tmp_path, M1, "add", "instruct", 0.6),
        write_cell(tmp_path, M1, "sub", "instruct", 0.4),
    ]
    settings = Settings()
    result = score(cells_of(paths, settings), settings)
    w = {r.eval: r.weight for r in result.weights}
    # gaps 0.5 and 0.2: weights (1/0.5, 1/0.2) / (2 + 5)
    assert w == pytest.approx({"add": 2 / 7, "sub": 5 / 7})
    assert {r.instruct_source for r in result.weights} == {"instruct cells"}
    assert result.agent("instruct").role == "instruct"


def test_weights_from_a_reference_agent_for_models_without_instruct_counterpart(tmp_path):
    tiny = "ptflow/tiny-llama-h64"  # no -Base/-pt suffix: no counterpart name to look up
    paths = [
        write_cell(tmp_path, tiny, "add", "baseline", 0.0),
        write_cell(tmp_path, tiny, "sub", "baseline", 0.1),
        write_cell(tmp_path, tiny, "add", "sft", 0.8),
        write_cell(tmp_path, tiny, "sub", "sft", 0.5),
    ]
    with pytest.raises(ScoreError, match=r"model ptflow/tiny-llama-h64 eval add: no instruct reference score"):
        score(cells_of(paths, Settings()), Settings())
    settings = Settings(reference_agent="sft")
    result = score(cells_of(paths, settings), settings)
    # gaps: add 0.8 - 0.0, sub 0.5 - 0.1
    total = 1 / 0.8 + 1 / 0.4
    assert {r.eval: r.weight for r in result.weights} == pytest.approx({"add": 1.25 / total, "sub": 2.5 / total})
    assert {r.instruct_source for r in result.weights} == {"sft cells"}


def test_non_positive_gap_is_refused_naming_the_eval(matrix):
    root, paths, _ = matrix
    paths += [write_cell(root, m, "sub", "baseline", 0.1) for m in (M1, M2)]
    # add: instruct mean 0.225 < base mean 0.25 (sub is fine)
    settings = Settings(reference=reference(tiny_a__add=0.2, tiny_b__add=0.25, tiny_a__sub=0.9, tiny_b__sub=0.9))
    with pytest.raises(ScoreError) as err:
        score(cells_of(paths, settings), settings)
    msg = str(err.value)
    assert "eval add" in msg and "gap -0.0250" in msg and "\n" not in msg


def test_one_eval_weighs_one_without_any_reference(matrix):
    """With one eval the weighted score is the mean over models whatever the gap: no instruct reference needed."""
    root, paths, _ = matrix
    paths += [write_cell(root, M1, "add", "agent", 0.5), write_cell(root, M2, "add", "agent", 0.7)]
    result = score(cells_of(paths, Settings()), Settings())
    assert result.agent("agent").score == pytest.approx(0.6)
    assert result.weights[0].weight == 1.0 and result.weights[0].instruct_source == "(one eval: weight 1)"


def test_stderr_propagates_through_model_means_and_weights(tmp_path):
    paths = []
    for model, add, sub in ((M1, (0.2, 0.5), (0.1, 0.3)), (M2, (0.4, 0.7), (0.3, 0.6))):
        paths.append(write_cell(tmp_path, model, "add", "baseline", add[0], stderr=0.01))
        paths.append(write_cell(tmp_path, model, "sub", "baseline", sub[0], stderr=0.01))
        paths.append(write_cell(tmp_path, model, "add", "agent", add[1], stderr=0.03))
        paths.append(write_cell(tmp_path, model, "sub", "agent", sub[1], stderr=0.04))
    settings = Settings(weights={"add": 3, "sub": 1})  # fixed weights, normalised to 0.75 / 0.25
    result = score(cells_of(paths, settings), settings)
    a = result.agent("agent")
    assert a.score == pytest.approx(0.75 * 0.6 + 0.25 * 0.45)
    se_add = math.sqrt(0.03**2 + 0.03**2) / 2
    se_sub = math.sqrt(0.04**2 + 0.04**2) / 2
    assert a.stderr == pytest.approx(math.sqrt((0.75 * se_add) ** 2 + (0.25 * se_sub) ** 2))
    assert a.per_eval["add"].stderr == pytest.approx(se_add) and math.isnan(a.sd)


def test_repeats_reported_as_mean_and_sample_sd(matrix):
    root, paths, settings = matrix
    # run 1 is the agent's id; runs 2 and 3 are its slots <id>@run<k>, with the eval.json run field
    scores = {1: (0.5, 0.7), 2: (0.6, 0.8), 3: (0.4, 0.9)}
    for r, (v1, v2) in scores.items():
        agent = "claude" if r == 1 else f"claude@run{r}"
        field = None if r == 1 else r
        paths.append(write_cell(root, M1, "add", agent, v1, run=field, stderr=0.03))
        paths.append(write_cell(root, M2, "add", agent, v2, run=field, stderr=0.03))
    result = score(cells_of(paths, settings), settings)
    a = result.agent("claude")
    runs = [(v1 + v2) / 2 for v1, v2 in scores.values()]
    mean = sum(runs) / 3
    assert a.runs == 3 and a.run_scores == pytest.approx(runs) and a.score == pytest.approx(mean)
    assert a.sd == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in runs) / 2))
    se_run = math.sqrt(2 * 0.03**2) / 2
    assert a.stderr == pytest.approx(math.sqrt(3 * se_run**2) / 3)
    assert split_run("claude@run2", None) == ("claude", 2) and split_run("claude", None) == ("claude", 1)
    with pytest.raises(ScoreError, match="run = 0 must be an integer >= 1"):
        split_run("claude", 0)


def test_time_overview_against_budget_and_gpu_hours(matrix):
    root, paths, settings = matrix
    settings.gpus = {"train": 4, "eval": 1}
    paths += [
        # run 1: 2 h and 4 h of a 10 h budget; GPU time from the job timings x GPUs per stage, or from Slurm
        write_cell(root, M1, "add", "a", 0.5, agent_run={"time_taken": 7200.0, "hours": 10},
                   timings={"train_seconds": 7200.0, "eval_seconds": 360.0}, slurm_job_id="11"),
        write_cell(root, M2, "add", "a", 0.5, agent_run={"time_taken": 14400.0, "hours": 10}, slurm_job_id="12"),
        # run 2: 9 h
        write_cell(root, M1, "add", "a@run2", 0.5, agent_run={"time_taken": 32400.0, "hours": 10},
                   timings={"train_seconds": 3600.0, "eval_seconds": 0.0}, slurm_job_id="21", run=2),
        write_cell(root, M2, "add", "a@run2", 0.5, agent_run={"time_taken": 32400.0, "hours": 10},
                   slurm_job_id="22", run=2),
    ]  # fmt: skip
    cells = cells_of(paths, settings)
    apply_accounting(cells, {"12": 20 * 3600.0, "22": 7200.0, "99": 1.0})  # Slurm knew the jobs of two cells
    result = score(cells, settings)
    a = result.agent("a")
    assert a.mean_time_s == pytest.approx((3 * 3600 + 9 * 3600) / 2)  # per-run means 3 h and 9 h
    assert a.time_sd_s == pytest.approx(math.sqrt(2 * (3 * 3600) ** 2))
    assert a.budget_s == 36000 and a.time_used == pytest.approx(0.6)
    assert a.gpu_hours == pytest.approx((7200 * 4 + 360) / 3600 + 20.0 + 4.0 + 2.0)
    sources = {c.key: c.gpu_hours_source for c in result.cells if c.agent_id == "a"}
    assert sources["ptflow--tiny-b-Base/add/a"] == "Slurm accounting"
    assert sources["ptflow--tiny-a-Base/add/a"] == "timings x gpus"
    settings.gpus = None  # baseline cells then have eval time but no GPU count: unknown, not zero
    assert math.isnan(score(cells_of(paths, settings), settings).agent("baseline").gpu_hours)
    settings.agent_gpus = {"baseline": {"train": 0, "eval": 1}}  # the site's requests, per agent
    assert score(cells_of(paths, settings), settings).agent("baseline").gpu_hours == pytest.approx(2 * 300 / 3600)


def test_headline_metric_shape_and_one_metric_per_eval(tmp_path):
    paths = [
        write_cell(tmp_path, M1, "add", "baseline", 0.2, shape="headline", metric="pass@1"),
        write_cell(tmp_path, M1, "add", "agent", 0.5, shape="headline", metric="pass@1"),
    ]
    settings = Settings(reference=reference(tiny_a__add=0.9))
    result = score(cells_of(paths, settings), settings)
    assert result.weights[0].metric == "pass@1" and result.agent("agent").score == pytest.approx(0.5)
    paths.append(write_cell(tmp_path, M2, "add", "baseline", 0.2))
    with pytest.raises(ScoreError, match="eval add: cells report metrics 'pass@1' and 'accuracy'"):
        score(cells_of(paths, settings), settings)
    bad = write_cell(tmp_path, M2, "add", "x", 0.2, shape="headline", metric="")
    with pytest.raises(ScoreError, match="metrics.value has no metrics.name"):
        read_cell(bad)


def test_outputs_agree_and_are_written_atomically(matrix):
    root, paths, settings = matrix
    paths += [write_cell(root, M1, "add", "agent", 0.9, judge="flagged"), write_cell(root, M2, "add", "agent", 0.7)]
    result = score(cells_of(paths, settings), settings)
    out = root / "out"
    write_outputs(result, out / "summary.csv", out / "agents.csv", out / "leaderboard.md", out / "weights.csv")
    assert sorted(p.name for p in out.iterdir()) == ["agents.csv", "leaderboard.md", "summary.csv", "weights.csv"]
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert len(rows) == 4
    flagged = next(r for r in rows if r["agent"] == "agent" and r["model_name"] == "ptflow--tiny-a-Base")
    assert flagged["value"] == "0.9" and flagged["score"] == "0.2" and flagged["fallback"] == "yes"
    assert flagged["judge"] == "flagged" and flagged["metric"] == "accuracy"
    agents = {r["agent"]: r for r in csv.DictReader((out / "agents.csv").open())}
    assert float(agents["agent"]["score"]) == pytest.approx(0.45) and agents["agent"]["fallbacks"] == "1"
    board = (out / "leaderboard.md").read_text()
    assert f"| agent | {result.agent('agent').score:.3f} ± {result.agent('agent').stderr:.3f} | 1/2 |" in board
    assert "| add (accuracy) |" in board
    assert "| ptflow--tiny-a-Base/add/agent | judge flagged contamination: trained on the test split | 0.200" in board


def test_settings_from_config_and_end_to_end(tmp_path):
    """The aggregate rule's params carry the config's scoring, models and agents as written; scoring reads them as
    the config's entries parse them (an instruct counterpart as an id or as {id, revision}; the references by kind)."""
    raw = {
        "models": [
            {"id": M1, "source": "hub", "revision": "r1", "instruct": "ptflow/tiny-a"},
            {"id": M2, "source": "hub", "revision": "r1", "instruct": {"id": "ptflow/tiny-b", "revision": "r2"}},
        ],
        "agents": [
            {"id": "base0", "kind": "baseline"},
            {"id": "agent", "kind": "cli-agent", "cli": "scripted", "model": "m", "hours": 1},
            {"id": "inst0", "kind": "instruct"},
        ],
        "scoring": {"unjudged": "fallback"},
    }
    s = settings_from_config(raw, reference(tiny_a__add=0.9), {"agent": {"train": 1, "eval": 1}})
    assert s.baseline_agent == "base0" and s.instruct_agent == "inst0" and s.unjudged == "fallback"
    assert s.instruct_models == {M1: "ptflow/tiny-a", M2: "ptflow/tiny-b"}
    assert s.agent_gpus == {"agent": {"train": 1, "eval": 1}} and s.agent_order == ["base0", "agent", "inst0"]
    assert s.reference_agent is None and s.weights is None and s.gpus is None
    paths = [write_cell(tmp_path, M1, "add", "base0", 0.1), write_cell(tmp_path, M1, "add", "agent", 0.5)]
    assert score([read_cell(p, s) for p in paths], s).agent("agent").score == pytest.approx(0.5)


def test_scoring_reads_the_aggregate_params_as_the_workflow_parsed_its_config(default_raw):
    """What the aggregate job gets (``raw: {scoring, models, agents}`` of the workflow's config) gives the settings
    the workflow's own parse of that config gives: one parser, the config entries'."""
    raw = default_raw
    raw["scoring"] = {**(raw.get("scoring") or {}), "unjudged": "fallback", "gpus": {"train": 2, "eval": 1}}
    cfg = build_config(raw)
    params = {k: cfg.raw.get(k) for k in ("scoring", "models", "agents")}  # workflow/rules/common.smk scoring_params
    parsed = settings_from_parsed(cfg.raw["scoring"], cfg.models, cfg.agents)
    assert settings_from_config(params) == parsed
    assert parsed.unjudged == "fallback" and parsed.gpus == {"train": 2, "eval": 1}
    assert parsed.agent_order == list(cfg.agents) and parsed.baseline_agent in cfg.agents


def test_hand_made_cells_follow_the_eval_schema(tmp_path):
    """The test cells are realistic: the eval.json schema (2, the headline metric by name) accepts them."""
    schema = json.loads(next(Path(REPO, "src").rglob("eval.schema.json")).read_text())
    for path in (
        write_cell(tmp_path, M1, "add", "baseline", 0.2, shape="headline"),
        write_cell(tmp_path, M1, "add", "a", None, shape="headline", agent_run={"time_taken": 10.0, "hours": 1}),
    ):
        jsonschema.validate(json.loads(path.read_text()), schema)


def test_instruct_references_mix_measured_cells_and_the_table(tmp_path):
    """An instruct cell only for M1: M2's instruct score comes from the table, and no instruct cell is 'missing'."""
    paths = [
        write_cell(tmp_path, M1, "add", "baseline", 0.1),
        write_cell(tmp_path, M2, "add", "baseline", 0.3),
        write_cell(tmp_path, M1, "add", "instruct", 0.7),
        write_cell(tmp_path, M1, "add", "agent", 0.4),
        write_cell(tmp_path, M2, "add", "agent", 0.5),
    ]
    paths += [write_cell(tmp_path, m, "sub", a, 0.2) for m in (M1, M2) for a in ("baseline", "agent")]
    settings = Settings(reference=reference(tiny_b__add=0.9, tiny_a__sub=0.6, tiny_b__sub=0.6))
    result = score(cells_of(paths, settings), settings)
    row = result.weights[0]
    assert row.instruct_mean == pytest.approx(0.8) and row.base_mean == pytest.approx(0.2)
    assert row.eval == "add" and row.instruct_source == "instruct cells, reference table"
    assert result.agent("instruct").cells == 1 and result.agent("instruct").missing == 0


def test_api_spend_is_summed_per_agent_beside_gpu_hours(matrix):
    """eval.json's agent_run.api_usage (what the CLI reported) per agent in agents.csv and the leaderboard; a cell
    without it (the scripted stand-in, a CLI that prints no usage) adds nothing, and no USD where no CLI priced."""
    root, paths, settings = matrix
    run = {"exit_code": 0, "budget_exhausted": False, "time_taken": 60.0, "final_model": True, "hours": 1}
    spend = {"input_tokens": 1200, "output_tokens": 120, "cached_tokens": 200, "cost_usd": 0.003, "source": "claude"}
    mine = [
        write_cell(root, M1, "add", "agent", 0.6, shape="headline", agent_run={**run, "api_usage": spend}),
        write_cell(root, M2, "add", "agent", 0.5, shape="headline",
                   agent_run={**run, "api_usage": {**spend, "cost_usd": 0.001}}),
    ]  # fmt: skip
    for p in mine:
        validate_eval_json(json.loads(p.read_text()))  # the schema of eval.json holds api_usage
    paths += mine
    result = score(cells_of(paths, settings), settings)
    api = result.agent("agent").api
    assert (api.input_tokens, api.output_tokens, api.cached_tokens, api.cells) == (2400, 240, 400, 2)
    assert api.cost_usd == pytest.approx(0.004) and result.agent("baseline").api is None
    out = root / "out"
    write_outputs(result, out / "summary.csv", out / "agents.csv", out / "leaderboard.md", out / "weights.csv")
    agents = {r["agent"]: r for r in csv.DictReader((out / "agents.csv").open())}
    assert (agents["agent"]["api_input_tokens"], agents["agent"]["api_cost_usd"]) == ("2400", "0.004")
    assert agents["baseline"]["api_input_tokens"] == "" and agents["baseline"]["api_cost_usd"] == ""
    board = (out / "leaderboard.md").read_text()
    assert "- agent: 2,400 in / 400 cached / 240 out, $0.00 (2 of 2 cells reported)" in board
