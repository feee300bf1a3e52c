"""The evaluation layer's fast parts: task resolution and its refusals, config validation of evals, the retry
classification, the vLLM call as text, chat templates, data-source bookkeeping (missing-data report, URL fetch,
resources.json), and Arena-Hard's verdict arithmetic. No model runs here
(tests/e2e/test_posttrainbench_offline.py and tests/integration/test_evals_ladder.py run them)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import http.server
import importlib
import json
import random
import threading
import time
from pathlib import Path

import pytest

from ptflow.config import tasks as catalog
from ptflow.config.entries import eval_from_entry
from ptflow.config.matrix import build_config
from ptflow.config.validate import ConfigError
from ptflow.specs import EvalCall
from ptflow.stages.evaluate.kit import evaluate as kit
from ptflow.stages.evaluate.run import EvalCaches, EvalConfigError, budget_ladder, check_call, evaluate
from ptflow.stages.evaluate.settings import Provider, build_call
from ptflow.stages.evaluate.sources import (
    DataFetchError,
    fetch_sources,
    fetch_url,
    missing_sources,
    parse_resources_json,
)

KIT_DIR = Path(kit.__file__).parent


def model_dir(tmp_path: Path, model_type: str, template: str | None = None) -> Path:
    """A model directory's config files only (what the kit reads to pick a chat template)."""
    path = tmp_path / f"model-{model_type}"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": ["X"]}))
    tok = {"tokenizer_class": "PreTrainedTokenizerFast", **({"chat_template": template} if template else {})}
    (path / "tokenizer_config.json").write_text(json.dumps(tok))
    return path


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text, repr(text)
    return text


# --- task resolution ---------------------------------------------------------------------------------------------


def call_of(entry: dict, provider: Provider | None = None) -> EvalCall:
    return build_call(eval_from_entry({"max_new_tokens": 64, **entry}), provider or Provider())


def settings_of(entry: dict, provider: Provider | None = None) -> dict:
    """The kit's settings document of an eval entry (what evaluate_settings.json holds), which the kit reads."""
    return call_of(entry, provider).to_params()


def test_unknown_registry_task_fails_at_once_with_one_line():
    call = call_of({"id": "custom", "task": "inspect_evals/no_such_task"})
    t0 = time.time()
    with pytest.raises(EvalConfigError) as err:
        check_call(call)
    assert "no such task in inspect's registry" in one_line(err.value)
    assert time.time() - t0 < 30  # no retries, no backoff (the first registry load is the only cost)


def test_evaluate_refuses_unknown_task_before_touching_data_or_model(tmp_path):
    call = call_of({"id": "custom", "task": "inspect_evals/no_such_task"})
    with pytest.raises(EvalConfigError, match="no such task"):
        evaluate(call, tmp_path / "none", tmp_path / "logs", EvalCaches(tmp_path / "hf", tmp_path / "c"))
    assert not (tmp_path / "logs").exists()


def test_unknown_task_argument_is_refused():
    with pytest.raises(EvalConfigError) as err:
        check_call(call_of({"id": "gsm8k", "task": "inspect_evals/gsm8k", "task_args": {"few_shot": 3}}))
    assert "unknown task argument(s) ['few_shot']" in one_line(err.value)


def test_missing_grader_key_fails_at_once_naming_the_variable(monkeypatch):
    monkeypatch.delenv("PTFLOW_TEST_GRADER_KEY", raising=False)
    grader = {"model": "openai/gpt-5-mini", "keys": ["PTFLOW_TEST_GRADER_KEY"]}
    call = call_of({"id": "healthbench", "task": "inspect_evals/healthbench", "grader": grader})
    with pytest.raises(EvalConfigError) as err:
        check_call(call)
    assert "PTFLOW_TEST_GRADER_KEY" in one_line(err.value)
    check_call(call, env={"PTFLOW_TEST_GRADER_KEY": "sk-not-a-real-key"})  # present: accepted
    check_call(call, keys=False)  # preflight checks keys with the others (check_secrets)


