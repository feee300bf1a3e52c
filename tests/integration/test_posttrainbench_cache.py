"""PostTrainBench's HF cache from its checkout (rule posttrainbench_cache, cache.cache_checkout_resources): every
 repo of the checkout's resources.json fetched from the hub STAND-IN (ptflow's fetch, or the checkout's own
download script in the standard image), the marker naming each repo and the commit fetched, the fixture's
evaluate.py then loading its dataset offline; an empty cache fails offline; preflight refuses, one line naming the
eval and the repo, a run whose cache lacks what an evaluation loads and will not get it."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ptflow.config import posttrainbench as ptb
from ptflow.config.layout import Layout
from ptflow.config.matrix import build_config
from ptflow.stages.cache import MissingReposError, cache_checkout_resources
from ptflow.stages.evaluate.preflight import checkout_data_problems
from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama
from tests.support.hubstandin import HubStandIn
from tests.support.ptb_checkout import RESOURCE_MODELS, hub_repos, make_fixture_checkout

EVALS = ("gsm8k", "humaneval")
HF_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "HF_TOKEN")


def _spec(root: Path, image=None) -> dict:
    evals = {
        e: [{"repo": d.repo, "config": d.config, "splits": list(d.splits), "gated": d.gated} for d in ptb.hub_data(e)]
        for e in EVALS
    }
    return {"objects": {ptb.RESOURCES_DIR: "f" * 40}, "image": image, "evals": evals,
            "hf_home": str(root / "hf_home"), "evals_cache": str(root / "inspect_evals")}  # fmt: skip


@pytest.fixture
def clean_env(monkeypatch):
    for var in HF_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def _checkout(root: Path, evals=EVALS, **kw) -> dict:
    commit = make_fixture_checkout(root / "PostTrainBench", evals=evals, agents=("codex",), **kw)
    return {"path": str(root / "PostTrainBench"), "commit": commit}


def _evaluate_offline(checkout: dict, eval_id: str, hf_home: Path, model: Path, out: Path):
    """The fixture's evaluate.py, in its dir, with the environment ptflow gives a checkout evaluation (offline)."""
    from ptflow.stages.posttrainbench.checkout_eval import eval_environment

    env = eval_environment({**os.environ, "HF_HOME": str(hf_home)}, ())
    templates = str(Path(checkout["path"]) / ptb.TEMPLATES_DIR)
    argv = [sys.executable, "evaluate.py", "--model-path", str(model), "--limit", "2",
            "--templates-dir", templates, "--json-output-file", str(out)]  # fmt: skip
    cwd = Path(checkout["path"]) / ptb.EVAL_DIR.format(eval=eval_id)
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _load_questions_offline(checkout: dict, eval_id: str, hf_home: Path):
    """The fixture's evaluate.py's own load_questions() (datasets.load_dataset of its HUB entry), in its dir, under
    the same offline environment as _evaluate_offline: the questions alone, without torch, the model and scoring."""
    from ptflow.stages.posttrainbench.checkout_eval import eval_environment

    env = eval_environment({**os.environ, "HF_HOME": str(hf_home)}, ())
    code = "import json, evaluate\nprint(json.dumps(evaluate.load_questions()))"
    cwd = Path(checkout["path"]) / ptb.EVAL_DIR.format(eval=eval_id)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def cached(tmp_path_factory) -> dict:
    """One checkout (the full resources.json) and one HF cache filled by the cache job, for the module: the test of the
    cache job asserts on the fill, the preflight test reads the filled cache (it filled one of its own before)."""
    root = tmp_path_factory.mktemp("ptb-cache")
    with pytest.MonkeyPatch.context() as mp:
        for var in HF_VARS:
            mp.delenv(var, raising=False)
        checkout = _checkout(root)
        # a qwen-named dir: the checkout picks qwen3.jinja by the path (it has no llama3.jinja at 9082063)
        model = root / "tiny-qwen3"
        create_tiny_llama(model, build_char_tokenizer(["What is 12 + 34?"]), layers=1, hidden=16, heads=2, seed=0)
        hf_home = root / "hf_home"
        # before the cache job: the evaluation fails offline, as the real one does on a GPU node
        empty = _evaluate_offline(checkout, "gsm8k", hf_home, model, root / "m0.json")
        empty_wrote = (root / "m0.json").exists()
        repos = hub_repos(EVALS)
        with HubStandIn(repos) as hub:
            mp.setenv("HF_ENDPOINT", hub.url)
            marker = cache_checkout_resources(checkout, _spec(root), root / "hf_cache.json", log=lambda _: None)
            fetched = len(hub.requests)
            again = cache_checkout_resources(checkout, _spec(root), root / "hf_cache.json", log=lambda _: None)
            asked_again = len(hub.requests) - fetched
    return {
        "root": root, "checkout": checkout, "model": model, "hf_home": hf_home, "empty": empty,
        "empty_wrote": empty_wrote, "repos": repos, "marker": marker, "again": again, "asked_again": asked_again,
    }  # fmt: skip


