import re

import pytest

from ptflow.stages.data.synthetic import generate_arithmetic, space_size, split_disjoint

_Q = re.compile(r"^What is (\d+) ([+-]) (\d+)\?$")


def test_deterministic_and_seed_dependent():
    assert generate_arithmetic("add", 1, 50, 3) == generate_arithmetic("add", 1, 50, 3)
    assert generate_arithmetic("add", 1, 50, 3) != generate_arithmetic("add", 1, 50, 4)


@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize("digits", [1, 2])
def test_format_and_answers_correct(op, digits):
    for rec in generate_arithmetic(op, digits, 80, 0):
        assert set(rec) == {"question", "answer"}
        a, sym, b = _Q.match(rec["question"]).groups()
        result = int(a) + int(b) if sym == "+" else int(a) - int(b)
        assert int(a) < 10**digits and int(b) < 10**digits
        assert rec["answer"] == f"{a} {sym} {b} = {result}\n#### {result}"


def test_distinct_when_space_allows_and_balanced_beyond():
    recs = generate_arithmetic("sub", 1, space_size(1), 0)
    assert len({r["question"] for r in recs}) == 100
    recs = generate_arithmetic("add", 1, 250, 0)
    counts = {}
    for r in recs:
        counts[r["question"]] = counts.get(r["question"], 0) + 1
    assert len(counts) == 100 and set(counts.values()) <= {2, 3}


def test_bad_args():
    with pytest.raises(ValueError):
        generate_arithmetic("mul", 1, 5, 0)
    with pytest.raises(ValueError):
        generate_arithmetic("add", 0, 5, 0)


def test_split_disjoint():
    train, test = split_disjoint(generate_arithmetic("add", 1, 300, 0), 30, seed=1)
    assert len(test) == 30
    assert not {r["question"] for r in train} & {r["question"] for r in test}


def test_digitwise_has_no_carries_and_keeps_every_digit():
    from ptflow.stages.data.synthetic import generate_digitwise

    for op in ("add", "sub"):
        recs = generate_digitwise(op, 2, 500, seed=3)
        assert len({r["question"] for r in recs}) == 500
        assert recs == generate_digitwise(op, 2, 500, seed=3)
        for r in recs:
            a, sign, b = r["question"].removeprefix("What is ").rstrip("?").split()
            result = int(a) + int(b) if sign == "+" else int(a) - int(b)
            assert r["answer"].endswith(f"#### {result}") and len(str(result)) == 2
            for x, y in zip(a, b, strict=True):
                assert (int(x) + int(y) < 10) if op == "add" else int(x) >= int(y)
