"""Synthetic arithmetic problems in GSM8K record format (``question`` / ``answer``).

Answers are deliberately short ("3 + 4 = 7\\n#### 7"): the tiny char-level models generate them
token by token, and the "####" line is what the GSM8K strict rule scores.

Operands are drawn from ``0 .. 10**digits - 1``. Subtraction keeps the operand order as drawn,
so results may be negative ("3 - 7 = -4\\n#### -4"); that keeps the problem space the same size
for both ops (100 problems for one digit) and exercises the rule's sign handling.
"""

from __future__ import annotations

import random

OPS = {"add": ("+", lambda a, b: a + b), "sub": ("-", lambda a, b: a - b)}


def space_size(digits: int) -> int:
    """Number of distinct problems for one op and ``digits``."""
    return (10**digits) ** 2


def _record(op: str, a: int, b: int) -> dict:
    symbol, fn = OPS[op]
    result = fn(a, b)
    return {"question": f"What is {a} {symbol} {b}?", "answer": f"{a} {symbol} {b} = {result}\n#### {result}"}


def digit_pairs(op: str, leading: bool) -> list[tuple[int, int]]:
    """Digit pairs of one position in a problem without carries (add) or borrows (sub).

    The leading position has no zeros, and for subtraction a strictly larger top digit, so every result has
    exactly ``digits`` digits: the answer lines up digit by digit with the operands.
    """
    lo = 1 if leading else 0
    if op == "add":
        return [(x, y) for x in range(lo, 10) for y in range(lo, 10) if x + y < 10]
    return [(x, y) for x in range(lo, 10) for y in range(lo, 10) if (x > y if leading else x >= y)]


def generate_digitwise(op: str, digits: int, n: int, seed: int) -> list[dict]:
    """``n`` distinct carry-free (add) or borrow-free (sub) problems of ``digits``-digit operands.

    Every digit fact recurs across problems, so a model trained on some problems can solve unseen ones by
    composing facts it has seen: a held-out test set measures generalisation, not recall.
    """
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; expected one of {sorted(OPS)}")
    lead, rest = digit_pairs(op, True), digit_pairs(op, False)
    size = len(lead) * len(rest) ** (digits - 1)
    if n > size:
        raise ValueError(f"only {size} distinct {digits}-digit {op} problems without carries exist; n={n}")
    out = []
    for index in random.Random(f"digitwise:{op}:{digits}:{seed}").sample(range(size), n):
        a = b = 0
        index, first = divmod(index, len(lead))
        pairs = [lead[first]]
        for _ in range(digits - 1):
            index, k = divmod(index, len(rest))
            pairs.append(rest[k])
        for x, y in pairs:
            a, b = a * 10 + x, b * 10 + y
        out.append(_record(op, a, b))
    return out


def generate_arithmetic(op: str, digits: int, n: int, seed: int) -> list[dict]:
    """Return ``n`` GSM8K-style records, deterministic for ``seed``.

    Problems are distinct while ``n`` fits the problem space; beyond that the space is repeated
    as whole shuffled passes, so every problem appears equally often (±1).
    """
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; expected one of {sorted(OPS)}")
    if digits < 1:
        raise ValueError(f"digits must be >= 1, got {digits}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    base = 10**digits
    size = space_size(digits)
    rng = random.Random(f"{op}:{digits}:{seed}")
    indices: list[int] = []
    while len(indices) < n:
        # random.sample over a range does not materialise the range: fine for large spaces.
        indices.extend(rng.sample(range(size), min(size, n - len(indices))))
    return [_record(op, i // base, i % base) for i in indices]


def split_disjoint(records: list[dict], n_test: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Split records into (train, test) with no question in both, test of ``n_test`` records."""
    questions = sorted({r["question"] for r in records})
    if n_test > len(questions):
        raise ValueError(f"n_test={n_test} exceeds the {len(questions)} distinct questions")
    test_q = set(random.Random(seed).sample(questions, n_test))
    test, seen = [], set()
    for r in records:
        if r["question"] in test_q and r["question"] not in seen:
            seen.add(r["question"])
            test.append(r)
    train = [r for r in records if r["question"] not in test_q]
    return train, test
