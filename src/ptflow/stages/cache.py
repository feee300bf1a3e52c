"""The HF cache stage: put each model and dataset the matrix needs into HF_HOME and describe it in a marker.

``source: hub`` repos are downloaded with huggingface_hub at a pinned revision; when they are already complete in
the cache no network is used. ``source: local`` repos (the embedded default) are made here and published into
the same cache layout, so later stages cannot tell the two apart.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ptflow.cluster import hfcache
from ptflow.files import write_json_atomic
from ptflow.stages.data.preprocess import GSM8K_SPLIT_FILE


class MissingReposError(RuntimeError):
    """Repos that are not in the cache and could not be downloaded."""


def fetch_hub_repo(hf_home: str | Path, repo_id: str, repo_type: str, revision: str, log=print) -> Path:
    """Snapshot of ``repo_id@revision`` in the cache: offline when complete, else downloaded.

    Tokens come only from the environment (HF_TOKEN), never from arguments, so they cannot reach logs or argv.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache_dir = str(hfcache.hub_dir(hf_home))
    try:
        path = snapshot_download(
            repo_id, repo_type=repo_type, revision=revision, cache_dir=cache_dir, local_files_only=True
        )
        log(f"{repo_type} {repo_id}@{revision}: complete in the cache, no network used")
        return Path(path)
    except LocalEntryNotFoundError:
        pass
    log(f"{repo_type} {repo_id}@{revision}: downloading into {cache_dir}")
    try:
        return Path(snapshot_download(repo_id, repo_type=repo_type, revision=revision, cache_dir=cache_dir))
    except Exception as exc:  # network errors come in many types; the message is what the user needs
        raise MissingReposError(
            f"{repo_type} {repo_id}@{revision} is not in {cache_dir} and could not be downloaded "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); download it where the "
            "network is reachable or point paths.hf_home at a cache that has it"
        ) from exc


def _write_split_parquet(records: list[dict], path: Path) -> None:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(records, columns=["question", "answer"]).to_parquet(path, index=False)


def make_local_dataset(generator: dict, out_dir: Path) -> None:
    """A GSM8K-format dataset (question, answer) in openai/gsm8k's file layout; no test question is trained on."""
    from ptflow.stages.data.synthetic import generate_arithmetic, generate_digitwise, split_disjoint

    total = generator["n_train"] + generator["n_test"]
    if generator.get("carry", True):
        records = generate_arithmetic(generator["op"], generator["digits"], total, generator["seed"])
    else:
        records = generate_digitwise(generator["op"], generator["digits"], total, generator["seed"])
    train, test = split_disjoint(records, generator["n_test"], generator["seed"])
    if not train:
        raise ValueError(
            f"generator {generator}: holding out {generator['n_test']} test questions leaves none "
            "to train on; raise digits or lower n_test"
        )
    _write_split_parquet(train[: generator["n_train"]], out_dir / GSM8K_SPLIT_FILE.format(split="train"))
    _write_split_parquet(test, out_dir / GSM8K_SPLIT_FILE.format(split="test"))


def cache_dataset(hf_home: str | Path, dataset: dict, marker_path: str | Path, log=print) -> dict:
    repo, revision = dataset["repo"], dataset.get("revision", "main")
    if dataset["source"] == "local":
        with tempfile.TemporaryDirectory() as tmp:
            make_local_dataset(dataset["generator"], Path(tmp))
            commit = hfcache.publish_local_repo(hf_home, repo, "dataset", tmp, revision)
        log(f"dataset {repo}: generated locally and published as commit {commit}")
    else:
        fetch_hub_repo(hf_home, repo, "dataset", revision, log)
    entry = hfcache.describe_repo(hf_home, repo, "dataset", revision, dataset["source"])
    write_json_atomic(marker_path, entry)
    return entry


def tokenizer_texts(dataset_snapshots: list[Path]) -> list[str]:
    """Every text the tiny models will see: questions, answers and the verl prompt wrapping them."""
    import pandas as pd

    from ptflow.stages.data.verl_format import to_verl_frame

    texts: list[str] = []
    for snap in dataset_snapshots:
        for split in ("train", "test"):
            df = pd.read_parquet(snap / GSM8K_SPLIT_FILE.format(split=split))
            frame = to_verl_frame(df.to_dict("records"), "tokenizer", split)
            texts += [m["content"] for prompt in frame["prompt"] for m in prompt]
            texts += list(df["answer"])
    return texts


