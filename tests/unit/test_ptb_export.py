"""``ptflow export --posttrainbench``: a run's cells as PostTrainBench's results dir (ptflow.results.ptb_export).

The cells are hand-made files (tests/support/cells.py, plus the manifest and agent trace the train stage writes);
every expected name and content below is written out by hand from PostTrainBench's src/run_task.sh and
scripts/aggregate_*.py, never taken from the code under test.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ptflow.config.load import resolve
from ptflow.ops import cli
from ptflow.results.ptb_export import ExportError, export_posttrainbench
from tests.conftest import REPO
from tests.support.cells import cell_dir, write_cell
from tests.support.ptb_aggregation import AGGREGATE_METHODS_PY

BASE, INSTRUCT = "Qwen/Qwen3-1.7B-Base", "Qwen/Qwen3-1.7B"
CLEAN = {
    "contamination_judgement.txt": "no contamination detected\n",
    "disallowed_model_judgement.txt": "only allowed use detected\nonly the base model was loaded\n",
}
CHECKOUT_METRICS = '{"accuracy": 0.6, "stderr": 0.01, "extra": "kept verbatim"}\n'


def config(raw: dict, *, models=None) -> dict:
    raw["models"] = models or [{"id": BASE, "source": "hub", "revision": "main", "instruct": INSTRUCT}]
    raw["evals"] = [e for e in raw["evals"] if e["id"] == "add"]
    raw["agents"] = [
        {"id": "baseline", "kind": "baseline"},
        {"id": "instruct", "kind": "instruct"},
        {"id": "sft", "kind": "trl-sft", "params": {"steps": 3, "batch_size": 2, "learning_rate": 1e-3, "seed": 0}},
        {"id": "opus", "kind": "cli-agent", "cli": "claude", "model": "claude-opus-4-5", "hours": 10, "repeats": 2},
    ]
    raw["scoring"] = {}
    return raw


def write_manifest(work: Path, slot: str, **fields) -> Path:
    """checkpoint.json as the train stage writes it (ptflow.stages.train.cell), with its checkpoint dir on scratch."""
    ckpt = work / ".scratch" / "checkpoints" / "Qwen--Qwen3-1.7B-Base" / "add" / slot
    ckpt.mkdir(parents=True)
    manifest = {"model": BASE, "eval": "add", "agent": slot, "checkpoint": str(ckpt), "train_seconds": 3723.2}
    path = cell_dir(work / "results", BASE, "add", slot) / "checkpoint.json"
    path.write_text(json.dumps({**manifest, **fields}))
    return ckpt


def write_trace(work: Path, slot: str, judgements: dict) -> None:
    trace = cell_dir(work / "results", BASE, "add", slot) / "agent"
    trace.mkdir(parents=True, exist_ok=True)
    (trace / "prompt.md").write_text(f"post-train {BASE} for add")  # as bash passes it: no trailing newline
    (trace / "stdout.log").write_text('{"type": "result"}\n')
    (trace / "trace.md").write_text("# Agent trace\n")
    for name, text in judgements.items():
        (trace / name).write_text(text)


@pytest.fixture
def run(tmp_path, default_raw):
    """One model (with its instruct counterpart) x one eval: baseline, instruct, sft, and two runs of a cli agent
    (run 1 scored and judged clean, from a PostTrainBench checkout's evaluate.py; run 2 left no model)."""
    loaded = resolve(config(default_raw), REPO, tmp_path)
    results = tmp_path / "results"
    write_cell(results, BASE, "add", "baseline", 0.2, stderr=0.04, slurm_job_id="1001")
    write_cell(results, BASE, "add", "instruct", 0.7, stderr=None, slurm_job_id="1002", timings={"eval_seconds": 61})
    write_cell(results, BASE, "add", "sft", 0.5, slurm_job_id=None)
    sft_ckpt = write_manifest(tmp_path, "sft")
    agent_run = {"time_taken": 36000.4, "hours": 10, "cli": "claude", "model": "claude-opus-4-5"}
    eval_json = write_cell(results, BASE, "add", "opus", 0.6, agent_run=agent_run, judge="clean", slurm_job_id="2001")
    data = json.loads(eval_json.read_text())
    data["posttrainbench"] = {"commit": "9082063" + "0" * 33, "metrics_file": "inspect/metrics.json"}
    eval_json.write_text(json.dumps(data))
    (eval_json.parent / "inspect").mkdir()
    (eval_json.parent / "inspect" / "metrics.json").write_text(CHECKOUT_METRICS)
    opus_ckpt = write_manifest(tmp_path, "opus", agent_run={**agent_run, "final_model": True})
    write_trace(tmp_path, "opus", CLEAN)
    run2 = {"time_taken": 36300.0, "hours": 10, "budget_exhausted": True, "final_model": False}
    write_cell(results, BASE, "add", "opus@run2", None, agent_run=run2, slurm_job_id="2002_3")
    write_manifest(tmp_path, "opus@run2", final_model=False, agent_run=run2)
    write_trace(tmp_path, "opus@run2", {})
    return loaded, tmp_path, {"sft": sft_ckpt, "opus": opus_ckpt}


def tree(dest: Path) -> dict[str, list[str]]:
    return {
        f"{m.name}/{r.name}": sorted(p.name for p in r.iterdir())
        for m in sorted(dest.iterdir())
        for r in sorted(m.iterdir())
    }


def test_run_dirs_names_and_files(run, tmp_path):
    loaded, work, ckpts = run
    dest = tmp_path / "ptb"
    summary = export_posttrainbench(loaded.cfg, loaded.layout, dest, workdir=work, site=loaded.site)
    assert tree(dest) == {
        "baseline_zeroshot/add_Qwen_Qwen3-1.7B-Base_1001": ["eval.txt", "metrics.json", "model.txt", "time_taken.txt"],
        "baseline_zeroshot/add_Qwen_Qwen3-1.7B_1002": ["eval.txt", "metrics.json", "model.txt", "time_taken.txt"],
        "claude_claude-opus-4-5_10h_run1/add_Qwen_Qwen3-1.7B-Base_2001": [
            "contamination_judgement.txt",
            "disallowed_model_judgement.txt",
            "final_model",
            "judge_result.json",  # the verdict in d27a95e's encoding too
            "metrics.json",
            "prompt.txt",
            "solve_out.txt",
            "time_taken.txt",
        ],
        # no model: no metrics.json and no final_model -> PostTrainBench's "not stored"; Slurm array id -> 0
        "claude_claude-opus-4-5_10h_run2/add_Qwen_Qwen3-1.7B-Base_0": ["prompt.txt", "solve_out.txt", "time_taken.txt"],
        "trl-sft_sft_0h/add_Qwen_Qwen3-1.7B-Base_0": ["final_model", "metrics.json", "time_taken.txt"],
    }
    assert summary.methods == [
        "baseline_zeroshot",
        "claude_claude-opus-4-5_10h_run1",
        "claude_claude-opus-4-5_10h_run2",
        "trl-sft_sft_0h",
    ]

    def read(rel: str) -> str:
        return (dest / rel).read_text()

    base = "baseline_zeroshot/add_Qwen_Qwen3-1.7B-Base_1001"
    assert json.loads(read(f"{base}/metrics.json")) == {"accuracy": 0.2, "stderr": 0.04}
    assert read(f"{base}/time_taken.txt") == "00:05:00\n"  # eval.json timings.eval_seconds 300
    assert read(f"{base}/model.txt") == "Qwen/Qwen3-1.7B-Base\n" and read(f"{base}/eval.txt") == "add\n"
    inst = "baseline_zeroshot/add_Qwen_Qwen3-1.7B_1002"  # the evaluated model: the instruct counterpart
    assert json.loads(read(f"{inst}/metrics.json")) == {"accuracy": 0.7, "stderr": None}
    assert read(f"{inst}/time_taken.txt") == "00:01:01\n" and read(f"{inst}/model.txt") == "Qwen/Qwen3-1.7B\n"

    agent = "claude_claude-opus-4-5_10h_run1/add_Qwen_Qwen3-1.7B-Base_2001"
    assert read(f"{agent}/metrics.json") == CHECKOUT_METRICS  # the checkout's file, byte for byte
    assert read(f"{agent}/time_taken.txt") == "10:00:00\n"
    for name, text in CLEAN.items():  # the decided answer alone (the judge's evidence lines stay in ptflow's results)
        assert read(f"{agent}/{name}") == text.splitlines()[0] + "\n"
    # run_task.sh writes echo "$PROMPT" > prompt.txt: the prompt (trailing newlines stripped by $(...)) and one newline
    assert read(f"{agent}/prompt.txt") == "post-train Qwen/Qwen3-1.7B-Base for add\n"
    assert read(f"{agent}/solve_out.txt") == '{"type": "result"}\n'
    assert (dest / agent / "final_model").is_symlink() and (dest / agent / "final_model").is_dir()
    assert os.readlink(dest / agent / "final_model") == str(ckpts["opus"])
    assert read("claude_claude-opus-4-5_10h_run2/add_Qwen_Qwen3-1.7B-Base_0/time_taken.txt") == "10:05:00\n"

    sft = "trl-sft_sft_0h/add_Qwen_Qwen3-1.7B-Base_0"
    assert json.loads(read(f"{sft}/metrics.json")) == {"accuracy": 0.5, "stderr": 0.02}
    assert read(f"{sft}/time_taken.txt") == "01:02:03\n"  # the manifest's train_seconds 3723.2
    assert os.readlink(dest / sft / "final_model") == str(ckpts["sft"])

    # PostTrainBench's scripts/aggregate_methods.py reads every run dir name like this, and must not fail
    for rel in tree(dest):
        benchmark, _, model, run_id = rel.split("/")[1].split("_")
        assert benchmark == "add" and model in ("Qwen3-1.7B-Base", "Qwen3-1.7B")
        assert int(rel.split("/")[1].split("_")[3]) == int(run_id)
    assert not [p for p in dest.rglob(".*")], "no temp dirs left behind"


def test_reexport_replaces_and_is_idempotent(run, tmp_path):
    loaded, work, _ = run
    dest = tmp_path / "ptb"
    (dest / "codex_gpt-5.2_10h" / "gsm8k_Qwen_Qwen3-4B-Base_77").mkdir(parents=True)  # PostTrainBench's own run
    export_posttrainbench(loaded.cfg, loaded.layout, dest, workdir=work, site=loaded.site)
    first = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file() and not p.is_symlink()}
    metrics = dest / "baseline_zeroshot" / "add_Qwen_Qwen3-1.7B-Base_1001" / "metrics.json"
    metrics.write_text("stale")
    (metrics.parent / "leftover.txt").write_text("from an earlier export")
    stale = dest / "trl-sft_sft_0h" / ".add_Qwen_Qwen3-1.7B-Base_0.ptflow-export-dead"
    stale.mkdir()  # an export killed mid-way
    export_posttrainbench(loaded.cfg, loaded.layout, dest, workdir=work, site=loaded.site)
    again = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file() and not p.is_symlink()}
    assert again == first, "the run dir is replaced whole: same files, same bytes"
    assert not stale.exists()
    assert (dest / "codex_gpt-5.2_10h" / "gsm8k_Qwen_Qwen3-4B-Base_77").is_dir(), "other run dirs are left alone"


