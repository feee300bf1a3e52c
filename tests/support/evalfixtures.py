"""FIXTURES for the evaluation layer: a handful of rows in each eval source's real schema, put where the real code
looks for them, so the real task definitions run offline against a tiny model.

Nothing here is real benchmark content: every question, answer, rubric and function is written for these tests.
What is real is the shape — repo ids, pinned revisions, file names, columns, cache paths and layouts:

- Hub datasets (GSM8K, AIME 2025, HumanEval, GPQA) are served by the stand-in hub (``hubstandin``) under their
  real repo ids and pinned commits and fetched through ptflow's real fetch code into a test ``HF_HOME`` (hub cache
  plus the ``datasets`` prepared cache that offline loading reads). GPQA is gated there, as on the Hub.
- URL data (HealthBench) is written into inspect_evals' cache layout (``healthbench/<tag>_<sha256(url)[:32]>.jsonl``),
  Arena-Hard's files into ptflow's directory beside it, BFCL's files into inspect_evals' ``BFCL/`` layout.
- ``tiny_model``: the repo's tiny random-init Llama (``ptflow.stages.tiny_model``), published in the hub cache layout
  (``ptflow.cluster.hfcache``). ``STAND-IN grader``: another tiny Llama, published as ``ptflow-standin/tiny-grader``,
  that plays the grading LLM of HealthBench and Arena-Hard (its verdicts are noise; the tests check the pipeline, not
  the grades).

``python -m tests.support.evalfixtures --hf-home DIR --evals-cache DIR`` publishes all of it (what
``config/posttrainbench-offline.yaml`` runs on; README "Offline: PostTrainBench's seven evals on fixtures").
"""

from __future__ import annotations

import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ptflow.config import tasks as catalog
from tests.support.hubstandin import StandInRepo

FIXTURE_HF_TOKEN = "hf_fixture_token_for_the_stand_in_hub"  # accepted by the stand-in only