def test_every_known_task_resolves_and_takes_its_grader_argument():
    for spec, facts in catalog.TASKS.items():
        fn = kit.task_function(spec)
        assert callable(fn), spec
        if facts.grader_arg:
            assert facts.grader_arg in __import__("inspect").signature(fn).parameters, spec
    assert sorted(kit._load_own_tasks().TASKS) == sorted(catalog.OWN_TASKS)


def test_kit_files_do_not_import_ptflow():
    """The kit is copied beside an agent's model and must run where only inspect is installed (the toy task's
    lazy import of ptflow, inside a function, is the one exception)."""
    for path in (KIT_DIR / "evaluate.py", KIT_DIR / "ptflow_tasks.py"):
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        names = [a.name for n in top for a in n.names] + [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.startswith("ptflow")], (path, names)


# --- config: an eval's evaluation settings ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "expect"),
    [
        ({"task": "gsm8k"}, "not a task spec; use <package>/<task> (e.g. inspect_evals/gsm8k)"),
        ({"task": "ptflow/nope"}, "ptflow has no task 'nope'; its tasks are arenahardwriting, gpqamain"),
        ({"task": "evals/x.txt@t"}, "a file task is <file>.py@<task function>"),
        ({"task": "inspect_evals/gsm8k", "max_new_tokens": 100, "retry_max_new_tokens": [100]}, "falling order"),
        ({"task": "inspect_evals/healthbench"}, "is graded by an LLM; add grader"),
        ({"task": "inspect_evals/gsm8k", "grader": {"model": "openai/x"}}, "takes no grader ptflow knows of"),
        (
            {"task": "inspect_evals/healthbench", "grader": {"model": "m", "model_args": {"api_key": "x"}}},
            "api_key looks like a secret",
        ),
        ({"task": "inspect_evals/healthbench", "grader": {"model": "m"}, "task_args": {"subset": "x"}}, "subset"),
        ({"task": "ptflow/arenahardwriting", "grader": {"model": "m"}, "task_args": {"baseline": "x"}}, "ships"),
        (
            {"task": "ptflow/arenahardwriting", "grader": {"model": "m"}, "task_args": {"judge_model": "m"}},
            "the grader comes from grader.model",
        ),
    ],
)
def test_eval_settings_refused_with_one_line(entry, expect):
    with pytest.raises(ConfigError) as err:
        eval_from_entry({"id": "e", "max_new_tokens": 64, **entry})
    assert expect in one_line(err.value) and "config error at evals[0]" in str(err.value)


@pytest.mark.parametrize(
    ("key", "value", "expect"),
    [
        ("limit", 0, "too small"),
        ("sampling", {"temperature": 0}, "must be 'greedy' or a mapping of temperature"),
        ("sampling", "hot", "must be 'greedy' or a mapping"),
        ("retry_max_new_tokens", [10, 8, 6], "is too long"),
        ("grader", {"keys": ["X"]}, "'model' is a required property"),
        ("grader", {"model": "m", "keys": ["lower"]}, "does not match"),
    ],
)
def test_eval_keys_checked_by_the_schema(default_raw, key, value, expect):
    default_raw["evals"][0][key] = value
    with pytest.raises(ConfigError) as err:
        build_config(default_raw)
    assert expect in one_line(err.value) and f"evals[0].{key}" in str(err.value)


def test_site_refuses_vllm_without_gpus(tmp_path):
    from ptflow.config.sites import load_site

    site = tmp_path / "s.yaml"
    site.write_text("name: s\nscheduler: local\nevaluation: {provider: vllm}\nresources:\n  default: {threads: 1}\n")
    with pytest.raises(ConfigError) as err:
        load_site(str(site), tmp_path)
    assert "'vllm' needs GPUs" in one_line(err.value)


# --- retry ladder --------------------------------------------------------------------------------------------


def test_budget_ladder_is_posttrainbench_s():
    assert budget_ladder(16384, (12288, 8192)) == [16384] * 4 + [12288] * 3 + [8192] * 2
    assert budget_ladder(4096, ()) == [4096] * 4
    # a later evaluation seed starts at the stage where the first seed succeeded (run_final_eval.sh)
    assert budget_ladder(16384, (12288, 8192), start_stage=1) == [12288] * 3 + [8192] * 2
    assert budget_ladder(16384, (12288, 8192), start_stage=2) == [8192] * 2


