"""Rescoring stored inspect logs with the exact numeric scorer (ptflow.results.rescore), on real logs that inspect-ai
writes for answers of ``mockllm/model``.

The logs are scored first as PostTrainBench's pinned inspect scored them: the last number compared with
``str.endswith`` (:func:`pinned_numeric_match`, a FIXTURE of that scorer: the inspect installed here compares by value),
so the rescoring has verdicts to change, as it does on PostTrainBench's own logs."""

from __future__ import annotations

import json
import re

import pytest

from ptflow.results.rescore import RescoreError, exact_numeric, rescore_cell, rescore_log

# (completion, target, exact verdict, the pinned scorer's verdict): PostTrainBench issue 44 and gsm8k's targets
CASES = [
    ("ANSWER: 711", "11", False, True),
    ("ANSWER: 149", "49", False, True),
    ("ANSWER: 13", "-3", False, True),
    ("ANSWER: 14000", "14,000", True, False),
    ("The answer is $14,000.", "14000", True, True),
    ("so it is -3", "-3", True, True),
    ("ANSWER: 42", "42", True, True),
    ("no number here", "7", False, False),
]


def pinned_numeric_match():
    """FIXTURE: the numeric match of PostTrainBench's pinned inspect as its issue 44 and its rescoring describe it: a
    numeric target is compared with the answer's last number by ``str.endswith``; gsm8k's targets with a sign or a
    thousands comma are not numbers to it and are compared as text, the sign read as punctuation ("13" passes for -3,
    "14000" fails for "14,000")."""
    from inspect_ai.scorer import CORRECT, INCORRECT, Score, accuracy, scorer, stderr

    @scorer(metrics=[accuracy(), stderr()])
    def pinned_match():
        async def score(state, target):
            text = state.output.completion.strip().casefold().rstrip(".")
            words = re.split(r"\s+", text.replace(",", ""))
            number = next((w.strip("$.") for w in reversed(words) if w.strip("$.").isnumeric()), "")
            wanted = target.text.strip()
            correct = number.endswith(wanted) if wanted.isnumeric() else text.endswith(wanted.lstrip("-"))
            return Score(value=CORRECT if correct else INCORRECT, answer=number)

        return score

    return pinned_match()


def make_log(log_dir, cases) -> str:
    """A real inspect log of ``cases``' completions (mockllm/model answers each sample with its completion)."""
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage
    from inspect_ai.solver import generate

    answers = {f"q{i}": completion for i, (completion, *_rest) in enumerate(cases)}

    def answer(messages, tools, tool_choice, config):
        out = ModelOutput.from_content(model="mockllm/model", content=answers[messages[-1].text])
        out.usage = ModelUsage(input_tokens=8, output_tokens=4, total_tokens=12)  # no tiktoken download
        return out

    task = Task(
        name="gsm8k",
        dataset=[Sample(input=f"q{i}", target=target, id=i) for i, (_c, target, *_r) in enumerate(cases)],
        solver=generate(),
        scorer=pinned_numeric_match(),
    )
    [log] = inspect_eval(task, model="mockllm/model", model_args={"custom_outputs": answer}, log_dir=str(log_dir),
                         log_format="eval", display="none")  # fmt: skip
    assert log.status == "success", log.error
    return log.location


@pytest.mark.parametrize(("completion", "target", "exact", "pinned"), CASES)
def test_the_exact_scorer_compares_the_last_number_by_value(completion, target, exact, pinned):
    assert exact_numeric(completion, target)[1] is exact


def test_a_target_that_is_no_number_is_refused_in_one_line():
    with pytest.raises(RescoreError, match="target 'seven' is not a number"):
        exact_numeric("7", "seven")


def test_a_real_log_is_rescored_and_the_changed_verdicts_listed(tmp_path):
    from inspect_ai.log import read_eval_log

    log = make_log(tmp_path / "logs", CASES)
    stored = [s.scores["pinned_match"].value == "C" for s in read_eval_log(log).samples]
    assert stored == [c[3] for c in CASES]  # the fixture scores as the issue says the pinned inspect did
    out = rescore_log(log, "exact_numeric")
    assert out["metrics"]["n"] == len(CASES)
    assert out["metrics"]["value"] == pytest.approx(sum(c[2] for c in CASES) / len(CASES))
    changed = {c["target"]: (c["answer"], c["before"], c["after"]) for c in out["changed_samples"]}
    assert changed == {"11": ("711", True, False), "49": ("149", True, False), "-3": ("13", True, False),
                       "14,000": ("14000", False, True)}  # fmt: skip
    assert out["changed"] == 4


def test_a_cell_is_rescored_from_its_eval_json_and_an_unscored_one_says_why(tmp_path):
    cell = tmp_path / "cell"
    (cell / "inspect").mkdir(parents=True)
    log = make_log(cell / "inspect", CASES[:3])
    eval_json = cell / "eval.json"
    eval_json.write_text(json.dumps({"status": "scored", "metrics": {"value": 1.0},
                                     "inspect_log": str(log).removeprefix(str(cell) + "/")}))  # fmt: skip
    result = rescore_cell(eval_json, cell / "rescore" / "exact_numeric.json", "exact_numeric")
    assert result["metrics"]["value"] == 0.0 and result["stored_value"] == 1.0 and result["changed"] == 3
    assert json.loads((cell / "rescore" / "exact_numeric.json").read_text()) == result
    eval_json.write_text(json.dumps({"status": "no_model", "metrics": None}))
    assert rescore_cell(eval_json, cell / "r.json", "exact_numeric")["why"] == "the cell was not scored"
    with pytest.raises(RescoreError, match="unknown"):
        rescore_cell(eval_json, cell / "r.json", "exactly")
