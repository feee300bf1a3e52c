"""ptflow's own inspect tasks for the two PostTrainBench evals inspect_evals lacks: GPQA *main* and Arena-Hard v2.0
*writing*.

This file is part of the evaluation kit: it imports only inspect_ai (and inspect_evals for its cache root), never
ptflow, so it can be copied beside an agent's ``evaluate.py`` and loaded as ``ptflow_tasks.py@<task>``.

- ``gpqamain``: the 448 questions of GPQA main (gated HF dataset ``Idavidrein/gpqa``, config ``gpqa_main``,
  split ``train``), four options shuffled with a fixed seed (the correct answer is always first in the raw data),
  chain-of-thought multiple choice, scored by ``choice()``.
- ``arenahardwriting``: the 250 ``creative_writing`` prompts of Arena-Hard v2.0, answered by the model and judged
  pairwise against a fixed baseline's answers by a grader LLM, in both orders (A/B swapped) as Arena-Hard does.
  Verdicts map to win values (strong verdicts weigh 3); the score is the mean over all those values, with the
  standard error over them, as PostTrainBench computes it.
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageSystem, ChatMessageUser, GenerateConfig, Model, get_model
from inspect_ai.scorer import Metric, SampleScore, Score, Scorer, Target, metric, scorer
from inspect_ai.solver import TaskState, generate, multiple_choice

# --- GPQA main -----------------------------------------------------------------------------------------------

GPQA_REPO = "Idavidrein/gpqa"
GPQA_CONFIG = "gpqa_main"
# The Hub commit of Idavidrein/gpqa whose README maps each config to its CSV (gpqa_main -> gpqa_main.csv). Others
# pin the same commit (HELM, several eval harnesses); PostTrainBench itself loads the unpinned default branch.
GPQA_REVISION = "90b8e5be2b1d3d2dbfe016cdab47981150600c4a"
GPQA_SHUFFLE_SEED = 42


def gpqa_record_to_sample(record: dict[str, Any]) -> Sample:
    return Sample(
        input=record["Question"],
        choices=[
            str(record["Correct Answer"]),
            str(record["Incorrect Answer 1"]),
            str(record["Incorrect Answer 2"]),
            str(record["Incorrect Answer 3"]),
        ],
        target="A",
        id=record["Record ID"],
        metadata={"high_level_domain": record.get("High-level domain"), "subdomain": record.get("Subdomain")},
    )


@task
def gpqamain(cot: bool = True, shuffle_choices: bool | int = GPQA_SHUFFLE_SEED, revision: str = GPQA_REVISION) -> Task:
    """GPQA main. ``shuffle_choices``: an int seeds the option shuffle (same exam on every run); ``True`` is
    unseeded, which is what PostTrainBench does (each run sees a different order)."""
    from inspect_ai.dataset import hf_dataset
    from inspect_ai.scorer import choice

    dataset = hf_dataset(
        path=GPQA_REPO,
        name=GPQA_CONFIG,
        split="train",
        revision=revision,
        sample_fields=gpqa_record_to_sample,
        shuffle_choices=shuffle_choices,
    )
    return Task(dataset=dataset, solver=multiple_choice(cot=cot), scorer=choice(), epochs=1)


# --- Arena-Hard v2.0 writing ----------------------------------------------------------------------------------

ARENA_CATEGORY = "creative_writing"
ARENA_BASELINE = "Qwen3-1.7B"  # PostTrainBench's baseline for creative_writing (its answers ship with the data)
ARENA_DATA_SUBDIR = "ptflow_arenahardwriting"
ARENA_QUESTION_FILE = "question.jsonl"
ARENA_ANSWER_DIR = "model_answer"
ARENA_SHUFFLE_SEED = 42  # PostTrainBench orders the questions with random.Random(42) before taking --limit
ARENA_STRONG_WEIGHT = 3  # a "much better" verdict counts as three wins, as in Arena-Hard
ARENA_MAX_REPEATS = 5

# Written for ptflow (same protocol and verdict labels as Arena-Hard's creative-writing judge, our own wording).
ARENA_JUDGE_SYSTEM = (
    "You are an impartial judge comparing two AI assistants' responses to the same user prompt. Compare the two "
    "responses with each other, identify and correct any mistakes or inaccurate information, and weigh how "
    "helpful, relevant, and concise each is. Helpful means it follows the instructions and addresses the prompt; "
    "when a prompt is ambiguous, asking for clarification is better than guessing. Relevant means every part "
    "connects to the request. Concise means clear and not verbose. Where it matters, weigh creativity and "
    "novelty, and note important information a response is missing.\n\n"
    "Explain your reasoning, then end with exactly one verdict label:\n"
    "1. Assistant A is significantly better: [[A>>B]]\n"
    "2. Assistant A is slightly better: [[A>B]]\n"
    "3. Tie, relatively the same: [[A=B]]\n"
    "4. Assistant B is slightly better: [[B>A]]\n"
    "5. Assistant B is significantly better: [[B>>A]]\n\n"
    'Example: "My final verdict is tie: [[A=B]]".'
)
ARENA_JUDGE_USER = (
    "<|User Prompt|>\n{question}\n\n"
    "<|The Start of Assistant A's Answer|>\n{answer_a}\n<|The End of Assistant A's Answer|>\n\n"
    "<|The Start of Assistant B's Answer|>\n{answer_b}\n<|The End of Assistant B's Answer|>"
)
VERDICT_PATTERNS = (re.compile(r"\[\[([AB<>=]+)\]\]"), re.compile(r"\[([AB<>=]+)\]"))
# Win value of each verdict for assistant A (strong verdicts are repeated ARENA_STRONG_WEIGHT times).
VERDICT_VALUES = {
    "A>>B": (1.0, True),
    "A>B": (1.0, False),
    "A=B": (0.5, False),
    "B=A": (0.5, False),
    "A<B": (0.0, False),
    "B>A": (0.0, False),
    "A<<B": (0.0, True),
    "B>>A": (0.0, True),
    "B<A": (1.0, False),
    "B<<A": (1.0, True),
}


def arena_data_dir() -> Path:
    """Where the Arena-Hard data lives: inside inspect_evals' cache root, so one directory (and one environment
    variable, INSPECT_EVALS_CACHE_DIR) carries every URL-fetched eval file to offline GPU nodes."""
    from inspect_evals.constants import INSPECT_EVALS_CACHE_PATH

    return Path(INSPECT_EVALS_CACHE_PATH) / ARENA_DATA_SUBDIR


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_arena_samples(data_dir: Path, baseline: str, category: str = ARENA_CATEGORY) -> list[Sample]:
    questions = [q for q in _read_jsonl(data_dir / ARENA_QUESTION_FILE) if q.get("category") == category]
    answers_file = data_dir / ARENA_ANSWER_DIR / f"{baseline}.jsonl"
    baseline_answers = {a["uid"]: a["messages"][-1]["content"]["answer"] for a in _read_jsonl(answers_file)}
    random.Random(ARENA_SHUFFLE_SEED).shuffle(questions)
    samples = []
    for q in questions:
        if q["uid"] not in baseline_answers:
            raise ValueError(f"{answers_file}: no baseline answer for question uid {q['uid']}")
        samples.append(
            Sample(
                id=q["uid"],
                input=[ChatMessageUser(content=q["prompt"])],
                target=baseline_answers[q["uid"]],
                metadata={"category": q["category"], "subcategory": q.get("subcategory"), "baseline": baseline},
            )
        )
    return samples


def limit_repetitions(text: str, max_repeats: int = ARENA_MAX_REPEATS) -> str:
    """Cut degenerate loops (a line or a short phrase repeated over and over) down to ``max_repeats`` copies, so a
    looping model's answer does not flood the judge's context. Our own simpler take on PostTrainBench's filter."""
    lines, out, run = text.split("\n"), [], 0
    for i, line in enumerate(lines):
        run = run + 1 if i and line == lines[i - 1] else 1
        if run <= max_repeats:
            out.append(line)
    text = "\n".join(out)
    loop = re.compile(r"(.{3,200}?)\1{" + str(max_repeats) + ",}", flags=re.DOTALL)
    return loop.sub(lambda m: m.group(1) * max_repeats, text)