def _context_error():
    from tests.support.ladder_tasks import context_length_error

    return context_length_error(9000, 8192)


def test_failure_kind_is_decided_by_exception_type():
    import torch

    assert kit.failure_kind(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")) == "memory"
    assert kit.failure_kind(MemoryError()) == "memory"
    assert kit.failure_kind(_context_error()) == "context"
    # wrapped: inspect runs samples in task groups; libraries chain their own errors
    assert kit.failure_kind(ExceptionGroup("eval", [ValueError("x"), torch.OutOfMemoryError("oom")])) == "memory"
    try:
        try:
            raise torch.OutOfMemoryError("oom")
        except torch.OutOfMemoryError as inner:
            raise RuntimeError("generation failed") from inner
    except RuntimeError as outer:
        assert kit.failure_kind(outer) == "memory"
    # not budget-curable: a missing dataset, a bad task, and words alone (no message matching)
    assert kit.failure_kind(FileNotFoundError("no dataset")) is None
    assert kit.failure_kind(ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub")) is None
    assert kit.failure_kind(kit.TaskSpecError("bad")) is None
    assert kit.failure_kind(RuntimeError("CUDA out of memory; maximum context length")) is None


# --- the call as text (vLLM cannot run here) -------------------------------------------------------------------


def test_vllm_call_as_text_for_a_base_llama_without_template(tmp_path):
    model = model_dir(tmp_path, "llama")
    raw = {"id": "bfcl", "task": "inspect_evals/bfcl", "max_new_tokens": 4096, "limit": 100, "max_connections": 6,
           "sampling": "greedy", "task_args": {"categories": ["simple_python", "multiple"]}}  # fmt: skip
    call = settings_of(raw, Provider(kind="vllm", device="cuda:0", gpus=2, gpu_memory_utilization=0.8))
    argv = kit.inspect_argv(call, model, 4096, "logs")
    template = KIT_DIR / "templates" / "llama3.jinja"
    assert argv == [
        "inspect", "eval", "inspect_evals/bfcl", "--model", f"vllm/{model.resolve()}",
        "-M", f"chat_template={template}",
        "-M", "enable_auto_tool_choice=null",
        "-M", "gpu_memory_utilization=0.8",
        "-M", "tensor_parallel_size=2",
        "-M", "tool_call_parser=llama3_json",
        "-T", 'categories=["simple_python", "multiple"]',
        "--log-dir", "logs", "--log-format", "eval", "--display", "none", "--no-log-realtime",
        "--no-score-display", "--max-tokens", "4096", "--temperature", "0.0", "--limit", "100",
        "--max-connections", "6",
    ]  # fmt: skip
    # inspect's own CLI parser accepts it, and the -M / -T values read back as the Python call's
    from inspect_ai._cli.eval import eval_command
    from inspect_ai._cli.util import parse_cli_args

    ctx = eval_command.make_context("eval", argv[2:])
    assert ctx.params["max_tokens"] == 4096 and ctx.params["model"] == f"vllm/{model.resolve()}"
    assert parse_cli_args(ctx.params["m"]) == kit.eval_kwargs(call, model, 4096, "logs")["model_args"]
    assert parse_cli_args(ctx.params["t"]) == call["task_args"]


def test_vllm_call_for_own_tasks_and_api_graders(tmp_path):
    model = model_dir(tmp_path, "qwen3", template="{{ messages }}")
    raw = {"id": "arenahardwriting", "task": "ptflow/arenahardwriting",
           "grader": {"model": "openai/gpt-5-mini", "keys": ["OPENAI_API_KEY"]}}  # fmt: skip
    call = settings_of(raw, Provider(kind="vllm", device="cuda:0", gpus=1))
    argv = kit.inspect_argv(call, model, 8192, "logs")
    assert argv[2] == f"{KIT_DIR / 'ptflow_tasks.py'}@arenahardwriting"
    assert ["-T", "judge_model=openai/gpt-5-mini"] == argv[argv.index("-T") : argv.index("-T") + 2]
    assert not any(a.startswith("chat_template=") for a in argv)  # qwen ships its own template
    assert "OPENAI_API_KEY" not in " ".join(argv)  # key names and values stay out of argv


def test_chat_template_policies(tmp_path):
    own = model_dir(tmp_path, "gemma3", template="{{ x }}")
    bare = model_dir(tmp_path, "smollm3")
    qwen_bare = model_dir(tmp_path, "qwen2")
    call = {"provider": "vllm", "chat_template_policy": "if_missing"}
    assert kit.chat_template_for(call, own) is None
    assert kit.chat_template_for(call, bare) == str(KIT_DIR / "templates" / "smollm3.jinja")
    with pytest.raises(ValueError, match="no chat template and its family"):
        kit.chat_template_for(call, qwen_bare)
    always = {**call, "chat_template_policy": "always"}
    assert kit.chat_template_for(always, own) == str(KIT_DIR / "templates" / "gemma3.jinja")
    hf_call = settings_of(
        {"id": "gsm8k", "task": "inspect_evals/gsm8k", "sampling": "greedy"}, Provider(device="cuda:0")
    )
    name, args = kit.model_spec(hf_call, bare)
    assert name == f"hf/{bare.resolve()}" and args["device"] == "cuda:0" and args["do_sample"] is False
    assert args["chat_template"].startswith("{#- ptflow's SmolLM3")  # the hf provider takes the template's text


def test_hf_on_a_gpu_allocation_uses_the_gpus_the_job_sees(tmp_path, capsys):
    """hf on a site whose evaluate request has GPUs: device "cuda" = the allocation's devices, resolved where the
    evaluation runs. This machine has no CUDA (as the Slurm test cluster's placeholder GPUs): cpu, said on stderr."""
    import torch

    hf_call = settings_of({"id": "gsm8k", "task": "inspect_evals/gsm8k"}, Provider(device="cuda", gpus=1))
    assert hf_call["model_args"] == {"device": "cuda"}
    _, args = kit.model_spec(hf_call, model_dir(tmp_path, "llama", template="{{ x }}"))
    expected = ("cuda:0" if torch.cuda.device_count() == 1 else "auto") if torch.cuda.is_available() else "cpu"
    assert args["device"] == expected
    if expected == "cpu":
        assert "CUDA sees none here" in capsys.readouterr().err


@pytest.mark.parametrize("family", sorted(kit.FAMILY_TEMPLATES))
def test_family_templates_render_conversations_and_tools(family):
    from ptflow.stages.tiny_model import build_char_tokenizer

    tok = build_char_tokenizer(["x"])
    template = (KIT_DIR / "templates" / kit.FAMILY_TEMPLATES[family]).read_text()
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Add 1 and 2."},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "add", "arguments": {"a": 1}}}]},
        {"role": "tool", "content": "3"},
        {"role": "assistant", "content": "It is 3."},
        {"role": "user", "content": "Thanks"},
    ]
    text = tok.apply_chat_template(messages, chat_template=template, tokenize=False, add_generation_prompt=True,
                                   tools=tools)  # fmt: skip
    for part in ("Be brief.", "Add 1 and 2.", '"name": "add"', "It is 3.", "Thanks"):
        assert part in text, (family, part)
    prompt = {
        "llama": "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "gemma": "<start_of_turn>model\n",
        "smollm": "<|im_start|>assistant\n",
    }
    assert text.endswith(prompt[family]), text[-80:]


# --- data sources ------------------------------------------------------------------------------------------------


def test_missing_data_report_names_each_piece(tmp_path):
    hf_home, cache = tmp_path / "hf", tmp_path / "cache"
    report = {
        e: missing_sources(catalog.sources_for(spec, args), hf_home, cache)
        for e, spec, args in [
            ("gsm8k", "inspect_evals/gsm8k", {}), ("aime2025", "inspect_evals/aime2025", {}),
            ("humaneval", "inspect_evals/humaneval", {}), ("gpqamain", "ptflow/gpqamain", {}),
            ("healthbench", "inspect_evals/healthbench", {}),
            ("bfcl", "inspect_evals/bfcl", {"categories": ["simple_python", "multi_turn_base"]}),
            ("arenahardwriting", "ptflow/arenahardwriting", {}),
        ]
    }  # fmt: skip
    for eval_id, lines in report.items():
        assert lines, eval_id
        for line in lines:
            assert "\n" not in line and line.startswith("missing ") and "cache stage" in line, line
    assert len(report["gsm8k"]) == 1 and "openai/gsm8k data_dir main splits test,train @cc7b047b" in report["gsm8k"][0]
    assert "math-ai/aime25" in report["aime2025"][0] and "563bb840" in report["aime2025"][0]
    assert "openai/openai_humaneval" in report["humaneval"][0] and "7dce6050" in report["humaneval"][0]
    assert "Idavidrein/gpqa config gpqa_main" in report["gpqamain"][0] and "HF_TOKEN" in report["gpqamain"][0]
    assert "healthbench/full_c37d29dcb36dd46fd8b36341c84a8d06.jsonl" in report["healthbench"][0]
    bfcl = " ".join(report["bfcl"])
    assert "BFCL_v4_simple_python.json" in bfcl and "func_source_code" in bfcl and len(report["bfcl"]) == 2
    arena = report["arenahardwriting"]
    assert len(arena) == 2 and "question.jsonl" in arena[0] and "Qwen3-1.7B.jsonl" in arena[1]


def test_cache_names_match_inspect_evals():
    from inspect_evals.healthbench.dataset import DATASET_URLS
    from inspect_evals.utils.load_dataset import get_cached_fname

    assert catalog.HEALTHBENCH_URLS == DATASET_URLS
    for subset, url in DATASET_URLS.items():
        assert catalog.inspect_evals_cache_name(url, subset) == get_cached_fname(url, subset)


def test_catalog_pins_match_inspect_evals():
    # The modules, not the same-named task functions their packages export.
    aime, bfcl, gsm8k, humaneval = (
        importlib.import_module(f"inspect_evals.{name}.{name}") for name in ("aime2025", "bfcl", "gsm8k", "humaneval")
    )

    assert catalog.GSM8K == (gsm8k.DATASET_PATH, gsm8k.GSM8K_DATASET_REVISION)
    assert catalog.AIME2025 == (aime.DATASET_PATH, aime.AIME2025_DATASET_REVISION)
    assert catalog.HUMANEVAL == (humaneval.DATASET_PATH, humaneval.HUMANEVAL_DATASET_REVISION)
    assert (catalog.BFCL_REPO, catalog.BFCL_COMMIT) == (bfcl.GITHUB_REPO_URL, bfcl.BFCL_GITHUB_COMMIT)
    assert (catalog.BFCL_DATA_PATH, catalog.BFCL_FUNC_SOURCE_PATH) == (
        bfcl.GITHUB_DATA_PATH,
        bfcl.GITHUB_FUNC_SOURCE_PATH,
    )
    own = kit._load_own_tasks()
    assert catalog.GPQA[1] == own.GPQA_REVISION and catalog.ARENA_SUBDIR == own.ARENA_DATA_SUBDIR


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def file_server(tmp_path):
    """A plain local HTTP file server (the URL fetch is real; only the host is local)."""
    root = tmp_path / "served"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietFiles, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetch_url_checks_the_pinned_sha256(file_server, tmp_path):
    root, url = file_server
    (root / "q.jsonl").write_bytes(b'{"uid": "a"}\n')
    good = hashlib.sha256(b'{"uid": "a"}\n').hexdigest()
    cache = tmp_path / "cache"
    dest = fetch_url(catalog.URLFile(f"{url}/q.jsonl", "x/q.jsonl", good), cache)
    assert dest == cache / "x/q.jsonl" and dest.read_bytes() == b'{"uid": "a"}\n'
    with pytest.raises(DataFetchError) as err:
        fetch_url(catalog.URLFile(f"{url}/q.jsonl", "y/q.jsonl", "0" * 64), cache)
    assert "upstream changed" in one_line(err.value)
    assert not list((cache / "y").iterdir())  # nothing half-written left behind
    with pytest.raises(DataFetchError, match="download failed"):
        fetch_url(catalog.URLFile(f"{url}/absent.jsonl", "z/a.jsonl"), cache)


def test_gated_dataset_fetch_needs_hf_token(tmp_path):
    gpqa = catalog.sources_for("ptflow/gpqamain")
    with pytest.raises(DataFetchError) as err:
        fetch_sources(gpqa, tmp_path / "hf", tmp_path / "c", env={"PATH": "/usr/bin"})
    assert "Idavidrein/gpqa is gated: set HF_TOKEN" in one_line(err.value)


def test_resources_json_parsing(tmp_path):
    path = tmp_path / "resources.json"
    path.write_text(json.dumps({
        "models": ["Qwen/Qwen3-4B-Base", "google/gemma-3-4b-pt"],
        "datasets": [
            {"dataset": "openai/gsm8k", "config": "main", "splits": ["train", "test"]},
            {"dataset": "Idavidrein/gpqa", "configs": ["gpqa_diamond", "gpqa_main"], "splits": ["train"]},
            {"dataset": "tatsu-lab/alpaca"},
            {"dataset": "allenai/ai2_arc", "config": "default", "splits": ["test"]},
        ],
    }))  # fmt: skip
    sources = parse_resources_json(path)
    assert sources[:2] == [catalog.HFModel("Qwen/Qwen3-4B-Base"), catalog.HFModel("google/gemma-3-4b-pt")]
    assert sources[2:] == [
        catalog.HFDataset("openai/gsm8k", None, ("train", "test"), name="main"),
        catalog.HFDataset("Idavidrein/gpqa", None, ("train",), name="gpqa_diamond"),
        catalog.HFDataset("Idavidrein/gpqa", None, ("train",), name="gpqa_main"),
        catalog.HFDataset("tatsu-lab/alpaca", None, (None,)),
        catalog.HFDataset("allenai/ai2_arc", None, ("test",)),
    ]
    assert sources[5].describe() == "dataset tatsu-lab/alpaca all splits @default-branch (unpinned)"
    for bad, expect in [
        ({"models": ["justaname"]}, "models[0]"),
        ({"datasets": [{"name": "x"}]}, "needs a 'dataset'"),
        ({"datasets": [{"dataset": "a/b", "config": "x", "configs": ["y"]}]}, "not both"),
        ({"datasets": [{"dataset": "a/b", "revison": "x"}]}, "unknown keys ['revison']"),
        ({"model": []}, "expected an object with 'models' and 'datasets'"),
    ]:
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError) as err:
            parse_resources_json(path)
        assert expect in one_line(err.value)


