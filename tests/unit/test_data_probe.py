"""The data probe (ptflow.stages.posttrainbench.data_probe) runs each evaluate.py in its own dir, up to its model:
``inspect_ai.eval`` builds its tasks and stops, ``datasets.load_dataset`` calls are recorded with their arguments,
and each script gets its own ``evaluation_code`` (PostTrainBench's evals each have one, a namespace package)."""

from __future__ import annotations

import json

from ptflow.stages.posttrainbench.data_probe import PROBE_MODEL, STOPPED_AT_EVAL, probe, probe_env

INSPECT_SCRIPT = """import json, sys
from inspect_ai import Task, eval as inspect_eval
from inspect_ai.dataset import MemoryDataset, Sample
from evaluation_code.which import NAME

assert NAME == "viainspect", NAME  # its own evaluation_code, not the one of the script before it


def build():
    import datasets
    rows = datasets.load_dataset("json", data_files={"test": "rows.jsonl"}, split="test")
    return Task(dataset=MemoryDataset([Sample(input=r["q"], target=r["a"]) for r in rows]), name=NAME)

args = sys.argv[1:]
assert args[args.index("--model-path") + 1].endswith("qwen3-probe") and args[args.index("--limit") + 1] == "-1"
inspect_eval(build(), model="vllm/" + args[args.index("--model-path") + 1])
raise SystemExit("reached the model: the probe did not stop it")
"""
PLAIN_SCRIPT = """import os, sys
from evaluation_code.which import NAME
keys = sorted(k for k in ("OPENAI_API_KEY", "HF_TOKEN") if k in os.environ)
sys.exit(f"evaluate.py: no model at {sys.argv[sys.argv.index('--model-path') + 1]} ({NAME}, sees {keys})")
"""


def test_each_evaluate_py_runs_to_its_model_with_its_own_modules_and_its_loads_recorded(tmp_path):
    evals = {}
    for name, script in (("viainspect", INSPECT_SCRIPT), ("plain", PLAIN_SCRIPT)):
        d = tmp_path / "tasks" / name
        (d / "evaluation_code").mkdir(parents=True)  # no __init__.py: a namespace package, as PostTrainBench's
        (d / "evaluation_code" / "which.py").write_text(f"NAME = {name!r}\n")
        (d / "evaluate.py").write_text(script)
        (d / "rows.jsonl").write_text(json.dumps({"q": "What is 1 + 1?", "a": "2"}) + "\n")
        evals[name] = d
    # the job's environment holds a grader's key: the probe's scripts see HF_TOKEN (gated fetches) and no other
    job = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "sk-fixture", "HF_TOKEN": "hf-fixture"}
    found = probe(evals, tmp_path / "templates", "check", probe_env(job, tmp_path / "hf", tmp_path / "ie", True))
    inspect_run, plain = found["viainspect"], found["plain"]
    assert inspect_run.stopped == STOPPED_AT_EVAL
    ((load),) = inspect_run.loads
    assert load.ok and load.args["path"] == "json" and load.args["split"] == "test"
    assert "rows.jsonl" in load.args["data_files"]
    # each imported its own evaluation_code (the probe runs them in name order: plain, then viainspect)
    assert (
        plain.loads == ()
        and plain.stopped == f"exited \"evaluate.py: no model at {PROBE_MODEL} (plain, sees ['HF_TOKEN'])\""
    )


RETRIED_SCRIPT = """from inspect_evals.utils.huggingface import hf_dataset

hf_dataset(path="openai/gsm8k", data_dir="main", split="test", revision="0" * 40, sample_fields=lambda r: r)
"""


def test_an_offline_miss_is_final_not_retried_by_inspect_evals(tmp_path):
    """inspect_evals retries a failed load (3 tries, waits of up to a minute; 5 where CI is set): offline a miss is
    final, so the probe stops at the first one and records it once, with what the cache holds."""
    d = tmp_path / "tasks" / "gsm8k"
    d.mkdir(parents=True)
    (d / "evaluate.py").write_text(RETRIED_SCRIPT)
    env = {"PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    (found,) = probe({"gsm8k": d}, tmp_path / "templates", "check", env).values()
    assert [ld.args["data_dir"] for ld in found.loads] == ["main"] and not found.loads[0].ok
    assert found.stopped.startswith("stopped at a load the cache does not answer: ")
    assert found.loads[0].cache_holds == ()