def clean_answer(text: str) -> str:
    # Reasoning models' hidden thinking is not part of the answer the judge compares.
    if text.startswith("<think>") and "</think>" in text:
        text = text.split("</think>", 1)[1].strip()
    return limit_repetitions(text)


def parse_verdict(judgment: str) -> str | None:
    for pattern in VERDICT_PATTERNS:
        found = [m for m in pattern.findall(judgment.upper()) if m]
        if found:
            return found[-1].strip("\n")
    return None


def verdict_values(verdict: str, candidate_is_a: bool) -> list[float]:
    value, strong = VERDICT_VALUES[verdict]
    if not candidate_is_a:
        value = 1.0 - value
    return [value] * (ARENA_STRONG_WEIGHT if strong else 1)


def _battle_values(scores: list[SampleScore]) -> list[float]:
    values: list[float] = []
    for s in scores:
        values += (s.score.metadata or {}).get("battles", [])
    return values


@metric
def winrate() -> Metric:
    """Mean over every battle value of every judged sample (a sample with a strong verdict counts more)."""

    def compute(scores: list[SampleScore]) -> float:
        values = _battle_values(scores)
        return sum(values) / len(values) if values else 0.0

    return compute


@metric
def winrate_stderr() -> Metric:
    """Standard error of ``winrate``: sample std (ddof 1) of the battle values over sqrt(their count)."""

    def compute(scores: list[SampleScore]) -> float:
        values = _battle_values(scores)
        if len(values) < 2:
            return 0.0
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
        return math.sqrt(var) / math.sqrt(len(values))

    return compute