# --- Arena-Hard's arithmetic (ptflow's own task) -------------------------------------------------------------


def test_arena_verdicts_and_winrate():
    own = kit._load_own_tasks()
    assert own.parse_verdict("reasoning... My final verdict is [[B>>A]].") == "B>>A"
    assert own.parse_verdict("first [[A>B]] then [A=B]") == "A>B"  # the double-bracket pattern wins
    assert own.parse_verdict("no label") is None
    # game 1: baseline is A; game 2: candidate is A. Strong verdicts weigh 3.
    assert own.verdict_values("B>>A", candidate_is_a=False) == [1.0, 1.0, 1.0]
    assert own.verdict_values("A>B", candidate_is_a=False) == [0.0]
    assert own.verdict_values("A=B", candidate_is_a=True) == [0.5]
    assert own.verdict_values("B>A", candidate_is_a=True) == [0.0]
    from inspect_ai.scorer import SampleScore, Score

    def sample(battles):
        return SampleScore(score=Score(value=0.0, metadata={"battles": battles} if battles else {}), sample_id="s")

    scores = [sample([1.0, 1.0, 1.0, 0.5]), sample([0.0, 0.0]), sample(None)]
    values = [1.0, 1.0, 1.0, 0.5, 0.0, 0.0]
    mean = sum(values) / 6
    sd = (sum((v - mean) ** 2 for v in values) / 5) ** 0.5
    assert own.winrate()(scores) == pytest.approx(mean)
    assert own.winrate_stderr()(scores) == pytest.approx(sd / 6**0.5)
    assert own.judged()(scores) == 2.0