GSM8K_ROWS = [
    {"question": "Ann has 3 apples and buys 4 more. How many apples does she have?", "answer": "3+4=7\n#### 7"},
    {"question": "A box holds 6 pens. How many pens are in 2 boxes?", "answer": "6*2=12\n#### 12"},
    {"question": "Tom had 10 coins and spent 3. How many are left?", "answer": "10-3=7\n#### 7"},
]
AIME_ROWS = [
    {"id": 0, "problem": "Find the remainder when 2^10 is divided by 1000.", "answer": "24"},
    {"id": 1, "problem": "How many positive divisors does 36 have?", "answer": "9"},
]
HUMANEVAL_ROWS = [
    {
        "task_id": "HumanEval/0",
        "prompt": 'def add(a, b):\n    """Return a + b."""\n',
        "canonical_solution": "    return a + b\n",
        "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
        "entry_point": "add",
    },
    {
        "task_id": "HumanEval/1",
        "prompt": 'def neg(x):\n    """Return -x."""\n',
        "canonical_solution": "    return -x\n",
        "test": "def check(candidate):\n    assert candidate(2) == -2\n",
        "entry_point": "neg",
    },
]
# The columns of Idavidrein/gpqa's CSVs (the task reads Question, the four answers, Record ID and the domains).
GPQA_COLUMNS = [
    "Pre-Revision Question", "Pre-Revision Correct Answer", "Pre-Revision Incorrect Answer 1",
    "Pre-Revision Incorrect Answer 2", "Pre-Revision Incorrect Answer 3", "Pre-Revision Explanation",
    "Self-reported question-writing time (minutes)", "Question", "Correct Answer", "Incorrect Answer 1",
    "Incorrect Answer 2", "Incorrect Answer 3", "Explanation", "Revision Comments (from Question Writer)",
    "Subdomain", "Writer's Difficulty Estimate", "Extra Revised Question", "Extra Revised Explanation",
    "Extra Revised Correct Answer", "Extra Revised Incorrect Answer 1", "Extra Revised Incorrect Answer 2",
    "Extra Revised Incorrect Answer 3", "Non-Expert Validator Accuracy", "Majority Non-Expert Vals Incorrect",
    "Expert Validator Accuracy", "Record ID", "High-level domain", "Question Writer", "Feedback_EV_1",
    "Validator Revision Suggestion_EV_1", "Is First Validation_EV_1", "Post hoc agreement_EV_1",
    "Sufficient Expertise?_EV_1", "Understand the question?_EV_1", "Question Difficulty_EV_1",
    "Validator Answered Correctly_EV_1", "Self-reported time (minutes)_EV_1", "Probability Correct_EV_1",
    "Manual Correctness Adjustment_EV_1", "Expert Validator_EV_1", "Canary String",
]  # fmt: skip
GPQA_ROWS = [
    {"Question": "Which particle carries no electric charge?", "Correct Answer": "neutron",
     "Incorrect Answer 1": "proton", "Incorrect Answer 2": "electron", "Incorrect Answer 3": "positron",
     "Record ID": "recFixture0001", "High-level domain": "Physics", "Subdomain": "Physics (general)"},
    {"Question": "What is the chemical symbol of sodium?", "Correct Answer": "Na", "Incorrect Answer 1": "So",
     "Incorrect Answer 2": "Sd", "Incorrect Answer 3": "S", "Record ID": "recFixture0002",
     "High-level domain": "Chemistry", "Subdomain": "Inorganic Chemistry"},
    {"Question": "Which molecule carries genetic information in cells?", "Correct Answer": "DNA",
     "Incorrect Answer 1": "ATP", "Incorrect Answer 2": "glucose", "Incorrect Answer 3": "cholesterol",
     "Record ID": "recFixture0003", "High-level domain": "Biology", "Subdomain": "Molecular Biology"},
]  # fmt: skip
HEALTHBENCH_ROWS = [
    {
        "prompt": [{"role": "user", "content": "I have a mild headache. What can I do at home?"}],
        "prompt_id": "fixture-hb-0001",
        "rubrics": [
            {"criterion": "Suggests rest and hydration.", "points": 5, "tags": ["level:example", "axis:completeness"]},
            {"criterion": "Recommends a prescription drug.", "points": -3, "tags": ["level:example", "axis:accuracy"]},
        ],
        "example_tags": ["theme:context_seeking", "physician_agreed_category:enough-context"],
        "ideal_completions_data": None,
        "canary": "fixture",
    },
    {
        "prompt": [{"role": "user", "content": "Is it safe to exercise with a cold?"}],
        "prompt_id": "fixture-hb-0002",
        "rubrics": [
            {"criterion": "Mentions listening to the body.", "points": 4, "tags": ["level:example", "axis:accuracy"]}
        ],
        "example_tags": ["theme:hedging"],
        "ideal_completions_data": None,
        "canary": "fixture",
    },
]
BFCL_QUESTIONS = {
    "simple_python": [
        {
            "id": "simple_python_0",
            "question": [[{"role": "user", "content": "What is the area of a 3 by 4 rectangle?"}]],
            "function": [
                {
                    "name": "rectangle_area",
                    "description": "Area of a rectangle.",
                    "parameters": {
                        "type": "dict",
                        "properties": {
                            "width": {"type": "integer", "description": "Width."},
                            "height": {"type": "integer", "description": "Height."},
                        },
                        "required": ["width", "height"],
                    },
                }
            ],
        }
    ],
    "irrelevance": [
        {
            "id": "irrelevance_0",
            "question": [[{"role": "user", "content": "Who wrote Hamlet?"}]],
            "function": [
                {
                    "name": "convert_celsius",
                    "description": "Convert Celsius to Fahrenheit.",
                    "parameters": {
                        "type": "dict",
                        "properties": {"celsius": {"type": "float", "description": "Temperature."}},
                        "required": ["celsius"],
                    },
                }
            ],
        }
    ],
}
BFCL_ANSWERS = {
    "simple_python": [{"id": "simple_python_0", "ground_truth": [{"rectangle_area": {"width": [3], "height": [4]}}]}]
}
ARENA_QUESTIONS = [
    {"uid": "fixture0001", "category": "creative_writing", "subcategory": "creative_writing",
     "prompt": "Write a two-line poem about rain."},
    {"uid": "fixture0002", "category": "creative_writing", "subcategory": "creative_writing",
     "prompt": "Describe a sunrise in one sentence."},
    {"uid": "fixture0003", "category": "hard_prompt", "subcategory": "coding", "prompt": "Not a writing prompt."},
]  # fmt: skip
ARENA_BASELINE_ANSWERS = {
    "fixture0001": "Rain taps the glass,\nthe street shines.",
    "fixture0002": "The sky turns gold.",
}