def cache_model(
    hf_home: str | Path, model: dict, dataset_markers: list[str | Path], marker_path: str | Path, log=print
) -> dict:
    revision = model.get("revision", "main")
    if model["source"] == "local":
        from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama

        snaps = []
        for marker in dataset_markers:
            entry = json.loads(Path(marker).read_text())
            snaps.append(hfcache.snapshot_path(hf_home, entry["repo"], "dataset", entry["revision"]))
        tokenizer = build_char_tokenizer(tokenizer_texts(snaps))
        tiny = model["tiny"]
        with tempfile.TemporaryDirectory() as tmp:
            create_tiny_llama(
                tmp,
                tokenizer,
                layers=tiny["layers"],
                hidden=tiny["hidden"],
                heads=tiny["heads"],
                seed=tiny["seed"],
            )
            commit = hfcache.publish_local_repo(hf_home, model["id"], "model", tmp, revision)
        log(f"model {model['id']}: tiny Llama {tiny} created locally, published as commit {commit}")
    else:
        fetch_hub_repo(hf_home, model["id"], "model", revision, log)
    entry = hfcache.describe_repo(hf_home, model["id"], "model", revision, model["source"])
    write_json_atomic(marker_path, entry)
    return entry


def cache_sources(
    sources: list, hf_home: str | Path, evals_cache: str | Path, marker_path: str | Path, what: dict, log=print
) -> dict:
    """Every piece of ``sources`` (``ptflow.config.tasks``) in the caches: checked offline first, fetched (real
    downloads, in this CPU job) only when something is missing, then checked again; the marker lists each piece."""
    from ptflow.stages.evaluate.sources import fetch_sources, missing_sources

    missing = missing_sources(sources, hf_home, evals_cache)
    if missing:
        log(f"{len(missing)} piece(s) missing: fetching {len(sources)} source(s)")
        fetch_sources(sources, hf_home, evals_cache, log=log)
        still = missing_sources(sources, hf_home, evals_cache)
        if still:
            raise MissingReposError(" | ".join(still))
    else:
        log(f"all {len(sources)} piece(s) complete in the caches, no network used")
    entry = {
        **what,
        "hf_home": str(Path(hf_home).resolve()),
        "evals_cache": str(Path(evals_cache).resolve()),
        "pieces": [s.describe() for s in sources],
        "fetched": bool(missing),
    }
    write_json_atomic(marker_path, entry)
    return entry


def cache_eval_data(hf_home, evals_cache, spec: dict, marker_path, log=print) -> dict:
    """What one eval's evaluation reads (its task's data at the pinned revisions, a local grader model)."""
    from ptflow.config import tasks

    sources = tasks.sources_for(spec["task"], spec.get("task_args"), spec.get("grader"))
    return cache_sources(sources, hf_home, evals_cache, marker_path, {"eval": spec["id"], "task": spec["task"]}, log)


def cache_resources(hf_home, evals_cache, resources_files: list[str], marker_path, log=print) -> dict:
    """The models and datasets of PostTrainBench resources.json files (``cache_resources`` in config)."""
    from ptflow.stages.evaluate.sources import parse_resources_json

    sources = [s for f in resources_files for s in parse_resources_json(f)]
    return cache_sources(sources, hf_home, evals_cache, marker_path, {"resources": list(resources_files)}, log)


def combine_markers(
    hf_home: str | Path, markers: list[str | Path], out: str | Path, data_markers: list[str | Path] = ()
) -> dict:
    """The whole cache's marker: every repo, and what each eval (and cache_resources) put into the caches."""
    repos = [json.loads(Path(m).read_text()) for m in markers]
    data = [json.loads(Path(m).read_text()) for m in data_markers]
    return hfcache.write_marker(out, hf_home, repos, data)


