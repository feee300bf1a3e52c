"""A checkout's bfcl evaluation finds its data offline like the others (issue 58). ptflow's inspect_evals (0.26)
loads bfcl by a git clone of GitHub's ShishirPatil/gorilla at its pinned commit (inspect_evals.bfcl.data's
download_github_directory, and download_func_source for the multi-turn backends), not from the hub. The cache job's
data probe records those clones from the evaluation itself, warms them with ptflow's git fetch into the inspect_evals
cache, and proves offline that the evaluation finds them; where the cache job cannot reach GitHub it fails in one line
naming what the site must allow.

No network: GitHub is a local git STAND-IN under the real URL and commit (``bfcl_github_standin``), and the fixture
checkout's bfcl evaluate.py builds inspect_evals' bfcl task as the real one does (``INSPECT_TASKS``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ptflow.config import posttrainbench as ptb
from ptflow.config import tasks as catalog
from ptflow.specs import CheckoutCall
from ptflow.stages.cache import MissingReposError, warm_checkout_evals
from ptflow.stages.evaluate.sources import OFFLINE_ENV, EvalCaches
from ptflow.stages.posttrainbench.checkout_eval import CheckoutEval, evaluate
from ptflow.stages.posttrainbench.data_probe import probe, probe_env
from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama
from tests.support.evalfixtures import bfcl_github_standin
from tests.support.ptb_checkout import make_fixture_checkout

CLONES = [
    {"repo_url": catalog.BFCL_REPO, "commit": catalog.BFCL_COMMIT, "sparse_path": catalog.BFCL_DATA_PATH,
     "cache_dir": "BFCL", "fetcher": "bfcl-data"},
    {"repo_url": catalog.BFCL_REPO, "commit": catalog.BFCL_COMMIT, "sparse_path": catalog.BFCL_FUNC_SOURCE_PATH,
     "cache_dir": "BFCL/func_source_code", "fetcher": "bfcl-func-source"},
]  # fmt: skip


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ptb-bfcl") / "PostTrainBench"
    make_fixture_checkout(root, evals=("bfcl",), agents=("codex",))
    return root


def _env(tmp_path: Path, reachable: bool) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "GIT_", "INSPECT_EVALS"))}
    return {**base, **bfcl_github_standin(tmp_path / ("github" if reachable else "no-github"), reachable=reachable)}


def _probe(checkout: Path, mode: str, env: dict, hf_home: Path, evals_cache: Path):
    dirs = {"bfcl": checkout / ptb.EVAL_DIR.format(eval="bfcl")}
    return probe(dirs, checkout / ptb.TEMPLATES_DIR, mode, probe_env(env, hf_home, evals_cache, mode == "check"))[
        "bfcl"
    ]


def test_the_probe_records_bfcls_clones_warms_them_and_the_evaluation_finds_them_offline(checkout, tmp_path):
    hf_home, evals_cache = tmp_path / "hf_home", tmp_path / "inspect_evals"
    # offline, an empty cache: the evaluation would clone; the probe records the miss and clones nothing
    cold = _probe(checkout, "check", _env(tmp_path, reachable=False), hf_home, evals_cache)
    assert [(ld.kind, ld.args, ld.ok) for ld in cold.loads] == [("git", CLONES[0], False)]
    assert cold.loads[0].error.startswith(f"not in {(evals_cache / 'BFCL').resolve()}")
    # warm: the clones recorded from the evaluation (the real URL and commit), fetched into the inspect_evals cache
    warm = _probe(checkout, "warm", _env(tmp_path, reachable=True), hf_home, evals_cache)
    assert [(ld.kind, ld.args, ld.ok) for ld in warm.loads] == [("git", c, True) for c in CLONES], warm
    assert warm.loads[0].describe() == (
        f"git data BFCL/ ({catalog.BFCL_REPO}@{catalog.BFCL_COMMIT[:12]}:{catalog.BFCL_DATA_PATH})"
    )
    assert (evals_cache / "BFCL" / "BFCL_v4_simple_python.json").is_file()
    assert (evals_cache / "BFCL" / "func_source_code" / "gorilla_file_system.py").is_file()
    assert not list(evals_cache.rglob("_temp_clone")) and not [p for p in evals_cache.iterdir() if p.name[0] == "."]
    # offline, GitHub unreachable: the evaluation builds its task from the cache and asks for no clone
    env = {**_env(tmp_path, reachable=False), **OFFLINE_ENV}
    offline = _probe(checkout, "check", env, hf_home, evals_cache)
    assert offline.loads == () and offline.stopped == warm.stopped == "exited 1"  # at "no model", past its data
    # the cache job's own step: complete offline, so no network is used
    said = []
    loads = warm_checkout_evals(checkout, ["bfcl"], hf_home, evals_cache, env=env, log=said.append)
    assert loads == {"bfcl": []} and "no network used" in said[0]


def test_the_cache_job_warms_bfcl_from_an_empty_cache(checkout, tmp_path):
    hf_home, evals_cache = tmp_path / "hf_home", tmp_path / "inspect_evals"
    warm_checkout_evals(checkout, ["bfcl"], hf_home, evals_cache, env=_env(tmp_path, True), log=lambda *_: None)
    assert (evals_cache / "BFCL" / "possible_answer" / "BFCL_v4_simple_python.json").is_file()
    assert (evals_cache / "BFCL" / "func_source_code" / "math_api.py").is_file()


def test_a_cache_job_that_cannot_reach_github_fails_in_one_line_naming_what_the_site_must_allow(checkout, tmp_path):
    hf_home, evals_cache = tmp_path / "hf_home", tmp_path / "inspect_evals"
    with pytest.raises(MissingReposError) as err:
        warm_checkout_evals(checkout, ["bfcl"], hf_home, evals_cache, env=_env(tmp_path, False), log=lambda *_: None)
    line = str(err.value)
    assert "\n" not in line and line.count("evals bfcl:") == 1, line
    assert line.startswith(f"evals bfcl: its evaluate.py clones git data BFCL/ ({catalog.BFCL_REPO}@"), line
    assert (
        f"the site must let the cache job reach github.com (https) for ShishirPatil/gorilla at commit "
        f"{catalog.BFCL_COMMIT}, or {(evals_cache / 'BFCL').resolve()} must be copied in" in line
    ), line
    assert "`git clone` exited 128" in line and "does not appear to be a git repository" in line, line
    assert not (evals_cache / "BFCL").exists() or not any((evals_cache / "BFCL").iterdir())


def test_a_checkout_evaluation_reads_the_inspect_evals_cache_it_is_given(checkout, tmp_path):
    """The GPU job's evaluate.py gets INSPECT_EVALS_CACHE_DIR (paths.evals_cache), where the cache job warmed bfcl;
    without it, offline, inspect_evals looks in its default cache and would clone: every try fails."""
    evals_cache = tmp_path / "inspect_evals"
    warm_checkout_evals(checkout, ["bfcl"], tmp_path / "hf", evals_cache, env=_env(tmp_path, True), log=lambda *_: None)
    model = tmp_path / "tiny-qwen3"  # the fixture evaluate.py picks its qwen3.jinja by the path
    create_tiny_llama(model, build_char_tokenizer(["What is 12 + 34?"]), layers=1, hidden=16, heads=2, seed=0)
    env = {**_env(tmp_path, reachable=False), **OFFLINE_ENV, "XDG_CACHE_HOME": str(tmp_path / "empty-xdg")}
    call = CheckoutCall.from_params({"eval_id": "bfcl", "task": "posttrainbench/bfcl", "retry_max_tokens": [],
                                     "limit": 1, "posttrainbench": {"eval_dir": "bfcl", "objects": {}}})  # fmt: skip

    def run(name, cache):
        caches = EvalCaches(tmp_path / "hf", cache)
        return evaluate(checkout, CheckoutEval.from_call(call), model, tmp_path / name, caches=caches, env=env,
                        log=lambda *_: None)  # fmt: skip

    out = run("given", evals_cache)
    assert out["ok"], out["attempts"]
    assert json.loads(Path(out["metrics_file"]).read_text())["accuracy"] >= 0
    assert not run("not-given", "")["ok"]


def test_the_fixture_bfcl_evaluate_py_clones_as_the_real_one_does(checkout, tmp_path):
    """The fixture's bfcl evaluate.py makes the clones a script making the real one's call (inspect_evals.bfcl.bfcl()
    with its defaults, then inspect_ai.eval) makes: same repository, commit, paths, target dirs, order."""
    real = tmp_path / "real-call" / "bfcl"
    real.mkdir(parents=True)
    (real / "evaluate.py").write_text(
        "import inspect_evals.bfcl\nfrom inspect_ai import eval as inspect_eval\n"
        "inspect_eval(inspect_evals.bfcl.bfcl(), model='vllm/final_model')\n"
    )
    env = _env(tmp_path, reachable=True)
    fixture = _probe(checkout, "warm", env, tmp_path / "hf", tmp_path / "fixture-cache")
    online = probe_env(env, tmp_path / "hf", tmp_path / "reference-cache", False)
    reference = probe({"bfcl": real}, checkout / ptb.TEMPLATES_DIR, "warm", online)
    assert (
        [(ld.kind, ld.args, ld.ok) for ld in fixture.loads]
        == [(ld.kind, ld.args, ld.ok) for ld in reference["bfcl"].loads]
        == [("git", c, True) for c in CLONES]
    )
    assert reference["bfcl"].stopped == "stopped at inspect_ai.eval (its tasks built)"