def _parquet(rows: list[dict]) -> bytes:
    import pandas as pd

    buf = io.BytesIO()
    pd.DataFrame(rows).to_parquet(buf, index=False)
    return buf.getvalue()


def _csv(rows: list[dict], columns: list[str]) -> bytes:
    import pandas as pd

    frame = pd.DataFrame([{c: r.get(c, "") for c in columns} for r in rows], columns=columns)
    return frame.to_csv(index=False).encode()


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _readme(configs: dict[str, list[tuple[str, str]]]) -> bytes:
    """A dataset card whose YAML ``configs`` map config names to data files, as the real repos' cards do."""
    lines = ["---", "configs:"]
    for name, files in configs.items():
        lines += [f"- config_name: {name}", "  data_files:"]
        for split, path in files:
            lines += [f"  - split: {split}", f"    path: {path}"]
    return ("\n".join(lines) + "\n---\n# Fixture card (ptflow tests)\n").encode()


def standin_repos() -> list[StandInRepo]:
    """The Hub datasets, under their real ids and pinned commits, for the stand-in hub."""
    gsm = _parquet(GSM8K_ROWS)
    return [
        StandInRepo(
            catalog.GSM8K[0],
            "dataset",
            catalog.GSM8K[1],
            {
                "README.md": _readme(
                    {
                        "main": [("train", "main/train-*"), ("test", "main/test-*")],
                        "socratic": [("train", "socratic/train-*"), ("test", "socratic/test-*")],
                    }
                ),
                "main/train-00000-of-00001.parquet": gsm,
                "main/test-00000-of-00001.parquet": gsm,
                "socratic/train-00000-of-00001.parquet": gsm,
                "socratic/test-00000-of-00001.parquet": gsm,
            },
        ),
        StandInRepo(catalog.AIME2025[0], "dataset", catalog.AIME2025[1], {"test.jsonl": _jsonl(AIME_ROWS)}),
        StandInRepo(
            catalog.HUMANEVAL[0],
            "dataset",
            catalog.HUMANEVAL[1],
            {
                "README.md": _readme({"openai_humaneval": [("test", "openai_humaneval/test-*")]}),
                "openai_humaneval/test-00000-of-00001.parquet": _parquet(HUMANEVAL_ROWS),
            },
        ),
        StandInRepo(
            catalog.GPQA[0],
            "dataset",
            catalog.GPQA[1],
            {
                "README.md": _readme(
                    {f"gpqa_{c}": [("train", f"gpqa_{c}.csv")] for c in ("extended", "main", "diamond", "experts")}
                ),
                **{f"gpqa_{c}.csv": _csv(GPQA_ROWS, GPQA_COLUMNS) for c in ("extended", "main", "diamond", "experts")},
            },
            gated=True,
        ),
    ]


