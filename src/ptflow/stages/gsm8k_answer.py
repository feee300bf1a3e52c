"""The GSM8K strict answer rule, as in verl's ``verl/utils/reward_score/gsm8k.py``.

This is the single implementation used by the GRPO reward and by the inspect scorer, so a
model is trained and evaluated against exactly the same rule. Kept dependency-free.
"""

from __future__ import annotations

import re

# verl only looks at the tail of a response (cheap regex on long outputs).
CLIP_CHARS = 300

# The answer must follow "#### " exactly (one space), as verl's strict method requires.
# Note the character class has no "$": "#### $5" does not match at all (as in verl).
_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")


def extract_answer(text: str) -> str | None:
    """Return the last ``#### <number>`` answer in the tail of ``text``, or None.

    Commas (thousands separators) and ``$`` are removed from the match, like verl does.
    """
    if len(text) > CLIP_CHARS:
        text = text[-CLIP_CHARS:]
    matches = _STRICT.findall(text)
    if not matches:
        return None
    return matches[-1].replace(",", "").replace("$", "")


def gsm8k_score(completion: str, ground_truth: str) -> float:
    """1.0 if the extracted answer equals ``ground_truth`` as a string, else 0.0.

    String equality on purpose (verl's rule): "7.0" does not score against "7".
    """
    answer = extract_answer(completion)
    if answer is None:
        return 0.0
    return 1.0 if answer == str(ground_truth) else 0.0