def checkout_eval_data(spec: dict) -> dict[str, list]:
    """eval dir -> the HFDataset sources its evaluation loads (``Jobs.checkout_cache_spec``'s ``evals``)."""
    from ptflow.config.tasks import HFDataset

    return {
        ev: [HFDataset(d["repo"], None, tuple(d["splits"]), name=d["config"], gated=d["gated"]) for d in data]
        for ev, data in spec["evals"].items()
    }


def _loads_complete(eval_dir: str, found) -> bool:
    """An offline probe found everything: no load failed, and an eval that loads from the hub loaded something."""
    from ptflow.config import posttrainbench as ptb

    return not found.failed() and (bool(found.loads) or not ptb.hub_data(eval_dir))


def warm_checkout_evals(root: Path, evals: list[str], hf_home, evals_cache, env=None, log=print) -> dict[str, list]:
    """Each eval's data loaded by its own evaluate.py (the data probe): offline first (a complete cache asks the
    hub nothing), else online, then again offline; returns each eval's loads; raises :class:`MissingReposError`
    with one line per miss (the eval, the dataset, the arguments, what the cache holds)."""
    from ptflow.config import posttrainbench as ptb
    from ptflow.stages.posttrainbench.data_probe import probe, probe_env

    dirs = {e: root / ptb.EVAL_DIR.format(eval=e) for e in evals}
    if not dirs:
        return {}
    templates = root / ptb.TEMPLATES_DIR
    offline_env = probe_env(env, hf_home, evals_cache, offline=True)
    check = probe(dirs, templates, "check", offline_env)
    if all(_loads_complete(e, check[e]) for e in dirs):
        log(f"the evaluations' data ({', '.join(sorted(dirs))}) loads offline as they ask for it: no network used")
        return {e: list(check[e].loads) for e in sorted(dirs)}
    warm = probe(dirs, templates, "warm", probe_env(env, hf_home, evals_cache, offline=False))
    check = probe(dirs, templates, "check", offline_env)
    problems, git_problems = [], []
    for e in sorted(dirs):
        online, offline = warm[e], check[e]
        log(f"evals {e}: evaluate.py loads {len(online.loads)} dataset(s) online ({online.stopped}); offline: "
            f"{sum(ld.ok for ld in offline.loads)} loaded ({offline.stopped})")  # fmt: skip
        unfetched = [ld.args for ld in online.failed()]
        git_problems += [_git_unfetched(e, ld, evals_cache) for ld in online.failed() if ld.kind == "git"]
        problems += [f"evals {e}: {ld.describe()} could not be fetched ({ld.error})"
                     for ld in online.failed() if ld.kind != "git"]  # fmt: skip
        problems += [
            f"evals {e}: {ld.describe()} does not load offline ({ld.error})"
            + ("" if ld.kind == "git" else
               f"; the cache holds {', '.join(ld.cache_holds) if ld.cache_holds else 'nothing of it'}")
            for ld in offline.failed()
            if ld.args not in unfetched  # said once: why it is not there
        ]  # fmt: skip
        if ptb.hub_data(e) and not online.loads:
            problems.append(f"evals {e}: its evaluate.py stopped before it loaded any dataset ({online.stopped}); "
                            "its data cannot be warmed from here")  # fmt: skip
        elif not offline.failed() and online.stopped != offline.stopped:
            problems.append(f"evals {e}: its evaluate.py gets further online than offline (offline: "
                            f"{offline.stopped}); data it reads by other means than the hub is missing")  # fmt: skip
    if git_problems and not problems:
        # one line: what the site must allow (a clone inspect_evals makes is not the hub's, evaluation.hub aside)
        raise MissingReposError(" | ".join(git_problems))
    if problems and _evaluations_online(env):
        log(f"{len(problems)} of the evaluations' loads do not load offline; the site's compute nodes reach the hub "
            f"(evaluation.hub: online), so its evaluations fetch them: " + " | ".join(problems))  # fmt: skip
    elif problems:
        raise MissingReposError(
            f"the evaluations' data does not load offline from {hf_home}: " + " | ".join(git_problems + problems)
            + "; check the hub (HF_ENDPOINT) and HF_TOKEN for gated datasets, or, where the compute nodes reach "
            "the hub, say so in the site file (evaluation.hub: online)"
        )  # fmt: skip
    if git_problems:
        raise MissingReposError(" | ".join(git_problems))
    return {e: list(check[e].loads) for e in sorted(dirs)}