def test_site_with_several_gpus_adds_the_gpu_suffix(run, tmp_path):
    loaded, work, _ = run
    loaded.site.raw["agent_resources"] = {"cli-agent": {"gpus": 4}}
    summary = export_posttrainbench(loaded.cfg, loaded.layout, tmp_path / "ptb", workdir=work, site=loaded.site)
    assert "claude_claude-opus-4-5_10h_4gpu_run1" in summary.methods and "trl-sft_sft_0h" in summary.methods


def test_unevaluated_cells_are_skipped_and_said(run, tmp_path):
    loaded, work, _ = run
    (cell_dir(work / "results", BASE, "add", "sft") / "eval.json").unlink()
    summary = export_posttrainbench(loaded.cfg, loaded.layout, tmp_path / "ptb", workdir=work, site=loaded.site)
    assert summary.skipped == ["Qwen--Qwen3-1.7B-Base/add/sft: no eval.json yet (not evaluated)"]
    assert "trl-sft_sft_0h" not in summary.methods
    assert summary.lines()[-1].startswith("exported 4 run dir(s) into ")


@pytest.mark.parametrize(
    "models, named",
    [
        ([{"id": "org/tiny_model", "source": "local", "tiny": {"layers": 1, "hidden": 8, "heads": 2, "seed": 0}}],
         "'org/tiny_model' contains '_'"),
        ([{"id": "Qwen/Qwen3-1.7B-Base", "source": "hub", "revision": "main", "instruct": "Qwen/Qwen3_1.7B"}],
         "'Qwen/Qwen3_1.7B' contains '_'"),
        ([{"id": "tinymodel", "source": "local", "tiny": {"layers": 1, "hidden": 8, "heads": 2, "seed": 0}}],
         "'tinymodel' has no 'org/' part"),
    ],
    ids=["base", "instruct-counterpart", "no-org"],
)  # fmt: skip
def test_a_model_id_the_aggregation_cannot_split_is_refused(default_raw, tmp_path, models, named):
    raw = config(default_raw, models=models)
    if not any("instruct" in m for m in models):
        raw["agents"] = [a for a in raw["agents"] if a["kind"] != "instruct"]
        raw["scoring"] = {"weights": {"add": 1.0}}
    loaded = resolve(raw, REPO, tmp_path)
    with pytest.raises(ExportError) as info:
        export_posttrainbench(loaded.cfg, loaded.layout, tmp_path / "ptb", workdir=tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and named in msg and "model id" in msg
    assert not (tmp_path / "ptb").exists(), "refused before anything is written"


def test_an_eval_id_with_underscore_is_refused(default_raw, tmp_path):
    raw = config(default_raw)
    raw["evals"][0]["id"] = "add_2digit"
    loaded = resolve(raw, REPO, tmp_path)
    with pytest.raises(ExportError, match="eval id 'add_2digit' contains '_'"):
        export_posttrainbench(loaded.cfg, loaded.layout, tmp_path / "ptb", workdir=tmp_path)


def test_two_agents_with_one_method_name_are_refused(default_raw, tmp_path):
    raw = config(default_raw)
    raw["agents"][3]["repeats"] = 1
    raw["agents"].append({**raw["agents"][3], "id": "opus-again"})
    loaded = resolve(raw, REPO, tmp_path)
    for slot in ("opus", "opus-again"):
        write_cell(tmp_path / "results", BASE, "add", slot, 0.6, agent_run={"time_taken": 10.0, "hours": 10})
    with pytest.raises(ExportError, match=r"opus and .*opus-again would both be claude_claude-opus-4-5_10h/"):
        export_posttrainbench(loaded.cfg, loaded.layout, tmp_path / "ptb", workdir=tmp_path)


def test_cli_export_command(run, tmp_path, capsys):
    loaded, work, _ = run
    configfile = tmp_path / "run.yaml"
    configfile.write_text(json.dumps(loaded.cfg.raw))  # YAML reads JSON
    rc = cli.main(["export", "--posttrainbench", str(tmp_path / "ptb"), "--configfile", str(configfile), "-d",
                   str(work)])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"exported 5 run dir(s) into {tmp_path / 'ptb'}: baseline_zeroshot (2)" in out
    assert (tmp_path / "ptb" / "trl-sft_sft_0h" / "add_Qwen_Qwen3-1.7B-Base_0" / "metrics.json").is_file()


def test_a_key_value_in_a_runs_files_is_exported_masked(run, tmp_path, monkeypatch):
    """A run written before ptflow masked captured output (or any file that still holds a key): the export copies
    it through the masker, with the key values of the environment it runs in."""
    loaded, work, _ = run
    key = "sk-ant-" + os.urandom(12).hex()
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    trace = cell_dir(work / "results", BASE, "add", "opus") / "agent"
    (trace / "stdout.log").write_bytes(b'{"type": "result"}\n' + key.encode() + b"\n\xff binary\n")
    dest = tmp_path / "ptb"
    export_posttrainbench(loaded.cfg, loaded.layout, dest, workdir=work, site=loaded.site)
    solve_out = dest / "claude_claude-opus-4-5_10h_run1/add_Qwen_Qwen3-1.7B-Base_2001/solve_out.txt"
    assert solve_out.read_bytes() == b'{"type": "result"}\n***\n\xff binary\n'
    assert not [p for p in dest.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]


# ---- evaluation seeds ----

SEEDS = [72332, 87681, 38992]  # PostTrainBench's final-evaluation seeds (its first three)


def write_seeded_cell(results: Path, slot: str, mean: float, stderr: float | None, seeds: dict) -> Path:
    """A seeded eval's cell as rules evaluate_seed and seed_mean write it: ``seeds/<seed>/eval.json`` per evaluated
    seed (its eval.json with ``seed`` and ``stage``) or a skip record, and the cell's eval.json with the mean and
    ``seeds``. ``seeds``: seed -> (value, stderr, stage) for a scored seed, "eval_failed" or "skipped"."""
    cell = cell_dir(results, BASE, "add", slot)
    per_seed = {}
    for seed, outcome in seeds.items():
        rel = f"seeds/{seed}/eval.json"
        if outcome == "skipped":
            record = {"model": BASE, "eval": "add", "agent": slot, "seed": seed, "status": "skipped",
                      "why": "the model is decoded greedily and this eval's seed only drives sampling"}  # fmt: skip
            per_seed[str(seed)] = {"status": "skipped", "why": record["why"], "eval_json": rel}
        else:
            scratch = results.parent / "seed-scratch" / str(seed)
            value, seed_stderr, stage = outcome if outcome != "eval_failed" else (None, None, None)
            status = "eval_failed" if outcome == "eval_failed" else None
            made = write_cell(scratch, BASE, "add", slot, value, stderr=seed_stderr, shape="headline", status=status)
            record = {**json.loads(made.read_text()), "seed": seed, **({"stage": stage} if value is not None else {})}
            per_seed[str(seed)] = {"status": record["status"], "eval_json": rel}
            if value is not None:
                per_seed[str(seed)] |= {"stage": stage, "value": value, "stderr": seed_stderr}
        (cell / "seeds" / str(seed)).mkdir(parents=True)
        (cell / rel).write_text(json.dumps(record, indent=2))
    eval_json = write_cell(results, BASE, "add", slot, mean, stderr=stderr, shape="headline")
    data = json.loads(eval_json.read_text())
    data["inspect_log"] = f"seeds/{next(iter(seeds))}/inspect/add.eval"
    data["seeds"] = {"num_seeds": len(seeds), "num_seeds_succeeded": sum(isinstance(o, tuple) for o in seeds.values()),
                     "per_seed": per_seed, "decoding": "sampling"}  # fmt: skip
    eval_json.write_text(json.dumps(data, indent=2))
    return eval_json


@pytest.fixture
def seeded(tmp_path, default_raw):
    """The add eval with three seeds: sft sampled (two seeds scored at the ladder's stage 1, the third failed every
    stage), the baseline decoded greedily (its first seed only, scored at stage 0 without a stderr)."""
    raw = config(default_raw)
    raw["evals"][0]["seeds"] = SEEDS
    loaded = resolve(raw, REPO, tmp_path)
    results = tmp_path / "results"
    sft = {72332: (0.25, 0.02, 1), 87681: (0.75, 0.04, 1), 38992: "eval_failed"}
    write_seeded_cell(results, "sft", 0.5, 0.03, sft)
    write_manifest(tmp_path, "sft")
    write_seeded_cell(results, "baseline", 0.2, None, {72332: (0.2, None, 0), 87681: "skipped", 38992: "skipped"})
    return loaded, tmp_path


# aggregate_seed_metrics.py's metrics.json, written out by hand: the mean of accuracy and stderr over the seeds that
# succeeded, the seeds attempted and succeeded, and each succeeded seed's stage and metrics.json (json.dump, indent=2)
SFT_METRICS = """{
  "accuracy": 0.5,
  "stderr": 0.03,
  "num_seeds": 3,
  "num_seeds_succeeded": 2,
  "per_seed": {
    "72332": {
      "max_tokens_stage": 1,
      "metrics": {
        "accuracy": 0.25,
        "stderr": 0.02
      }
    },
    "87681": {
      "max_tokens_stage": 1,
      "metrics": {
        "accuracy": 0.75,
        "stderr": 0.04
      }
    }
  }
}
"""
# a greedy model: run_final_eval.sh attempts its first seed only; a stderr that is no number is not averaged
BASELINE_METRICS = """{
  "accuracy": 0.2,
  "num_seeds": 1,
  "num_seeds_succeeded": 1,
  "per_seed": {
    "72332": {
      "max_tokens_stage": 0,
      "metrics": {
        "accuracy": 0.2,
        "stderr": null
      }
    }
  }
}
"""


def test_a_seeded_cell_is_exported_as_posttrainbenchs_final_evaluation_writes_it(seeded, tmp_path):
    loaded, work = seeded
    dest = tmp_path / "ptb"
    summary = export_posttrainbench(loaded.cfg, loaded.layout, dest, workdir=work, site=loaded.site)
    sft, base = dest / "trl-sft_sft_0h/add_Qwen_Qwen3-1.7B-Base_4242", dest / "baseline_zeroshot"
    base = base / "add_Qwen_Qwen3-1.7B-Base_4242"
    assert sorted(r.rel for r in summary.runs) == [f"{base.parent.name}/{base.name}", f"{sft.parent.name}/{sft.name}"]
    # metrics_seed<S>.json beside metrics.json for each seed that succeeded, as run_final_eval.sh leaves them
    assert sorted(p.name for p in sft.iterdir()) == [
        "final_model", "metrics.json", "metrics_seed72332.json", "metrics_seed87681.json", "time_taken.txt",
    ]  # fmt: skip
    assert (sft / "metrics.json").read_text() == SFT_METRICS
    assert (sft / "metrics_seed72332.json").read_text() == '{\n  "accuracy": 0.25,\n  "stderr": 0.02\n}\n'
    assert (sft / "metrics_seed87681.json").read_text() == '{\n  "accuracy": 0.75,\n  "stderr": 0.04\n}\n'
    assert sorted(p.name for p in base.iterdir()) == [
        "eval.txt", "metrics.json", "metrics_seed72332.json", "model.txt", "time_taken.txt",
    ]  # fmt: skip
    assert (base / "metrics.json").read_text() == BASELINE_METRICS
    assert (base / "metrics_seed72332.json").read_text() == '{\n  "accuracy": 0.2,\n  "stderr": null\n}\n'

    # the FIXTURE checkout's aggregate_methods.py reads the run dirs: metrics.json's accuracy, the cell's mean
    scripts = tmp_path / "checkout" / "scripts"
    scripts.mkdir(parents=True)
    (scripts / "aggregate_methods.py").write_text(AGGREGATE_METHODS_PY)
    env = {**os.environ, "POST_TRAIN_BENCH_RESULTS_DIR": str(dest)}
    proc = subprocess.run([sys.executable, "scripts/aggregate_methods.py"], cwd=scripts.parent, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (dest / "aggregated_trl-sft_sft_0h.csv").read_text().splitlines() == ["model,add", "Qwen3-1.7B-Base,0.5"]
    assert (dest / "aggregated_baseline_zeroshot.csv").read_text().splitlines() == ["model,add", "Qwen3-1.7B-Base,0.2"]


def test_a_seed_file_deleted_to_rerun_it_exports_the_cells_record_of_it(seeded, tmp_path):
    """Deleting one seed's file is how a user evaluates that seed again: until it is back, the cell's eval.json
    (which seed_mean made from it) still holds that seed's value, stderr and stage, and the export takes them."""
    loaded, work = seeded
    shutil.rmtree(cell_dir(work / "results", BASE, "add", "sft") / "seeds" / "87681")
    dest = tmp_path / "ptb"
    export_posttrainbench(loaded.cfg, loaded.layout, dest, workdir=work, site=loaded.site)
    assert (dest / "trl-sft_sft_0h/add_Qwen_Qwen3-1.7B-Base_4242/metrics.json").read_text() == SFT_METRICS


def test_a_seeded_cell_whose_first_seed_failed_gets_no_metrics(seeded, tmp_path):
    """run_final_eval.sh writes no metrics.json when the first seed fails every stage (the cell is its baseline)."""
    loaded, work = seeded
    results = work / "results"
    shutil.rmtree(cell_dir(results, BASE, "add", "sft") / "seeds")
    write_seeded_cell(results, "sft", None, None, {72332: "eval_failed", 87681: "skipped", 38992: "skipped"})
    eval_json = cell_dir(results, BASE, "add", "sft") / "eval.json"
    data = json.loads(eval_json.read_text())
    eval_json.write_text(json.dumps({**data, "status": "eval_failed"}))
    dest = tmp_path / "ptb"
    export_posttrainbench(loaded.cfg, loaded.layout, dest, workdir=work, site=loaded.site)
    assert sorted(p.name for p in (dest / "trl-sft_sft_0h/add_Qwen_Qwen3-1.7B-Base_4242").iterdir()) == [
        "final_model", "time_taken.txt",
    ]  # fmt: skip
