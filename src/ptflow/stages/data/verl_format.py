"""GSM8K records -> verl's RL parquet format (as written by verl's ``examples/data_preprocess/gsm8k.py``).

One row per problem::

    data_source  str
    prompt       [{"role": "user", "content": question + INSTRUCTION}]
    ability      "math"
    reward_model {"style": "rule", "ground_truth": "<answer after '#### ', commas removed>"}
    extra_info   {"split": str, "index": int, "answer": str, "question": str}
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
VERL_COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info"]
_EXTRA_KEYS = ("split", "index", "answer", "question")
_GT = re.compile(r"#### (\-?[0-9\.\,]+)")


def ground_truth_of(answer: str) -> str:
    """The ground truth verl derives from a GSM8K answer: first ``#### n`` match, commas removed."""
    m = _GT.search(answer)
    if m is None:
        raise ValueError(f"answer has no '#### <number>' line: {answer!r}")
    return m.group(1).replace(",", "")


def to_verl_frame(records: list[dict], data_source: str, split: str) -> pd.DataFrame:
    """Build the verl frame; ``index`` is the record's position in ``records``."""
    import pandas as pd

    rows = []
    for idx, rec in enumerate(records):
        question, answer = rec["question"], rec["answer"]
        rows.append(
            {
                "data_source": data_source,
                "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": ground_truth_of(answer)},
                "extra_info": {"split": split, "index": idx, "answer": answer, "question": question},
            }
        )
    return pd.DataFrame(rows, columns=VERL_COLUMNS)


def _as_list(value: object) -> list | None:
    # After a parquet round trip nested lists come back as numpy arrays.
    if isinstance(value, list):
        return value
    if hasattr(value, "tolist") and not isinstance(value, str | bytes | dict):
        out = value.tolist()
        return out if isinstance(out, list) else None
    return None


def validate_verl_frame(df: pd.DataFrame) -> None:
    """Raise ValueError naming the first bad column / row; return None if ``df`` is valid."""
    missing = [c for c in VERL_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"verl frame is missing column(s) {missing}; has {list(df.columns)}")
    if len(df) == 0:
        raise ValueError("verl frame has no rows")
    for pos, row in enumerate(df[VERL_COLUMNS].itertuples(index=False)):
        ds, prompt, ability, rm, extra = row

        def bad(col: str, why: str, _pos: int = pos) -> ValueError:
            return ValueError(f"verl frame row {_pos}, column {col!r}: {why}")

        if not isinstance(ds, str) or not ds:
            raise bad("data_source", f"expected non-empty str, got {ds!r}")
        msgs = _as_list(prompt)
        if not msgs:
            raise bad("prompt", f"expected a non-empty list of chat messages, got {prompt!r}")
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise bad("prompt", f"each message needs str 'role' and 'content', got {m!r}")
        if msgs[-1]["role"] != "user":
            raise bad("prompt", f"last message must be role 'user', got {msgs[-1]['role']!r}")
        if not isinstance(ability, str) or not ability:
            raise bad("ability", f"expected non-empty str, got {ability!r}")
        if not isinstance(rm, dict) or rm.get("style") != "rule" or not isinstance(rm.get("ground_truth"), str):
            raise bad("reward_model", f"expected {{'style': 'rule', 'ground_truth': str}}, got {rm!r}")
        if not isinstance(extra, dict) or any(k not in extra for k in _EXTRA_KEYS):
            raise bad("extra_info", f"expected keys {list(_EXTRA_KEYS)}, got {extra!r}")
        if isinstance(extra["index"], bool) or not isinstance(extra["index"], int):
            # numpy ints come back from parquet; accept anything int-like but not bool/float.
            if not (hasattr(extra["index"], "dtype") and extra["index"].dtype.kind in "iu"):
                raise bad("extra_info", f"'index' must be an int, got {extra['index']!r}")
        if not isinstance(extra["answer"], str) or ground_truth_of(extra["answer"]) != rm["ground_truth"]:
            raise bad("extra_info", "'answer' does not end in '#### <ground_truth>' matching reward_model")


def write_parquet(df: pd.DataFrame, path: str) -> None:
    """Validate and write ``df`` atomically (temp file + rename)."""
    from ptflow.files import atomic_path

    validate_verl_frame(df)
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