def test_the_cache_job_fetches_resources_json_and_evaluations_then_load_offline(cached, tmp_path, clean_env):
    empty = cached["empty"]
    assert empty.returncode != 0 and "openai/gsm8k" in empty.stderr and not cached["empty_wrote"]
    marker, again = cached["marker"], cached["again"]
    assert cached["asked_again"] == 0  # complete in the cache: the second run asks the hub nothing
    assert json.loads((cached["root"] / "hf_cache.json").read_text()) == again
    commits = {(r.repo_type, r.repo_id): r.commit for r in cached["repos"]}
    assert {(r["repo_type"], r["repo"]) for r in marker["repos"]} == set(commits)
    for entry in marker["repos"]:  # each repo, and the commit its default branch resolved to
        assert entry["revision"] == "main" and entry["commit"] == commits[(entry["repo_type"], entry["repo"])]
    assert marker["fetched_by"] == "ptflow" and marker["object"] == "f" * 40
    # the eval dirs whose evaluate.py warmed it, by their git objects at the checkout's commit
    root = Path(cached["checkout"]["path"])
    dirs = [ptb.EVAL_DIR.format(eval=e) for e in EVALS]
    ids = ptb.object_ids(root, cached["checkout"]["commit"], dirs)
    assert marker["probed"] == {e: ids[d] for e, d in zip(EVALS, dirs, strict=True)}
    # each evaluation's loads as its evaluate.py makes them (the data probe), all loadable offline: gsm8k's in the
    # form inspect_evals asks (data_dir, not the config name; its pinned revision), the few-shot train split first
    pin = commits[("dataset", "openai/gsm8k")]
    assert marker["evals"]["gsm8k"] == [
        {"path": "openai/gsm8k", "name": None, "data_dir": "main", "data_files": None, "split": split,
         "revision": pin, "ok": True} for split in ("train", "test")
    ]  # fmt: skip
    # the list's gsm8k "default" config (two configs, none the default: an online load refuses it) is served offline
    # by datasets from the prepared "main": nothing failed
    assert marker["failed"] == []
    assert sorted(r["repo"] for r in marker["repos"] if r["repo_type"] == "model") == sorted(RESOURCE_MODELS)
    # after it: offline, the same evaluate.py loads its questions and scores (gsm8k: the whole script, model and
    # scoring included)
    checkout, hf_home = cached["checkout"], cached["hf_home"]
    done = _evaluate_offline(checkout, "gsm8k", hf_home, cached["model"], tmp_path / "gsm8k.json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "over 2 questions" in done.stdout and "accuracy" in json.loads((tmp_path / "gsm8k.json").read_text())
    # humaneval's evaluate.py is the same script but for its HUB entry: what differs, its questions' offline load
    # from this cache, is run by that script's own load_questions() (a second whole evaluate.py only repeated the
    # torch import, the model and the scoring gsm8k's run just proved)
    loaded = _load_questions_offline(checkout, "humaneval", hf_home)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    questions = json.loads(loaded.stdout)
    assert len(questions) >= 2 and all(q["question"] and q["answer"] for q in questions), questions


def test_the_checkouts_download_script_runs_in_the_standard_image_and_ptflow_fills_its_gaps(tmp_path, clean_env):
    checkout = _checkout(tmp_path)
    # apptainer is not installable here: a stand-in that runs the image's runscript (python3 "$@") on the host and
    # records its arguments, so what is tested is ptflow calling the checkout's own script with its variables
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "apptainer.calls"
    shim = bindir / "apptainer"
    shim.write_text(
        "#!/bin/bash\n"
        f'echo "$@" >> {calls}\n'
        'while [ "$#" -gt 0 ] && [[ "$1" != *.sif ]]; do shift; done\n'
        'test -f "$1" || { echo "no image $1" >&2; exit 255; }\n'
        f'shift; exec {sys.executable} "$@"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    image = tmp_path / "images" / "standard.sif"
    image.parent.mkdir()
    image.write_text("fixture image\n")
    clean_env.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    with HubStandIn(hub_repos(EVALS)) as hub:
        clean_env.setenv("HF_ENDPOINT", hub.url)
        lines = []
        marker = cache_checkout_resources(checkout, _spec(tmp_path, str(image)), tmp_path / "m.json", log=lines.append)
    argv = calls.read_text().split()
    assert (
        argv[:2] == ["run", "--nv"] and str(image) in argv and argv[-1] == ptb.RESOURCES_DIR + "/download_resources.py"
    )
    assert f"HF_HOME={tmp_path / 'hf_home'}" in argv
    text = "\n".join(lines)
    # the checkout's script fetched the models, then stopped at the list's broken gsm8k entry, as the real one would,
    # and still exited 0 (its last command is an echo, as the real one's): ptflow checks and fetches what is missing
    assert "model Qwen/Qwen3-4B-Base: downloaded" in text and "Config name is missing" in text
    assert "FIXTURE download finished" in text and f"{ptb.DOWNLOAD_SCRIPT} exited" not in text
    assert (
        marker["fetched_by"].startswith(f"{ptb.DOWNLOAD_SCRIPT} in {image}") and "then ptflow" in marker["fetched_by"]
    )
    assert all(r["commit"] for r in marker["repos"])


def test_a_dataset_an_evaluation_loads_that_the_hub_lacks_fails_the_job_naming_eval_and_repo(tmp_path, clean_env):
    checkout = _checkout(tmp_path)
    with HubStandIn(hub_repos(EVALS, leave_out=("openai/openai_humaneval",))) as hub:
        clean_env.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(MissingReposError) as err:
            cache_checkout_resources(checkout, _spec(tmp_path), tmp_path / "m.json", log=lambda _: None)
    # one line for the miss: the eval, the dataset and the arguments its evaluate.py loads it with, and why
    (line,) = [p for p in str(err.value).split(" | ") if "humaneval" in p]
    assert re.search(r"evals humaneval: dataset openai/openai_humaneval \(split='test', revision='[0-9a-f]{40}'\) "
                     r"could not be fetched \(DatasetNotFoundError", line), line  # fmt: skip
    assert not (tmp_path / "m.json").exists()


def _cfg(default_raw, checkout: dict, evals=EVALS):
    default_raw["posttrainbench"] = {"commit": checkout["commit"], "path": checkout["path"]}
    default_raw["evals"] = [{"id": e, "task": f"posttrainbench/{e}", "retry_max_new_tokens": [12, 8]} for e in evals]
    default_raw["agents"] = [{"id": "baseline", "kind": "baseline"}]
    default_raw["scoring"] = {"weights": dict.fromkeys(evals, 1.0)}
    return build_config(default_raw)


def test_preflight_refuses_what_an_evaluation_loads_but_the_cache_will_not_hold(
    cached, tmp_path, default_raw, clean_env
):
    layout = Layout(str(tmp_path / "results"), str(tmp_path / "scratch"), str(tmp_path / "hf_home"))
    # a checkout whose resources.json lacks gsm8k's dataset: refused even where the hub is reachable
    lacking = _checkout(tmp_path / "lacking", leave_out=("openai/gsm8k",))
    problems = checkout_data_problems(_cfg(default_raw, lacking), layout, env={}, reachable=lambda: True)
    assert len(problems) == 1, problems
    assert problems[0].startswith("evals[gsm8k]: its evaluate.py loads dataset openai/gsm8k (config main)")
    assert "resources.json at" in problems[0] and "does not list" in problems[0]
    # the full list, hub reachable: the cache job will fetch all, nothing to refuse (and the cache is not read)
    cfg = _cfg(default_raw, cached["checkout"])
    assert checkout_data_problems(cfg, layout, env={}, reachable=lambda: True) == []
    # offline and an empty cache: every dataset an evaluation loads, one line each
    offline = {"HF_HUB_OFFLINE": "1"}
    problems = checkout_data_problems(cfg, layout, env=offline, reachable=lambda: False)
    assert [p.split(":")[0] for p in problems] == ["evals[gsm8k]", "evals[humaneval]"]
    assert "openai/openai_humaneval" in problems[1] and "HF_HUB_OFFLINE is set" in problems[1]
    # with what the evaluations load in the cache, offline passes: the module's cache, filled by the cache job from
    # this checkout (as this test once filled its own, under the same layout)
    root = cached["root"]
    filled = Layout(str(root / "results"), str(root / "scratch"), str(cached["hf_home"]))
    assert checkout_data_problems(cfg, filled, env=offline, reachable=lambda: False) == []


def test_preflight_refuses_a_gated_dataset_without_hf_token(tmp_path, default_raw, clean_env):
    """gpqamain loads Idavidrein/gpqa, gated: without HF_TOKEN the cache job could not fetch it."""
    evals = ("gpqamain", "gsm8k")
    commit = make_fixture_checkout(tmp_path / "PostTrainBench", evals=evals, agents=("codex",))
    cfg = _cfg(default_raw, {"path": str(tmp_path / "PostTrainBench"), "commit": commit}, evals)
    layout = Layout(str(tmp_path / "results"), str(tmp_path / "scratch"), str(tmp_path / "hf_home"))
    problems = checkout_data_problems(cfg, layout, env={}, reachable=lambda: True)
    assert len(problems) == 1 and problems[0].startswith(
        "evals[gpqamain]: its evaluate.py loads dataset Idavidrein/gpqa"
    )
    assert "gated" in problems[0] and "export HF_TOKEN" in problems[0]
    assert checkout_data_problems(cfg, layout, env={"HF_TOKEN": "hf-x"}, reachable=lambda: True) == []


def test_jobs_give_the_cache_rule_the_checkouts_list_and_the_evaluations_data(default_raw, tmp_path):
    from ptflow.config.load import resolve
    from ptflow.jobs.build import Jobs

    _cfg(default_raw, _checkout(tmp_path))
    loaded = resolve({**default_raw, "site": "generic"}, Path(__file__).resolve().parents[2])
    jobs = Jobs(loaded.cfg, loaded.site, loaded.layout)
    spec = jobs.checkout_cache_spec(lambda paths: {p: "0" * 40 for p in paths})
    assert spec["image"] is None  # the generic site runs no apptainer standard image: ptflow's fetch
    # resources.json's dir only: a changed evaluate.py is preflight's to ask (stale_warm_problems)
    assert spec["objects"] == {ptb.RESOURCES_DIR: "0" * 40}
    assert set(spec["evals"]) == set(EVALS) and spec["evals"]["gsm8k"][0]["repo"] == "openai/gsm8k"
    assert ptb.RESOURCES_DIR in jobs.checkout_spec()["paths"]
    assert loaded.layout.posttrainbench_cache_marker() in jobs.data_markers()
    # an apptainer site that builds PostTrainBench's standard image from the checkout: its own download script
    default_raw["posttrainbench"]["images"] = ["standard", "vllm_debug"]
    loaded = resolve({**default_raw, "site": "generic"}, Path(__file__).resolve().parents[2])
    assert loaded.site.runtime.kind == "apptainer"
    spec = Jobs(loaded.cfg, loaded.site, loaded.layout).checkout_cache_spec(lambda paths: dict.fromkeys(paths, "0"))
    assert spec["image"].endswith("/standard.sif")


# The real evaluate.py scripts' task calls at 9082063, read from the checkout (PostTrainBench's code is not copied:
# these are the calls, with the arguments that decide what is loaded): inspect_evals' tasks by name or function, and
# gpqamain's own hf_dataset call. The data probe records what each loads with the installed inspect_evals.
REAL_TASK_CALLS = {
    "gsm8k": "import inspect_evals.gsm8k\nTASK = 'inspect_evals/gsm8k'",
    "aime2025": "import inspect_evals.aime2025\nTASK = 'inspect_evals/aime2025'",
    "humaneval": "import inspect_evals.humaneval\nTASK = inspect_evals.humaneval.humaneval(sandbox='local')",
    "gpqamain": (
        "from inspect_ai import Task\nfrom inspect_ai.dataset import Sample, hf_dataset\n"
        "TASK = Task(dataset=hf_dataset(path='Idavidrein/gpqa', name='gpqa_main', split='train', shuffle_choices=True,"
        " sample_fields=lambda r: Sample(input=r['Question'], target='A', choices=['x'])))"
    ),
}
CALL_SCRIPT = "from inspect_ai import eval as inspect_eval\n{call}\ninspect_eval(TASK, model='vllm/final_model')\n"


def test_the_fixture_evaluate_scripts_load_as_the_real_ones_do(tmp_path, clean_env):
    """The fixture checkout's evaluate.py scripts make the loads the real ones make (the data probe's record of each,
    with the installed inspect_evals): same repos, arguments, order. bfcl is left out: the pinned checkout's
    inspect_evals loads a hub dataset (the fixture's), the installed one clones BFCL's GitHub data."""
    from ptflow.stages.posttrainbench.data_probe import probe

    evals = tuple(REAL_TASK_CALLS)
    checkout = _checkout(tmp_path, evals=evals)
    real = tmp_path / "real-calls"
    for e, call in REAL_TASK_CALLS.items():
        (real / e).mkdir(parents=True)
        (real / e / "evaluate.py").write_text(CALL_SCRIPT.format(call=call))
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_TOKEN": "hf-fixture-token"}
    root = Path(checkout["path"])
    with HubStandIn(hub_repos(evals, models=())) as hub:
        env["HF_ENDPOINT"] = hub.url
        fixture = probe({e: root / ptb.EVAL_DIR.format(eval=e) for e in evals}, root / ptb.TEMPLATES_DIR, "warm", env)
        reference = probe({e: real / e for e in evals}, root / ptb.TEMPLATES_DIR, "warm", env)
    for e in evals:
        assert [ld.args for ld in fixture[e].loads] == [ld.args for ld in reference[e].loads], e
        assert fixture[e].loads and all(ld.ok for ld in fixture[e].loads), fixture[e]
    assert [ld.args["data_dir"] for ld in reference["gsm8k"].loads] == ["main", "main"]  # the form of the issue
    # and, the hub gone, every fixture eval's data loads offline in that form from what the warm-up left
    from ptflow.stages.evaluate.sources import OFFLINE_ENV

    offline = probe({e: root / ptb.EVAL_DIR.format(eval=e) for e in evals}, root / ptb.TEMPLATES_DIR, "check",
                    {**env, **OFFLINE_ENV})  # fmt: skip
    assert {e: [ld.ok for ld in r.loads] for e, r in offline.items()} == {
        e: [True] * len(fixture[e].loads) for e in evals
    }  # fmt: skip


def test_a_cache_of_the_listed_config_only_is_refused_offline_with_what_it_holds(tmp_path, default_raw, clean_env):
    """The cache as resources.json's entry fills it (gsm8k's config "main"), not as inspect_evals asks (data_dir
    "main", its pinned revision): the evaluation would fail offline after the agent's hours. Preflight, offline,
    asks the checkout's evaluate.py (the data probe) and refuses it, one line naming the form and what the cache
    holds; the cache job with the hub unreachable fails with that line too, before any evaluation."""
    from ptflow.config.tasks import HFDataset
    from ptflow.stages.evaluate.sources import fetch_each_hf

    checkout = _checkout(tmp_path, evals=("gsm8k",))
    hf_home = tmp_path / "hf_home"
    listed = HFDataset("openai/gsm8k", None, ("test", "train"), name="main")
    with HubStandIn(hub_repos(("gsm8k",), models=())) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url}
        assert fetch_each_hf([listed], hf_home, tmp_path / "inspect_evals", env=env) == {}
    layout = Layout(str(tmp_path / "results"), str(tmp_path / "scratch"), str(hf_home))
    cfg = _cfg(default_raw, checkout, evals=("gsm8k",))
    problems = checkout_data_problems(cfg, layout, env={"HF_HUB_OFFLINE": "1"}, reachable=lambda: False)
    assert len(problems) == 1, problems
    line = problems[0]
    assert line.startswith("evals[gsm8k]: its evaluate.py loads dataset openai/gsm8k (config main), which does not")
    assert "data_dir='main'" in line and "the cache holds main" in line and "HF_HUB_OFFLINE is set" in line
    # the cache job, where the hub has gsm8k at its default branch only (not the revision inspect_evals pins)
    spec = {**_spec(tmp_path), "evals": {"gsm8k": _spec(tmp_path)["evals"]["gsm8k"]}}
    repos = hub_repos(("gsm8k",))
    for repo in repos:
        repo.commit = "0" * 40 if repo.repo_id == "openai/gsm8k" else repo.commit
    with HubStandIn(repos) as hub:
        clean_env.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(MissingReposError) as err:
            cache_checkout_resources(checkout, spec, tmp_path / "m.json", log=lambda _: None)
        assert "evals gsm8k: dataset openai/gsm8k (data_dir='main', split='train', revision=" in str(err.value)
        assert "could not be fetched" in str(err.value)
        assert not (tmp_path / "m.json").exists()
        # a site whose compute nodes reach the hub (evaluation.hub: online): its evaluations will fetch what the
        # cache lacks, so the job logs the miss and records it in the marker instead of stopping the matrix
        from ptflow.config.sites import EVAL_HUB_ENV

        clean_env.setenv(EVAL_HUB_ENV, "online")
        lines = []
        marker = cache_checkout_resources(checkout, spec, tmp_path / "m.json", log=lines.append)
    assert [ld["ok"] for ld in marker["evals"]["gsm8k"]] == [False]  # the few-shot load failed; nothing after it
    assert any("evaluation.hub: online" in line and "evals gsm8k: dataset openai/gsm8k" in line for line in lines)


def test_preflight_asks_an_evaluate_py_that_changed_since_the_cache_was_warmed(
    cached, tmp_path, default_raw, clean_env
):
    """The cache job warmed the cache for the evaluate.py scripts of one commit (the marker's ``probed``); a new commit
    whose gsm8k evaluate.py loads another form is asked offline by preflight (the data probe), which names the form
    and how to warm it; an unchanged checkout is not asked again."""
    import shutil

    from ptflow.stages.evaluate.preflight import stale_warm_problems
    from tests.support.ptb_checkout import commit_change

    checkout = _checkout(tmp_path)  # the same files as the module's checkout: the same commit and objects
    assert checkout["commit"] == cached["checkout"]["commit"]
    layout = Layout(str(tmp_path / "results"), str(tmp_path / "scratch"), str(cached["hf_home"]))
    Path(layout.posttrainbench_cache_marker()).parent.mkdir(parents=True)
    shutil.copy(cached["root"] / "hf_cache.json", layout.posttrainbench_cache_marker())
    assert stale_warm_problems(_cfg(default_raw, checkout), layout) == []
    script = Path(checkout["path"]) / ptb.EVAL_DIR.format(eval="gsm8k") / "evaluate.py"
    moved = script.read_text().replace("'data_dir': 'main'", "'name': 'socratic'")
    assert moved != script.read_text()
    commit = commit_change(Path(checkout["path"]), ptb.EVAL_DIR.format(eval="gsm8k") + "/evaluate.py", moved, "x")
    problems = stale_warm_problems(_cfg(default_raw, {**checkout, "commit": commit}), layout)
    assert len(problems) == 1, problems
    assert problems[0].startswith("evals[gsm8k]: its evaluate.py changed since the cache was warmed and loads "
                                  "dataset openai/gsm8k (name='socratic', split='train'")  # fmt: skip
    assert "--forcerun posttrainbench_cache" in problems[0]
