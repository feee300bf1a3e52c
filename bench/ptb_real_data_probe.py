"""Which of a REAL PostTrainBench checkout's evaluate.py scripts load their data offline from the cache that the
rule posttrainbench_cache warms: ptflow's ``warm_checkout_evals`` (the cache job's step) over the checkout's seven
evals, against the hub STAND-IN of tests/support (FIXTURE data under the real repo ids and pinned revisions: the
evaluation fixtures' rows where they hold the real columns, the checkout fixture's 16 GSM8K rows for its 10-shot
prompt), then the data probe again offline: each script's loads (arguments, loaded or not) and where it stopped.
Printed, not asserted. The checkout is another project's code: clone it yourself (it is not in this repository).

Usage: .venv/bin/python bench/ptb_real_data_probe.py --checkout <clone of aisa-group/PostTrainBench at 9082063>
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from ptflow.config import posttrainbench as ptb  # noqa: E402
from ptflow.stages.cache import MissingReposError, warm_checkout_evals  # noqa: E402
from ptflow.stages.evaluate.sources import data_env  # noqa: E402
from ptflow.stages.posttrainbench.data_probe import probe  # noqa: E402
from tests.support import evalfixtures  # noqa: E402
from tests.support.hubstandin import HubStandIn  # noqa: E402
from tests.support.ptb_checkout import hub_repos  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", required=True, type=Path)
    args = parser.parse_args()
    root = args.checkout.resolve()
    evals = sorted(p.name for p in (root / "src/eval/tasks").iterdir() if (p / "evaluate.py").is_file())
    repos = {r.repo_id: r for r in evalfixtures.standin_repos()}
    repos["openai/gsm8k"] = next(r for r in hub_repos(("gsm8k",), models=()) if r.repo_id == "openai/gsm8k")
    print(f"checkout {root} at {ptb.git(root, 'rev-parse', 'HEAD')[:12]}: {', '.join(evals)}")
    with tempfile.TemporaryDirectory(prefix="ptb-real-probe-") as tmp:
        hf_home = Path(tmp) / "hf_home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        with HubStandIn(list(repos.values())) as hub:
            warm_env = {**env, "HF_ENDPOINT": hub.url, "HF_TOKEN": "hf-fixture-token"}
            t0 = time.time()
            try:
                warm_checkout_evals(root, evals, hf_home, Path(tmp) / "inspect_evals", env=warm_env, log=print)
                print(f"cache job's step: passed in {time.time() - t0:.1f} s")
            except MissingReposError as exc:
                print(f"cache job's step: FAILS in {time.time() - t0:.1f} s:", *str(exc).split(" | "), sep="\n  ")
        offline = {**env, "HF_ENDPOINT": "http://127.0.0.1:9", **data_env(hf_home, Path(tmp) / "inspect_evals")}
        found = probe(
            {e: root / ptb.EVAL_DIR.format(eval=e) for e in evals}, root / ptb.TEMPLATES_DIR, "check", offline
        )
    for e, result in found.items():
        loads = "; ".join(f"{ld.describe()}: {'loaded' if ld.ok else ld.error}" for ld in result.loads) or "none"
        print(f"offline {e}: loads {loads} -> {result.stopped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