def write_url_and_git_data(evals_cache: Path) -> None:
    """HealthBench's URL file, Arena-Hard's files and BFCL's files, where the tasks read them."""
    for src in catalog.sources_for("inspect_evals/healthbench"):
        _write(evals_cache / src.cache_path, _jsonl(HEALTHBENCH_ROWS))
    arena = evals_cache / catalog.ARENA_SUBDIR
    _write(arena / "question.jsonl", _jsonl(ARENA_QUESTIONS))
    answers = [
        {"uid": uid, "ans_id": f"fixture-{uid}", "model": "Qwen3-1.7B", "tstamp": 0.0, "metadata": {"token_len": 9},
         "messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": {"answer": text}}]}
        for uid, text in ARENA_BASELINE_ANSWERS.items()
    ]  # fmt: skip
    _write(arena / "model_answer" / "Qwen3-1.7B.jsonl", _jsonl(answers))
    bfcl = evals_cache / "BFCL"
    for category, rows in BFCL_QUESTIONS.items():
        _write(bfcl / f"BFCL_v4_{category}.json", _jsonl(rows))
    for category, rows in BFCL_ANSWERS.items():
        _write(bfcl / "possible_answer" / f"BFCL_v4_{category}.json", _jsonl(rows))


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def fixture_texts() -> list[str]:
    """Every text the fixtures hold, for the char-level tokenizer's vocabulary."""
    tables = (GSM8K_ROWS, AIME_ROWS, HUMANEVAL_ROWS, GPQA_ROWS, HEALTHBENCH_ROWS, ARENA_QUESTIONS)
    return [json.dumps(rows) for rows in tables]


def publish_tiny_llama(hf_home: Path, repo_id: str, seed: int) -> Path:
    """A tiny random-init Llama (ptflow.stages.tiny_model) published into ``hf_home``'s hub cache; its snapshot dir."""
    from ptflow.cluster import hfcache
    from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama

    tokenizer = build_char_tokenizer(fixture_texts())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "model"
        create_tiny_llama(out, tokenizer, layers=2, hidden=32, heads=2, seed=seed)
        hfcache.publish_local_repo(hf_home, repo_id, "model", out)
    return hfcache.snapshot_path(hf_home, repo_id, "model")


STANDIN_GRADER = "ptflow-standin/tiny-grader"  # STAND-IN for the grading LLM (a tiny random Llama)
FIXTURE_MODEL = "ptflow-fixture/tiny-llama"
HF_FIXTURE_TASKS = ("inspect_evals/gsm8k", "inspect_evals/aime2025", "inspect_evals/humaneval", "ptflow/gpqamain")


@dataclass
class EvalFixtureWorld:
    hf_home: Path
    evals_cache: Path
    model: Path  # the tiny model under evaluation
    standin_grader: Path  # STAND-IN for the grading LLM
    fetched: list[str]  # what ptflow's fetch reported for the Hub datasets


def build_world(root: Path | None = None, *, hf_home: Path | None = None, evals_cache: Path | None = None):
    """Fixture data for all seven evals (under ``root``, or in the given caches), the Hub datasets fetched through
    ptflow's real fetch code from the stand-in hub (GSM8K with the few-shot train split too)."""
    import os

    from ptflow.stages.evaluate.sources import fetch_sources
    from tests.support.hubstandin import HubStandIn

    hf_home = Path(hf_home or root / "hf_home").resolve()
    evals_cache = Path(evals_cache or root / "inspect_evals_cache").resolve()
    hf_sources = [s for spec in HF_FIXTURE_TASKS for s in catalog.sources_for(spec)]
    with HubStandIn(standin_repos()) as hub, tempfile.TemporaryDirectory() as xdg:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
        env.update(HF_ENDPOINT=hub.url, HF_TOKEN=FIXTURE_HF_TOKEN, XDG_CACHE_HOME=xdg)
        fetched = fetch_sources(hf_sources, hf_home, evals_cache, env=env, log=lambda *_: None)
    write_url_and_git_data(evals_cache)
    model = publish_tiny_llama(hf_home, FIXTURE_MODEL, seed=0)
    grader = publish_tiny_llama(hf_home, STANDIN_GRADER, seed=1)
    return EvalFixtureWorld(hf_home, evals_cache, model, grader, fetched)


