import pytest

from ptflow.stages.gsm8k_answer import CLIP_CHARS, extract_answer, gsm8k_score


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3 + 4 = 7\n#### 7", "7"),
        ("#### 1\nno, wait\n#### 2", "2"),  # last match wins
        ("#### 1,234", "1234"),  # thousands separators stripped
        ("#### -4", "-4"),  # negatives
        ("#### 3.5", "3.5"),  # decimals kept as written
        ("#### 18$", "18"),  # "$" is not part of the number
        ("#### $18", None),  # verl's strict regex needs a digit right after "#### "
        ("####7", None),  # exactly one space required
        ("the answer is 7", None),
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_only_tail_is_searched():
    assert extract_answer("#### 5" + "x" * CLIP_CHARS) is None
    assert extract_answer("x" * 1000 + "#### 5") == "5"


@pytest.mark.parametrize(
    ("completion", "gt", "score"),
    [
        ("3 + 4 = 7\n#### 7", "7", 1.0),
        ("#### 7\n#### 8", "7", 0.0),
        ("#### 1,000", "1000", 1.0),
        ("#### -4", "-4", 1.0),
        ("#### 4", "-4", 0.0),
        ("#### 7.0", "7", 0.0),  # string match, like verl
        ("#### 2.5", "2.5", 1.0),
        ("no answer", "7", 0.0),
    ],
)
def test_gsm8k_score(completion, gt, score):
    assert gsm8k_score(completion, gt) == score


def test_grpo_reward_reads_conversational_completions():
    from ptflow.stages.train.grpo import gsm8k_reward

    conv = [[{"role": "assistant", "content": "3 + 4 = 7\n#### 7"}], [{"role": "assistant", "content": "#### 8"}]]
    assert gsm8k_reward(prompts=[None, None], completions=conv, ground_truth=["7", "7"]) == [1.0, 0.0]
    assert gsm8k_reward(prompts=[None], completions=["#### -4"], ground_truth=["-4"]) == [1.0]