def _git_unfetched(eval_dir: str, load, evals_cache) -> str:
    """One line for a git clone an evaluation makes (inspect_evals' BFCL data) that failed from the cache job:
    what the site must allow (the host, the repository, the commit), or what to copy in instead."""
    from urllib.parse import urlparse

    from ptflow.stages.evaluate.sources import FIX_HINT

    src = load.git_data()
    url = urlparse(src.repo_url)
    repo = url.path.strip("/").removesuffix(".git")
    why = (load.error or "").replace(f"; {FIX_HINT}", "").replace(f"DataFetchError: {src.describe()}: ", "")
    return (
        f"evals {eval_dir}: its evaluate.py clones {src.describe()} and the clone failed from the cache job ({why}); "
        f"the site must let the cache job reach {url.hostname or src.repo_url} ({url.scheme or 'git'}) for {repo} "
        f"at commit {src.commit}, or {Path(evals_cache).resolve() / src.cache_dir} must be copied in from where it "
        "can (the evaluations run offline)"
    )


def _evaluations_online(env=None) -> bool:
    """The site's compute nodes reach the hub (``evaluation.hub: online``): its checkout evaluations run online."""
    from ptflow.config.sites import EVAL_HUB_ENV

    return (os.environ if env is None else env).get(EVAL_HUB_ENV) == "online"


def probed_objects(root: Path, commit: str | None, evals: list[str]) -> dict[str, str]:
    """eval dir -> the git object id of ``src/eval/tasks/<eval>`` at ``commit`` (what the probe ran)."""
    from ptflow.config import posttrainbench as ptb

    if not commit or not evals:
        return {}
    ids = ptb.object_ids(root, commit, [ptb.EVAL_DIR.format(eval=e) for e in evals])
    return {e: ids[ptb.EVAL_DIR.format(eval=e)] for e in evals}


def _fetched_commit(hf_home, repo_id: str, repo_type: str) -> str | None:
    """The commit the default branch resolved to when it was fetched (huggingface_hub's refs/main), or None."""
    ref = hfcache.repo_folder(hf_home, repo_id, repo_type) / "refs" / "main"
    return ref.read_text().strip() if ref.is_file() else None


