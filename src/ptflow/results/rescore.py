"""A cell's stored inspect log scored again with another scorer, without running any model (rule ``rescore``).

PostTrainBench found that inspect's ``match(numeric=True)`` of its pinned inspect compared the last number of an
answer with ``str.endswith``: "ANSWER: 711" was correct for 11 and 149 for 49 (PostTrainBench issue 44), and gsm8k's
negative and comma targets were compared as text ("13" passed for -3, "14000" failed for "14,000"). It rescored
aime2025 and gsm8k from the stored logs with an exact comparison. The inspect ptflow installs compares numbers by
value, so its own logs rescore to what they scored; logs scored by an older inspect (a PostTrainBench image's, or an
earlier run's) do not, and the rescored column says by how much.

A scorer here is a plain function ``(completion, target) -> (answer, correct)``; :data:`SCORERS` names them for the
config (``evals[].rescore``). The result, ``rescore/<scorer>.json`` beside eval.json, holds the metric (accuracy over
the log's samples, its stderr, n), how many verdicts changed and the first changed samples, so a reader can check.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

from ptflow.files import write_json_atomic

RESCORE_VERSION = 1
# A number as a target or an answer holds it once inspect's numeric punctuation ($, €, £, thousands commas, *, _)
# is stripped: an optional minus, digits, an optional fraction.
SIGNED_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
CHANGED_SHOWN = 20  # changed samples listed in the result (the count is of all)


class RescoreError(ValueError):
    """A log that cannot be rescored with this scorer (one line: which file, what to do)."""


def _numeric_words(text: str) -> list[str]:
    """The text's words after inspect's own numeric clean-up (``strip_numeric_punctuation``), last word first."""
    from inspect_ai.scorer._common import strip_numeric_punctuation

    words = re.split(r"\s+", strip_numeric_punctuation(text.strip().casefold()))
    words.reverse()
    return words


def exact_numeric(completion: str, target: str) -> tuple[str, bool]:
    """(the completion's last number, whether its value equals the target's). The last number is inspect's
    ``match(numeric=True, location="end")`` answer (the last whitespace-separated word that is a number once numeric
    punctuation is stripped), with its sign; a target is compared by value, so "14000" is right for "14,000", and
    "13" wrong for "-3" and "711" for "11"."""
    from inspect_ai.scorer._common import strip_numeric_punctuation

    wanted = strip_numeric_punctuation(target.strip())
    if not SIGNED_NUMBER.fullmatch(wanted):
        raise RescoreError(f"target {target!r} is not a number: exact_numeric rescores numeric answers only")
    for word in _numeric_words(completion):
        number = word.rstrip(".,;:!?)").lstrip("(")
        if SIGNED_NUMBER.fullmatch(number):
            return number, math.isclose(float(number), float(wanted), rel_tol=0.0, abs_tol=1e-9)
    return "", False


SCORERS: dict[str, Callable[[str, str], tuple[str, bool]]] = {"exact_numeric": exact_numeric}


def _stored_verdict(sample) -> bool | None:
    """What the log's own scorer said of a sample (inspect's CORRECT value "C"), None without a score."""
    for score in (sample.scores or {}).values():
        return score.value == "C" if isinstance(score.value, str) else bool(score.value)
    return None


def rescore_log(log_path: str | Path, scorer: str) -> dict:
    """The log's samples scored again by ``scorer``: the metric, and the samples whose verdict changed."""
    from inspect_ai.log import read_eval_log

    fn = SCORERS[scorer]
    log = read_eval_log(str(log_path))
    if log.status != "success" or not log.samples:
        raise RescoreError(f"{log_path}: inspect log status {log.status} with {len(log.samples or [])} samples")
    verdicts, changed = [], []
    for sample in log.samples:
        target = sample.target if isinstance(sample.target, str) else sample.target[0]
        answer, correct = fn(sample.output.completion, target)
        verdicts.append(correct)
        before = _stored_verdict(sample)
        if before is not None and before != correct:
            changed.append({"id": sample.id, "epoch": sample.epoch, "target": target, "answer": answer,
                            "before": before, "after": correct})  # fmt: skip
    n = len(verdicts)
    value = sum(verdicts) / n
    stderr = math.sqrt(sum((v - value) ** 2 for v in verdicts) / (n - 1) / n) if n > 1 else None
    return {
        "metrics": {"name": "accuracy", "value": value, "stderr": stderr, "n": n},
        "changed": len(changed),
        "changed_samples": changed[:CHANGED_SHOWN],
    }


def rescore_cell(eval_json: str | Path, out_json: str | Path, scorer: str) -> dict:
    """``rescore/<scorer>.json`` of a cell from its eval.json and the inspect log it names; a cell that was not
    scored (no model, every try failed) or keeps no inspect log gets a result that says so and no metric."""
    import json

    if scorer not in SCORERS:
        raise RescoreError(f"rescore scorer {scorer!r} is unknown; use one of {', '.join(sorted(SCORERS))}")
    data = json.loads(Path(eval_json).read_text())
    base = {"version": RESCORE_VERSION, "scorer": scorer, "eval_json": str(eval_json), "status": data["status"]}
    log = data.get("inspect_log")
    if data["status"] != "scored" or not log:
        why = "the cell was not scored" if data["status"] != "scored" else "the cell keeps no inspect log"
        result = {**base, "metrics": None, "why": why}
    elif data.get("seeds"):
        result = {**base, **_rescore_seeds(Path(eval_json), data, scorer), "stored_value": data["metrics"]["value"]}
    else:
        stored = data["metrics"]["value"]
        result = {**base, **rescore_log(Path(eval_json).parent / log, scorer), "stored_value": stored}
    write_json_atomic(out_json, result)
    return result


def _rescore_seeds(eval_json: Path, data: dict, scorer: str) -> dict:
    """A seeded cell: each succeeded seed's log rescored, the mean over them (as the cell's metric is)."""
    import json

    per_seed = {}
    for seed, entry in data["seeds"]["per_seed"].items():
        if entry["status"] == "scored":
            seed_json = eval_json.parent / entry["eval_json"]
            seed_log = seed_json.parent / json.loads(seed_json.read_text())["inspect_log"]
            per_seed[seed] = rescore_log(seed_log, scorer)
    values = [r["metrics"]["value"] for r in per_seed.values()]
    stderrs = [r["metrics"]["stderr"] for r in per_seed.values()]
    first = next(iter(per_seed.values()))
    return {
        "metrics": {
            **first["metrics"],
            "value": sum(values) / len(values),
            "stderr": None if None in stderrs else sum(stderrs) / len(stderrs),
        },  # fmt: skip
        "changed": sum(r["changed"] for r in per_seed.values()),
        "changed_samples": [dict(c, seed=int(s)) for s, r in per_seed.items() for c in r["changed_samples"]][
            :CHANGED_SHOWN
        ],
        "per_seed": {s: r["metrics"]["value"] for s, r in per_seed.items()},
    }