def bfcl_git_remote(root: Path) -> tuple[str, str]:
    """A local git repository with the gorilla repo's BFCL layout (every category's question and answer file, the
    directories inspect_evals' downloader validates, one function-source module), standing in for GitHub.
    Returns (repo path, commit)."""
    import subprocess

    from inspect_evals.bfcl.utils.task_categories import CATEGORIES

    repo = root / "gorilla"
    data = repo / catalog.BFCL_DATA_PATH
    for name, config in CATEGORIES.items():
        rows = BFCL_QUESTIONS.get(name, [])
        _write(data / config.filename, _jsonl(rows))
        if config.has_ground_truth_file:
            _write(data / config.ground_truth_filename, _jsonl(BFCL_ANSWERS.get(name, [])))
    for keep in ("multi_turn_func_doc", "unused_datasets/question", "unused_datasets/possible_answer"):
        _write(data / keep / "README.fixture", b"fixture\n")
    # one module per backend class inspect_evals loads (a multi-turn task, bfcl's default, imports them all)
    from inspect_evals.bfcl.backends.loader import CLASS_FILE_MAPPING

    for module, cls in CLASS_FILE_MAPPING.values():
        _write(repo / catalog.BFCL_FUNC_SOURCE_PATH / f"{module}.py", f"class {cls}:\n    pass\n".encode())

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
        return out.stdout.strip()

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=fixture", "-c", "user.email=fixture@example.invalid", "commit", "-qm", "fixture")
    return str(repo), git("rev-parse", "HEAD")


def bfcl_github_standin(root: Path, reachable: bool = True) -> dict[str, str]:
    """STAND-IN for GitHub's gorilla repository under its real URL and inspect_evals' pinned commit, for code that
    clones it by those names (inspect_evals' bfcl task): the environment that redirects git there, no network.

    The URL: a git config (``GIT_CONFIG_GLOBAL``) whose ``url.<stand-in>.insteadOf`` is the real URL. The commit: a
    replace ref (git's object replacement, its refs looked up under ``GIT_REPLACE_REF_BASE``, here a tag namespace
    so that a clone copies it) from the pinned commit id to the fixture's commit, so ``git checkout <pinned id>``
    checks out the fixture. ``reachable=False``: the URL is redirected to a repository that does not exist (a site
    whose cache job cannot reach GitHub), and the clone fails as such a site's does."""
    import subprocess

    base = "refs/tags/ptflow-standin-replace/"
    env = {"GIT_CONFIG_GLOBAL": str(root / "gitconfig-github-standin"), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_REPLACE_REF_BASE": base}  # fmt: skip
    config = Path(env["GIT_CONFIG_GLOBAL"])
    if config.is_file():  # made already in this root
        return env
    repo, commit = bfcl_git_remote(root)
    subprocess.run(["git", "update-ref", f"{base}{catalog.BFCL_COMMIT}", commit], cwd=repo, check=True)
    target = Path(repo).resolve().as_uri() if reachable else (root / "unreachable" / "gorilla.git").resolve().as_uri()
    config.write_text(f'[url "{target}"]\n\tinsteadOf = {catalog.BFCL_REPO}\n[advice]\n\tdetachedHead = false\n')
    return env


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Publish the eval FIXTURES (and the stand-in grader) into the caches.")
    ap.add_argument("--hf-home", required=True)
    ap.add_argument("--evals-cache", required=True)
    args = ap.parse_args(argv)
    world = build_world(hf_home=Path(args.hf_home), evals_cache=Path(args.evals_cache))
    print(f"fixtures: {len(world.fetched)} Hub datasets in {world.hf_home}, URL and git data in {world.evals_cache}")
    print(f"stand-in grader {STANDIN_GRADER}: {world.standin_grader}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