def run_download_script(checkout: Path, image: str, hf_home, log=print) -> int:
    """The checkout's own download_hf_cache.sh (PostTrainBench's step), in its checkout, with the variables it reads:
    HF_HOME and the image (POST_TRAIN_BENCH_CONTAINERS_DIR / POST_TRAIN_BENCH_CONTAINER_NAME.sif). Tokens stay in
    the environment. Its output goes to this job's log; its exit status is returned."""
    import os
    import subprocess

    from ptflow.config import posttrainbench as ptb

    image_path = Path(image)
    env = {
        **os.environ,
        "HF_HOME": str(Path(hf_home).resolve()),
        "POST_TRAIN_BENCH_CONTAINERS_DIR": str(image_path.parent),
        "POST_TRAIN_BENCH_CONTAINER_NAME": image_path.stem,
    }
    log(f"running the checkout's {ptb.DOWNLOAD_SCRIPT} in {image_path} (HF_HOME={env['HF_HOME']})")
    proc = subprocess.run(
        ["bash", ptb.DOWNLOAD_SCRIPT], cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    for line in proc.stdout.splitlines():
        log(f"  | {line}")
    return proc.returncode


def cache_checkout_resources(checkout: dict, spec: dict, marker_path: str | Path, log=print, env=None) -> dict:
    """PostTrainBench's HF_HOME from its checkout: every model and dataset of ``resources.json``, fetched with the
    checkout's download script where ``spec["image"]`` names the standard image it runs in, else (and for whatever
    the script left missing) with ptflow's fetch over the same list. Then each evaluation's data is warmed by the
    evaluation's own loading path (its evaluate.py run up to its model, :mod:`ptflow.stages.posttrainbench.
    data_probe`: the loads in the exact form they will be asked for) and proved loadable offline the same way.
    A listed piece that cannot be had is recorded in the marker (``failed``) and does not stop the job (the agents'
    training data is hundreds of datasets, and an entry can be broken: the real list's gsm8k ``default`` config is
    ambiguous); what an evaluation loads does: :class:`MissingReposError`, one line per miss (the eval, the
    dataset, the arguments, what the cache holds). The marker names each repo and the commit fetched, and each
    evaluation's loads."""
    from ptflow.config import posttrainbench as ptb
    from ptflow.config.tasks import HFDataset, HFModel
    from ptflow.stages.evaluate.sources import fetch_each_hf, missing_each_hf, parse_resources_json

    root = Path(checkout["path"])
    hf_home, evals_cache = spec["hf_home"], spec["evals_cache"]
    resources = root / ptb.RESOURCES_FILE
    sources = parse_resources_json(resources)
    needed = checkout_eval_data(spec)
    listed = {(s.repo, s.name) for s in sources if isinstance(s, HFDataset)}
    unlisted = [f"evals {ev}: loads {d.repo}" + (f" (config {d.name})" if d.name else "")
                for ev, data in needed.items() for d in data if (d.repo, d.name) not in listed]  # fmt: skip
    if unlisted:
        raise MissingReposError(
            f"{resources} does not list what the evaluations load ({'; '.join(unlisted)}); use a checkout whose "
            "resources.json lists them"
        )
    how = "ptflow"
    if spec.get("image"):
        rc = run_download_script(root, spec["image"], hf_home, log)
        how = f"{ptb.DOWNLOAD_SCRIPT} in {spec['image']}"
        if rc != 0:
            log(f"{ptb.DOWNLOAD_SCRIPT} exited {rc}; ptflow fetches what it left missing")
    missing = missing_each_hf(sources, hf_home, evals_cache, env=env)
    if missing:
        log(f"{len(missing)} of {len(sources)} piece(s) not in the cache: fetching them")
        fetch_each_hf(list(missing), hf_home, evals_cache, env=env)
        if how != "ptflow":
            how += " (then ptflow for what it left missing)"
    else:
        log(f"all {len(sources)} piece(s) complete in the cache, no network used")
    still = missing_each_hf(sources, hf_home, evals_cache, env=env)
    loads = warm_checkout_evals(root, list(needed), hf_home, evals_cache, env=env, log=log)
    repos: dict[tuple[str, str], dict] = {}
    for src in sources:
        kind = "model" if isinstance(src, HFModel) else "dataset"
        entry = repos.setdefault((kind, src.repo), {"repo": src.repo, "repo_type": kind, "configs": []})
        if kind == "dataset":
            entry["configs"].append({"config": src.name, "splits": list(src.splits), "complete": src not in still})
        else:
            entry["complete"] = src not in still
    for (kind, repo_id), entry in repos.items():
        entry["revision"] = "main"  # resources.json pins none: the default branch
        entry["commit"] = _fetched_commit(hf_home, repo_id, kind)
    marker = {
        "checkout": checkout.get("commit"),
        "resources": ptb.RESOURCES_FILE,
        "object": spec["objects"].get(ptb.RESOURCES_DIR),
        "fetched_by": how,
        "hf_home": str(Path(hf_home).resolve()),
        "repos": sorted(repos.values(), key=lambda r: (r["repo_type"], r["repo"])),
        "evals": {ev: [{**ld.args, "ok": ld.ok} for ld in found] for ev, found in loads.items()},
        # the git object of each eval dir whose evaluate.py warmed the cache: preflight asks a changed one again
        "probed": probed_objects(root, checkout.get("commit"), list(loads)),
        "failed": sorted(f"{s.describe()}: {err}" for s, err in still.items()),
    }
    if marker["failed"]:
        log(f"{len(marker['failed'])} listed piece(s) could not be had (no evaluation loads them): "
            + " | ".join(marker["failed"][:5]))  # fmt: skip
    write_json_atomic(marker_path, marker)
    log(f"wrote {marker_path}: {len(repos)} repo(s), fetched by {how}")
    return marker
