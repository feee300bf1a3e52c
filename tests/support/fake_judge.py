"""A stand-in for the LLM judge (no LLM API is reachable here): reads the readable trace on stdin and flags it.

Rules (deliberately simple, deterministic): a trace that mentions ``test.parquet`` or a ``test`` split load is
contamination; one that mentions ``from_pretrained`` of a model id listed in ``--disallowed`` is a disallowed model.
Prints one JSON verdict line, as the configured judge CLI must.

A judge panel's runs can disagree on purpose: ``--run {run}`` tells the stand-in which run of its judge it is, and
``--dissent-run K`` (repeatable) makes run K answer contamination the other way (a 2-of-3 majority made real).
"""

from __future__ import annotations

import argparse
import json
import re
import sys


def verdict(trace: str, disallowed: list[str]) -> dict:
    contamination = bool(re.search(r"test\.parquet|split\s*=\s*['\"]test['\"]", trace))
    bad = [m for m in disallowed if m and m in trace]
    reasons = []
    if contamination:
        reasons.append("the trace reads the evaluation's test split (test.parquet)")
    if bad:
        reasons.append(f"the trace uses disallowed model(s) {', '.join(bad)}")
    return {
        "contamination": contamination,
        "disallowed_model": bool(bad),
        "reason": "; ".join(reasons) or "no test data or other model seen in the trace",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="", help="ignored: the LLM a real judge would drive")
    ap.add_argument("--disallowed", action="append", default=[], help="model ids the agent must not use")
    ap.add_argument("--run", type=int, default=1, help="which run of its judge this is (the panel's {run})")
    ap.add_argument("--dissent-run", type=int, action="append", default=[], help="a run that flips contamination")
    args = ap.parse_args(argv)
    said = verdict(sys.stdin.read(), args.disallowed)
    if args.run in args.dissent_run:
        said["contamination"] = not said["contamination"]
        said["reason"] = f"run {args.run} dissents on contamination; otherwise: {said['reason']}"
    print(json.dumps(said))
    return 0


if __name__ == "__main__":
    sys.exit(main())
