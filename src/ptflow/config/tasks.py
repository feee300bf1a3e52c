"""The evaluation tasks ptflow knows, as data (as ``kinds`` is for agents): the grammar of a task spec, and for each
known task what it must have on disk before an offline GPU job can run it (pinned data sources, derived from its
task arguments), its headline metric, the task argument that takes a grader model and the vLLM arguments it needs
per model family.

Task specs: ``ptflow`` (the embedded default's task over the workflow's test parquet), ``ptflow/<name>`` (ptflow's
own tasks in the evaluation kit: ``gpqamain``, ``arenahardwriting``), ``<file>.py@<name>`` (a task in a file) and
``<package>/<name>`` (inspect's registry, e.g. ``inspect_evals/gsm8k``). A task not listed here still runs: it has
no data ptflow fetches for it and its headline is the first metric of its first scorer.

Pinned revisions, URLs and cache paths are the ones inspect_evals 0.26.0 passes to ``hf_dataset`` and downloads
to (read from its source); nothing here imports inspect or inspect_evals except BFCL's category table, when asked
for BFCL's sources.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlparse

# --- task specs ----------------------------------------------------------------------------------------------------

TOY_TASK = "ptflow"
OWN_TASKS = ("arenahardwriting", "gpqamain")  # = kit/ptflow_tasks.py TASKS (a unit test keeps them equal)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def task_kind(spec: str) -> str:
    """``toy``, ``own``, ``file`` or ``registry``; ValueError (one line: the spec and what to write) otherwise."""
    if spec == TOY_TASK:
        return "toy"
    if spec.startswith("ptflow/"):
        name = spec.split("/", 1)[1]
        if name not in OWN_TASKS:
            raise ValueError(f"task {spec!r}: ptflow has no task {name!r}; its tasks are {', '.join(OWN_TASKS)}")
        return "own"
    if "@" in spec:
        path, name = spec.rsplit("@", 1)
        if not path.endswith(".py") or not _NAME.match(name):
            raise ValueError(f"task {spec!r}: a file task is <file>.py@<task function>, e.g. evals/mine.py@mytask")
        return "file"
    package, _, name = spec.partition("/")
    if not (_NAME.match(package) and _NAME.match(name)):
        raise ValueError(
            f"task {spec!r}: not a task spec; use <package>/<task> (e.g. inspect_evals/{spec.strip('/') or 'gsm8k'}), "
            "ptflow/<task>, <file>.py@<task> or ptflow"
        )
    return "registry"


# --- data source kinds ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HFDataset:
    """A Hub dataset loaded with ``datasets.load_dataset(repo, name, data_dir=, split=, revision=)`` exactly as the
    task loads it: offline, ``datasets`` reads the prepared cache that an online load with these arguments wrote."""

    repo: str
    revision: str | None  # None: the default branch (unpinned; only resources.json entries)
    splits: tuple[str | None, ...]  # (None,): every split (load_dataset without split=)
    name: str | None = None
    data_dir: str | None = None
    gated: bool = False  # needs HF_TOKEN (an account that accepted the dataset's terms) to download

    def describe(self) -> str:
        parts = [f"dataset {self.repo}"]
        if self.name:
            parts.append(f"config {self.name}")
        if self.data_dir:
            parts.append(f"data_dir {self.data_dir}")
        parts.append("all splits" if self.splits == (None,) else f"splits {','.join(self.splits)}")
        parts.append(f"@{self.revision}" if self.revision else "@default-branch (unpinned)")
        return " ".join(parts)


@dataclass(frozen=True)
class HFModel:
    repo: str
    revision: str = "main"

    def describe(self) -> str:
        return f"model {self.repo}@{self.revision}"


@dataclass(frozen=True)
class URLFile:
    """A file a task downloads itself; ``cache_path`` is relative to the inspect_evals cache root."""

    url: str
    cache_path: str
    sha256: str | None = None  # None where the source publishes none and inspect_evals pins none

    def describe(self) -> str:
        return f"file {self.cache_path} (from {self.url})"


@dataclass(frozen=True)
class GitData:
    """Files inspect_evals copies out of a sparse git checkout; ``required`` are relative to ``cache_dir``, which is
    relative to the inspect_evals cache root (empty: the directory is needed as a whole)."""

    repo_url: str
    commit: str
    sparse_path: str
    cache_dir: str
    required: tuple[str, ...]
    kind: str  # "bfcl-data" | "bfcl-func-source": which inspect_evals downloader fills it

    def describe(self) -> str:
        return f"git data {self.cache_dir}/ ({self.repo_url}@{self.commit[:12]}:{self.sparse_path})"


Source = HFDataset | HFModel | URLFile | GitData

# --- pinned facts (inspect_evals 0.26.0 and PostTrainBench) ----------------------------------------------------------

GSM8K = ("openai/gsm8k", "cc7b047b6e5bb11b4f1af84efc572db110a51b3c")
AIME2025 = ("math-ai/aime25", "563bb8404243c5f09de6ec262f2db674fe5bce9b")
HUMANEVAL = ("openai/openai_humaneval", "7dce6050a7d6d172f3cc5c32aa97f52fa1a2e544")
# Third-party pins of Idavidrein/gpqa (HELM and other harnesses), not checked against the Hub here; = the kit's
# GPQA_REVISION. PostTrainBench loads the unpinned default branch.
GPQA = ("Idavidrein/gpqa", "90b8e5be2b1d3d2dbfe016cdab47981150600c4a")

HEALTHBENCH_URLS = {
    "full": "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/2025-05-07-06-14-12_oss_eval.jsonl",
    "hard": "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/hard_2025-05-08-21-00-10.jsonl",
    "consensus": "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/consensus_2025-05-09-20-00-46.jsonl",
    "meta_eval": (
        "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/2025-05-07-06-14-12_oss_meta_eval.jsonl"
    ),
}

BFCL_REPO = "https://github.com/ShishirPatil/gorilla.git"
BFCL_COMMIT = "dac44e7ac9db5ff26a01ab0c1ec5de5a1e703b7a"
BFCL_DATA_PATH = "berkeley-function-call-leaderboard/bfcl_eval/data"
BFCL_FUNC_SOURCE_PATH = "berkeley-function-call-leaderboard/bfcl_eval/eval_checker/multi_turn_eval/func_source_code"

# PostTrainBench ships Arena-Hard v2.0's creative-writing questions and its baselines' answers in its repository.
PTB_COMMIT = "9082063a62e10e040f1acacdec2ccfc1467e0c00"
ARENA_RAW = (
    f"https://raw.githubusercontent.com/aisa-group/PostTrainBench/{PTB_COMMIT}/"
    "src/eval/tasks/arenahardwriting/evaluation_code/data/arena-hard-v2.0"
)
ARENA_SUBDIR = "ptflow_arenahardwriting"  # = the kit's ARENA_DATA_SUBDIR
ARENA_QUESTIONS_SHA256 = "f337df1022d723b2062bcc530e8e7fbc367548c31fbc87d0ae668f0b6c7609a5"
ARENA_BASELINE_SHA256 = {
    "Qwen3-1.7B": "87a72bb89edfd05fc8dd32152750649e1bab60ba1b62ebcd055610a729023c30",
    "deepseek-r1": "000f723fb5ca6d5770ecfbdc252953360bd193ff98633d531889d77ac05e3900",
    "gemini-2.0-flash-001": "0f0cabec2a300feb1950f29e93740ce8c6cad9c399aad8040dc70fbf67536c6e",
    "o3-mini-2025-01-31": "367fc75e61d7bec1fec540e6f8d723d3df59252368108e57d8dadf4f684377a6",
    "qwq-32b": "e71966dbb1347ed9f53c045de599741c84c236d7cdcc281a60d3d5f998e1c588",
}


def inspect_evals_cache_name(url: str, tag: str) -> str:
    """The file name inspect_evals caches a URL under: ``{tag}_{sha256(url)[:32]}{ext}`` (its ``get_cached_fname``)."""
    name = urlparse(url).path.rsplit("/", 1)[-1]
    ext = "." + name.rsplit(".", 1)[1] if "." in name else ""
    prefix = f"{tag}_" if tag else ""
    return f"{prefix}{hashlib.sha256(url.encode('utf-8')).hexdigest()[:32]}{ext}"


# --- each known task's sources, from its task arguments --------------------------------------------------------------


def _gsm8k(task_args: dict) -> list[Source]:
    # The default fewshot=10 draws its examples from the train split.
    splits = ("test", "train") if task_args.get("fewshot", 10) else ("test",)
    return [HFDataset(GSM8K[0], GSM8K[1], splits, data_dir="main")]


def _healthbench(task_args: dict) -> list[Source]:
    if task_args.get("local_path"):
        return []  # a file the user provides, read as given
    subset = str(task_args.get("subset") or "full").lower()
    if subset not in HEALTHBENCH_URLS:
        raise ValueError(f"healthbench task_args.subset {subset!r} must be one of {', '.join(HEALTHBENCH_URLS)}")
    url = HEALTHBENCH_URLS[subset]
    return [URLFile(url, f"healthbench/{inspect_evals_cache_name(url, subset)}")]


def _bfcl(task_args: dict) -> list[Source]:
    from inspect_evals.bfcl.bfcl import DEFAULT_CATEGORIES
    from inspect_evals.bfcl.utils.task_categories import CATEGORIES, CATEGORY_ALIASES, V3_CATEGORIES, V4_CATEGORIES

    raw = task_args.get("categories") or list(DEFAULT_CATEGORIES)
    names: list[str] = []
    for name in [raw] if isinstance(raw, str) else list(raw):
        names += CATEGORY_ALIASES.get(name, [name])
    unknown = sorted(set(names) - set(CATEGORIES))
    if unknown:
        raise ValueError(f"bfcl task_args.categories: unknown {unknown}; see inspect_evals.bfcl CATEGORIES")
    required = set()
    for name in names:
        config = CATEGORIES[name]
        required.add(config.filename)
        if config.has_ground_truth_file:
            required.add(config.ground_truth_filename)
    multi_turn = [n for n in names if n in V3_CATEGORIES | V4_CATEGORIES]
    if multi_turn:
        required.add("multi_turn_func_doc")
    sources: list[Source] = [
        GitData(BFCL_REPO, BFCL_COMMIT, BFCL_DATA_PATH, "BFCL", tuple(sorted(required)), "bfcl-data")
    ]
    if multi_turn:
        sources.append(
            GitData(BFCL_REPO, BFCL_COMMIT, BFCL_FUNC_SOURCE_PATH, "BFCL/func_source_code", (), "bfcl-func-source")
        )
    return sources


def _arena(task_args: dict) -> list[Source]:
    if task_args.get("data_dir"):
        return []  # the user provides the files where the task reads them
    baseline = task_args.get("baseline", "Qwen3-1.7B")
    if baseline not in ARENA_BASELINE_SHA256:
        raise ValueError(
            f"arenahardwriting task_args.baseline {baseline!r}: PostTrainBench ships answers for "
            f"{', '.join(ARENA_BASELINE_SHA256)} only"
        )
    return [
        URLFile(f"{ARENA_RAW}/question.jsonl", f"{ARENA_SUBDIR}/question.jsonl", ARENA_QUESTIONS_SHA256),
        URLFile(
            f"{ARENA_RAW}/model_answer/{baseline}.jsonl",
            f"{ARENA_SUBDIR}/model_answer/{baseline}.jsonl",
            ARENA_BASELINE_SHA256[baseline],
        ),
    ]


def _gpqamain(task_args: dict) -> list[Source]:
    return [HFDataset(GPQA[0], task_args.get("revision", GPQA[1]), ("train",), name="gpqa_main", gated=True)]


def _nothing(task_args: dict) -> list[Source]:
    return []


@dataclass(frozen=True)
class TaskFacts:
    spec: str
    sources: Callable[[dict], list[Source]] = _nothing
    # The headline metric: {"metric", "stderr", "scorer", "n"} (scorer None: whichever scorer has the metric; n: a
    # metric counting what the headline averages over). None: the first metric of the first scorer.
    headline: dict | None = None
    grader_arg: str | None = None  # the task argument that takes the grader model (LLM-graded tasks)
    # vLLM arguments by model family: BFCL needs tool-call parsing (hermes for qwen/gemma/smollm, llama3_json for
    # llama, as PostTrainBench sets them).
    vllm_args_by_family: dict = field(default_factory=dict)
    sources_import_task: bool = False  # deriving the sources imports the task's package (BFCL's category table)
    sampling: str | None = None  # the task's own default when the eval sets none ("greedy"; None: the provider's)
    # the scorers its stored logs are rescored with by default (RESCORERS; config evals[].rescore overrides)
    rescore: tuple[str, ...] = ()


_ACCURACY = {"metric": "accuracy", "stderr": "stderr", "scorer": None}
# The scorers rule rescore applies to a cell's stored inspect log (ptflow.results.rescore.SCORERS, one function each):
# exact_numeric compares the last number by value, where the inspect of PostTrainBench's image compared with endswith.
RESCORERS = ("exact_numeric",)
_NUMERIC = ("exact_numeric",)
_BFCL_VLLM = {
    fam: {"enable_auto_tool_choice": None, "tool_call_parser": parser}
    for fam, parser in (("qwen", "hermes"), ("gemma", "hermes"), ("smollm", "hermes"), ("llama", "llama3_json"))
}

TASKS: dict[str, TaskFacts] = {
    t.spec: t
    for t in (
        TaskFacts(TOY_TASK, headline={**_ACCURACY, "scorer": "gsm8k_strict"}, sampling="greedy"),
        TaskFacts("inspect_evals/gsm8k", _gsm8k, headline=_ACCURACY, rescore=_NUMERIC),
        TaskFacts(
            "inspect_evals/aime2025", lambda a: [HFDataset(*AIME2025, ("test",))], headline=_ACCURACY, rescore=_NUMERIC
        ),
        TaskFacts("inspect_evals/humaneval", lambda a: [HFDataset(*HUMANEVAL, ("test",))], headline=_ACCURACY),
        TaskFacts(
            "inspect_evals/bfcl",
            _bfcl,
            headline=_ACCURACY,
            vllm_args_by_family=_BFCL_VLLM,
            sources_import_task=True,
        ),
        # HealthBench's own headline: the bootstrapped mean score (clipped to [0, 1]) and its bootstrap std.
        TaskFacts(
            "inspect_evals/healthbench",
            _healthbench,
            headline={"metric": "bootstrap_score", "stderr": "std", "scorer": None},
            grader_arg="judge_model",
        ),
        TaskFacts("ptflow/gpqamain", _gpqamain, headline=_ACCURACY),
        # n: the judged questions (one without a usable verdict in both orders is left out of the win rate).
        TaskFacts(
            "ptflow/arenahardwriting",
            _arena,
            headline={"metric": "winrate", "stderr": "winrate_stderr", "scorer": None, "n": "judged"},
            grader_arg="judge_model",
        ),
    )
}


def facts(spec: str) -> TaskFacts:
    """What ptflow knows of a task spec (a spec it does not list: no sources, first metric as headline)."""
    return TASKS.get(spec) or TaskFacts(spec)


def grader_sources(grader: dict | None) -> list[Source]:
    """A grader run locally from the Hub cache (``hf/org/name`` or ``vllm/org/name``) must be cached like any model."""
    if not grader:
        return []
    provider, _, name = grader["model"].partition("/")
    if provider in ("hf", "vllm") and re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        return [HFModel(name, str((grader.get("model_args") or {}).get("revision", "main")))]
    return []


def sources_for(spec: str, task_args: dict | None = None, grader: dict | None = None) -> list[Source]:
    """Everything an evaluation of ``spec`` with these task arguments (and grader) reads from disk."""
    return list(facts(spec).sources(dict(task_args or {}))) + grader_sources(grader)