@metric
def judged() -> Metric:
    """How many samples got a usable verdict in both games (the others are left out of ``winrate``)."""

    def compute(scores: list[SampleScore]) -> float:
        return float(sum(1 for s in scores if (s.score.metadata or {}).get("battles")))

    return compute


@scorer(metrics=[winrate(), winrate_stderr(), judged()])
def pairwise_judge(
    judge_model: str | Model,
    judge_max_tokens: int | None,
    judge_reasoning_effort: str | None,
    judge_temperature: float | None,
) -> Scorer:
    async def score(state: TaskState, target: Target) -> Score:
        judge = get_model(judge_model)
        question = state.input_text
        candidate = clean_answer(state.output.completion)
        baseline = target.text
        config = GenerateConfig(
            max_tokens=judge_max_tokens, reasoning_effort=judge_reasoning_effort, temperature=judge_temperature
        )
        games = []
        # Game 1: baseline is A; game 2: candidate is A (position bias cancels out over both orders).
        for candidate_is_a in (False, True):
            a, b = (candidate, baseline) if candidate_is_a else (baseline, candidate)
            messages = [
                ChatMessageSystem(content=ARENA_JUDGE_SYSTEM),
                ChatMessageUser(content=ARENA_JUDGE_USER.format(question=question, answer_a=a, answer_b=b)),
            ]
            output = await judge.generate(messages, config=config)
            verdict = parse_verdict(output.completion)
            if verdict is not None and verdict.upper() not in VERDICT_VALUES:
                verdict = None
            games.append({"candidate_is_a": candidate_is_a, "verdict": verdict, "judgment": output.completion})
        if any(g["verdict"] is None for g in games):
            # As in PostTrainBench: a question whose judge gave no usable verdict in either game is left out.
            return Score(value=0.0, answer=candidate, explanation="no usable verdict", metadata={"games": games})
        battles = [v for g in games for v in verdict_values(g["verdict"].upper(), g["candidate_is_a"])]
        return Score(
            value=sum(battles) / len(battles),
            answer=candidate,
            explanation=" | ".join(g["verdict"] for g in games),
            metadata={"battles": battles, "games": games},
        )

    return score


@task
def arenahardwriting(
    judge_model: str | Model = "openai/gpt-5-mini",
    judge_max_tokens: int | None = 49152,
    judge_reasoning_effort: str | None = "medium",
    judge_temperature: float | None = None,
    baseline: str = ARENA_BASELINE,
    data_dir: str | None = None,
) -> Task:
    """Arena-Hard v2.0 creative-writing prompts, judged pairwise against ``baseline`` by ``judge_model``.

    Defaults follow PostTrainBench: judge gpt-5-mini with reasoning effort medium and 49152 completion tokens,
    baseline Qwen3-1.7B. ``data_dir`` holds ``question.jsonl`` and ``model_answer/<baseline>.jsonl``.
    """
    where = Path(data_dir) if data_dir else arena_data_dir()
    samples = load_arena_samples(where, baseline)
    return Task(
        dataset=MemoryDataset(samples, name="arena-hard-v2.0-writing", location=str(where)),
        solver=generate(),
        scorer=pairwise_judge(judge_model, judge_max_tokens, judge_reasoning_effort, judge_temperature),
    )


# Task functions this file provides, by the name used in ``ptflow/<name>`` task specs.
TASKS = {"gpqamain": gpqamain, "arenahardwriting": arenahardwriting}