def test_arena_questions_filtered_and_ordered_as_posttrainbench(tmp_path):
    own = kit._load_own_tasks()
    rows = [{"uid": f"u{i}", "category": "creative_writing" if i % 2 else "hard_prompt", "prompt": f"p{i}"}
            for i in range(10)]  # fmt: skip
    (tmp_path / "question.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "model_answer").mkdir()
    answers = [{"uid": r["uid"], "messages": [{}, {"content": {"answer": f"a-{r['uid']}"}}]} for r in rows]
    (tmp_path / "model_answer" / "B.jsonl").write_text("".join(json.dumps(a) + "\n" for a in answers))
    samples = own.load_arena_samples(tmp_path, "B")
    expected = [r for r in rows if r["category"] == "creative_writing"]
    random.Random(42).shuffle(expected)
    assert [s.id for s in samples] == [r["uid"] for r in expected]
    assert samples[0].target == f"a-{samples[0].id}"
    assert own.limit_repetitions("la\n" * 9 + "end") == "la\n" * 5 + "end"
    assert own.clean_answer("<think>hidden</think> shown") == "shown"


def test_bfcl_git_data_fetched_through_inspect_evals_downloaders(tmp_path):
    """A real sparse git checkout (of a local repository standing in for GitHub) into the BFCL cache layout."""
    from tests.support.evalfixtures import bfcl_git_remote

    repo, commit = bfcl_git_remote(tmp_path)
    sources = [
        dataclasses.replace(s, repo_url=repo, commit=commit)
        for s in catalog.sources_for("inspect_evals/bfcl", {"categories": ["simple_python", "multi_turn_base"]})
    ]
    cache = tmp_path / "cache"
    assert len(missing_sources(sources, tmp_path / "hf", cache)) == 2
    done = fetch_sources(sources, tmp_path / "hf", cache, log=lambda *_: None)
    assert len(done) == 2
    assert missing_sources(sources, tmp_path / "hf", cache) == []
    assert (cache / "BFCL" / "possible_answer" / "BFCL_v4_simple_python.json").is_file()
    assert (cache / "BFCL" / "func_source_code" / "math_api.py").is_file()
    assert not [p for p in cache.rglob("_temp_clone")] and not [p for p in cache.iterdir() if p.name.startswith(".")]


# --- preflight and the cache stage -------------------------------------------------------------------------------


def test_preflight_refuses_a_missing_grader_key_naming_it(monkeypatch):
    from ptflow.cluster.preflight import check_secrets
    from ptflow.config.load import load
    from tests.conftest import REPO

    cfg = load(
        REPO, ["config/posttrainbench-ptflow.yaml"], base_dir=REPO, overrides={"matrix": {"agents": ["baseline"]}}
    ).cfg
    problems = check_secrets(cfg, env={"HF_TOKEN": "t"})
    assert problems == [
        "environment variable OPENAI_API_KEY is not set but the grader of evals arenahardwriting, healthbench needs "
        "it (evals[].grader.keys); export OPENAI_API_KEY before running (or drop those evals from matrix.evals)"
    ]
    assert check_secrets(cfg, env={"HF_TOKEN": "t", "OPENAI_API_KEY": "sk-x"}) == []


def test_cache_resources_fetches_posttrainbench_resources_json_then_finds_it_offline(tmp_path, monkeypatch):
    """A resources.json (PostTrainBench's format) through the cache stage: real downloads from the stand-in hub,
    then the same call with HF_HUB_OFFLINE finds everything and uses no network."""
    from ptflow.stages.cache import cache_resources
    from tests.support.evalfixtures import FIXTURE_HF_TOKEN, standin_repos
    from tests.support.hubstandin import HubStandIn, StandInRepo

    model = StandInRepo("org/tiny-model", "model", "a" * 40, {"config.json": b"{}", "model.safetensors": b"0"})
    resources = tmp_path / "resources.json"
    resources.write_text(json.dumps({
        "models": ["org/tiny-model"],
        "datasets": [{"dataset": "openai/gsm8k", "config": "main", "splits": ["test"]}],
    }))  # fmt: skip
    hf, cache, marker = tmp_path / "hf", tmp_path / "c", tmp_path / "m.json"
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with HubStandIn([*standin_repos(), model]) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_TOKEN", FIXTURE_HF_TOKEN)
        entry = cache_resources(hf, cache, [str(resources)], marker, log=lambda _: None)
    assert entry["fetched"] is True and json.loads(marker.read_text()) == entry
    assert entry["pieces"] == [
        "model org/tiny-model@main",
        "dataset openai/gsm8k config main splits test @default-branch (unpinned)",
    ]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    lines = []
    again = cache_resources(hf, cache, [str(resources)], marker, log=lines.append)
    assert again["fetched"] is False and any("no network used" in line for line in lines)


def test_plan_has_a_cache_job_per_eval_and_for_resources(tmp_path):
    from tests.e2e.smk import REPO, plan

    resources = tmp_path / "resources.json"
    resources.write_text('{"models": [], "datasets": []}')
    extra = tmp_path / "extra.yaml"
    extra.write_text(f"cache_resources: [{resources}]\n")
    jobs = plan(tmp_path, "--configfile", str(REPO / "config" / "posttrainbench-offline.yaml"), str(extra))
    assert len(jobs["cache_eval_data"]) == 7 and len([o for o in jobs["evaluate"] if o.endswith("eval.json")]) == 14
    assert jobs["cache_resources"] == {"results/posttrainbench-offline/cache/resources.json"}


def test_generic_site_evaluates_posttrainbench_on_vllm_as_text(tmp_path, monkeypatch):
    """The provider comes from the site: generic (PostTrainBench's cluster) runs vllm/<checkpoint> on the evaluate
    request's GPU; the agent's kit gets the same provider on its own allocation. vLLM cannot run here: the command
    line is checked as text (and by inspect's own CLI parser in the test above)."""
    from ptflow.config.load import load
    from tests.conftest import REPO

    monkeypatch.setenv("USER", "alice")
    loaded = load(REPO, ["config/posttrainbench-ptflow.yaml"], ["site=generic"], base_dir=REPO)
    provider = Provider.from_site(loaded.site)
    agent = loaded.cfg.agents["claude-opus-4-6"]
    assert provider == Provider.from_site(loaded.site, "train", agent)
    assert (provider.kind, provider.gpus, provider.gpu_memory_utilization) == ("vllm", 1, None)
    call = build_call(loaded.cfg.evals["gsm8k"], provider).to_params()
    model = model_dir(tmp_path, "gemma3")  # a base model without a chat template: gemma's gets forced in
    argv = kit.inspect_argv(call, model, 4000, "logs")
    assert argv == [
        "inspect", "eval", "inspect_evals/gsm8k", "--model", f"vllm/{model.resolve()}",
        "-M", f"chat_template={KIT_DIR / 'templates' / 'gemma3.jinja'}", "-M", "tensor_parallel_size=1",
        "--log-dir", "logs", "--log-format", "eval", "--display", "none", "--no-log-realtime", "--no-score-display",
        "--max-tokens", "4000", "--max-connections", "2",
    ]  # fmt: skip
    local = load(REPO, ["config/posttrainbench-ptflow.yaml"], base_dir=REPO)
    assert Provider.from_site(local.site) == Provider()  # the embedded default: hf on the CPU


def test_the_kits_environment_is_the_jobs_with_the_data_offline_and_this_python_first(tmp_path):
    """child_env, and the warm-start companion built from the same changes (the broker forks the kit's zygote ahead
    from them: a difference would leave it unused)."""
    import os
    import sys

    from ptflow import warmstart
    from ptflow.stages.evaluate.run import child_env, kit_companion
    from ptflow.stages.evaluate.sources import OFFLINE_ENV

    job = {"PATH": "/usr/bin:/bin", "HF_HOME": "/elsewhere", "KEEP": "1"}
    env = child_env(job, tmp_path / "hf", tmp_path / "evals", threads=3)
    assert env["PATH"] == os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin:/bin"])
    assert env["HF_HOME"] == str((tmp_path / "hf").resolve()) and env["KEEP"] == "1"
    assert env["INSPECT_EVALS_CACHE_DIR"] == str((tmp_path / "evals").resolve())
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"
    assert all(env[k] == v for k, v in OFFLINE_ENV.items())
    assert job == {"PATH": "/usr/bin:/bin", "HF_HOME": "/elsewhere", "KEEP": "1"}  # the job's own is unchanged
    companion = kit_companion(tmp_path / "hf", tmp_path / "evals", threads=3)
    assert warmstart.changed_env(job, companion["changes"]) == env
    assert "OMP_NUM_THREADS" not in child_env(job, tmp_path / "hf", tmp_path / "evals")
