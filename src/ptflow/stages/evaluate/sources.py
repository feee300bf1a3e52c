"""Put an eval's data where its offline GPU job will look, and say — offline, one line per piece — what is missing.

Two roots hold everything: ``HF_HOME`` (the Hub cache ``hub/`` and the ``datasets`` prepared cache ``datasets/``)
and the inspect_evals cache root (``INSPECT_EVALS_CACHE_DIR``; URL files and BFCL's git data). A GPU job gets both
as environment variables (``data_env``) and nothing else.

Why Hub datasets are *loaded*, not just downloaded: ``datasets`` cannot load a Hub dataset offline from the hub
cache; offline it reads the prepared cache an online ``load_dataset`` with the same arguments wrote. So fetching
runs that load (in a child process, because huggingface_hub and datasets read HF_HOME and the offline switches
once, at import), and checking runs it again with HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ptflow.config.tasks import GitData, HFDataset, HFModel, Source, URLFile
from ptflow.files import sha256_file

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
FIX_HINT = "run the cache stage where the network is reachable (snakemake ... hf_cache), or copy the caches from there"


@dataclass(frozen=True)
class EvalCaches:
    """The two caches an evaluation reads its data from, offline: the shared HF cache (models, Hub datasets) and
    inspect_evals' own cache (what each task's data needs from each: this module)."""

    hf_home: str | Path
    evals_cache: str | Path


class DataFetchError(RuntimeError):
    """A piece of data that could not be fetched (one line: what, why, what to do)."""


def data_env(hf_home: str | Path, evals_cache: str | Path, offline: bool = True) -> dict[str, str]:
    """The environment variables that point inspect, inspect_evals, datasets and huggingface_hub at the data."""
    env = {"HF_HOME": str(Path(hf_home).resolve()), "INSPECT_EVALS_CACHE_DIR": str(Path(evals_cache).resolve())}
    if offline:
        env.update(OFFLINE_ENV)
    return env


# --- Hugging Face datasets and models: run in a child with the right environment --------------------------------


def _hf_worker(op: str, items: list[dict], hf_home, evals_cache, offline: bool, env=None, timeout: float | None = 3600):
    """Run ``op`` over ``items`` in a child process; returns its per-item results."""
    child_env = {k: v for k, v in (os.environ if env is None else env).items() if k not in OFFLINE_ENV}
    child_env.update(data_env(hf_home, evals_cache, offline=offline))
    with tempfile.TemporaryDirectory(prefix="ptflow-sources-") as tmp:
        request, result = Path(tmp) / "request.json", Path(tmp) / "result.json"
        request.write_text(json.dumps({"op": op, "items": items}))
        proc = subprocess.run(
            [sys.executable, "-m", "ptflow.stages.evaluate.sources", str(request), str(result)],
            env=child_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if not result.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"data worker ({op}) exited {proc.returncode}: {tail[0]}")
        return json.loads(result.read_text())


def _load_dataset(item: dict) -> None:
    import datasets

    for split in item["splits"]:
        datasets.load_dataset(
            item["repo"], item["name"], data_dir=item["data_dir"], split=split, revision=item["revision"]
        )


def _alias_data_dir_config(item: dict) -> None:
    """datasets 5.x writes a ``data_dir=`` load under the README config's id (``main-<hash>``) when online but
    looks it up offline under ``default-data_dir=<dir>``: link the second name to the first so the offline load
    (which inspect_evals' GSM8K makes) finds what the online one prepared."""
    if not item["data_dir"] or item["name"]:
        return
    import datasets
    from datasets.naming import camelcase_to_snakecase

    ns_name = item["repo"].split("/")
    ns_name[-1] = camelcase_to_snakecase(ns_name[-1])
    root = Path(datasets.config.HF_DATASETS_CACHE) / "___".join(ns_name)
    wanted = datasets.BuilderConfig("default").create_config_id(config_kwargs={"data_dir": item["data_dir"]})
    if (root / wanted).exists():
        return
    revision = item["revision"] or "*"
    # <root>/<config id>/<version>/<commit>/dataset_info.json: the config ids an online load prepared
    prepared = sorted(p.relative_to(root).parts[0] for p in root.glob(f"*/*/{revision}/dataset_info.json"))
    if prepared:
        (root / wanted).symlink_to(prepared[-1], target_is_directory=True)


def _worker_main(request_path: str, result_path: str) -> None:
    request = json.loads(Path(request_path).read_text())
    results = []
    for item in request["items"]:
        try:
            if request["op"] == "prime":
                _load_dataset(item)
                _alias_data_dir_config(item)
            elif request["op"] == "check":
                _load_dataset(item)
            elif request["op"] in ("fetch_model", "check_model"):
                from huggingface_hub import snapshot_download

                snapshot_download(
                    item["repo"], revision=item["revision"], local_files_only=request["op"] == "check_model"
                )
            else:
                raise ValueError(f"unknown op {request['op']!r}")
            results.append({"ok": True})
        except Exception as exc:  # reported per item, as one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            results.append({"ok": False, "error": f"{type(exc).__name__}: {first}"[:400]})
    tmp = Path(result_path).with_suffix(".tmp")
    tmp.write_text(json.dumps(results))
    os.replace(tmp, result_path)


def _hf_item(src: HFDataset) -> dict:
    return {"repo": src.repo, "revision": src.revision, "splits": list(src.splits), "name": src.name,
            "data_dir": src.data_dir}  # fmt: skip


# --- URL files and BFCL's git data -------------------------------------------------------------------------------


def fetch_url(src: URLFile, evals_cache: Path, timeout: float = 60) -> Path:
    dest = evals_cache / src.cache_path
    if dest.is_file() and dest.stat().st_size and (src.sha256 is None or sha256_file(dest) == src.sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(src.url, timeout=timeout) as resp:  # noqa: S310
            shutil.copyfileobj(resp, out)
        if src.sha256 is not None and sha256_file(Path(tmp)) != src.sha256:
            raise DataFetchError(f"{src.describe()}: sha256 differs from the pinned {src.sha256}; upstream changed")
        os.replace(tmp, dest)
    except DataFetchError:
        raise
    except Exception as exc:
        raise DataFetchError(f"{src.describe()}: download failed ({type(exc).__name__}: {exc}); {FIX_HINT}") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def fetch_git(src: GitData, evals_cache: Path, force: bool = False) -> Path:
    """BFCL's data through inspect_evals' own downloaders (git sparse checkout at the pinned commit), into a
    temp dir renamed into place, so a failed clone leaves nothing that looks complete. ``force``: fetch even where
    ``src.required`` is there (the caller knows something is missing: an evaluation asked for the clone); what is
    there is kept."""
    evals_cache = Path(evals_cache)
    dest = evals_cache / src.cache_dir
    if not force and not missing_git(src, evals_cache) and dest.exists():
        return dest
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=_mkdir(dest.parent)))
    try:
        if src.kind == "bfcl-data":
            from inspect_evals.bfcl.data import download_github_directory

            download_github_directory(src.repo_url, src.commit, src.sparse_path, tmp)
        elif src.kind == "bfcl-func-source":
            from inspect_evals.bfcl.backends import download_func_source

            download_func_source(dest_dir=tmp, repo_url=src.repo_url, commit=src.commit, sparse_path=src.sparse_path)
        else:
            raise ValueError(f"unknown git data kind {src.kind!r}")
        if dest.exists():  # BFCL/ may already hold func_source_code/ (or the reverse): merge, do not clobber
            for item in tmp.iterdir():
                target = dest / item.name
                if not target.exists():
                    os.replace(item, target)
        else:
            os.replace(tmp, dest)
    except Exception as exc:
        raise DataFetchError(f"{src.describe()}: fetch failed ({_why(exc)}); {FIX_HINT}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _why(exc: Exception) -> str:
    """An exception in one line; a failed git command with the last line it wrote (git's own reason)."""
    if isinstance(exc, subprocess.CalledProcessError):
        said = [ln.strip() for ln in (exc.stderr or "").splitlines() if ln.strip()]
        said = [ln for ln in said if ln.startswith(("fatal:", "error:"))][:1] or said[-1:]  # git's reason first
        cmd = exc.cmd if isinstance(exc.cmd, str) else " ".join(str(c) for c in exc.cmd[:2])
        return f"`{cmd}` exited {exc.returncode}" + (f": {said[0]}" if said else "")
    return f"{type(exc).__name__}: {exc}"


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def missing_git(src: GitData, evals_cache: Path) -> list[str]:
    root = evals_cache / src.cache_dir
    if not src.required:  # a directory needed as a whole (BFCL's function sources)
        return [str(root)] if not root.is_dir() or not any(root.iterdir()) else []
    return [str(root / rel) for rel in src.required if not (root / rel).exists()]


# --- the two entry points ------------------------------------------------------------------------------------


def fetch_sources(sources: list[Source], hf_home, evals_cache, env=None, log=print) -> list[str]:
    """Download every source (real downloads; HF_TOKEN and HF_ENDPOINT from ``env``) and return what was done."""
    env = dict(os.environ if env is None else env)
    evals_cache = Path(evals_cache)
    done: list[str] = []
    hf = [s for s in sources if isinstance(s, HFDataset)]
    gated_without_token = [s for s in hf if s.gated and not env.get("HF_TOKEN")]
    if gated_without_token:
        names = ", ".join(s.repo for s in gated_without_token)
        raise DataFetchError(
            f"{names} is gated: set HF_TOKEN in the environment to a token of an account that accepted its terms"
        )
    if hf:
        results = _hf_worker("prime", [_hf_item(s) for s in hf], hf_home, evals_cache, offline=False, env=env)
        for src, res in zip(hf, results, strict=True):
            if not res["ok"]:
                raise DataFetchError(f"{src.describe()}: could not be loaded online ({res['error']}); {FIX_HINT}")
            log(f"fetched {src.describe()} into {hf_home}")
            done.append(src.describe())
    models = [s for s in sources if isinstance(s, HFModel)]
    if models:
        items = [{"repo": m.repo, "revision": m.revision} for m in models]
        for src, res in zip(models, _hf_worker("fetch_model", items, hf_home, evals_cache, False, env), strict=True):
            if not res["ok"]:
                raise DataFetchError(f"{src.describe()}: download failed ({res['error']}); {FIX_HINT}")
            done.append(src.describe())
    for src in sources:
        if isinstance(src, URLFile):
            fetch_url(src, evals_cache)
        elif isinstance(src, GitData):
            fetch_git(src, evals_cache)
        else:
            continue
        log(f"fetched {src.describe()} into {evals_cache}")
        done.append(src.describe())
    return done


def fetch_each_hf(sources: list[Source], hf_home, evals_cache, env=None) -> dict[Source, str]:
    """Download every Hub dataset and model of ``sources`` (one child process for each kind, not one per piece: a
    resources.json lists hundreds) and return the error of each that failed; the others are not stopped by one
    failure. A gated dataset without HF_TOKEN in ``env`` fails without a request. No time limit of its own: the
    list may be hundreds of GB, and the cache job's runtime bounds it (a retry goes on from what is complete)."""
    env = dict(os.environ if env is None else env)
    errors: dict[Source, str] = {}
    hf = [s for s in sources if isinstance(s, HFDataset)]
    for src in hf:
        if src.gated and not env.get("HF_TOKEN"):
            errors[src] = "gated: set HF_TOKEN to a token of an account that accepted its terms"
    hf = [s for s in hf if s not in errors]
    if hf:
        items = [_hf_item(s) for s in hf]
        results = _hf_worker("prime", items, hf_home, evals_cache, offline=False, env=env, timeout=None)
        errors.update({src: res["error"] for src, res in zip(hf, results, strict=True) if not res["ok"]})
    models = [s for s in sources if isinstance(s, HFModel)]
    if models:
        items = [{"repo": m.repo, "revision": m.revision} for m in models]
        results = _hf_worker("fetch_model", items, hf_home, evals_cache, False, env, timeout=None)
        errors.update({src: res["error"] for src, res in zip(models, results, strict=True) if not res["ok"]})
    return errors


def missing_each_hf(sources: list[Source], hf_home, evals_cache, env=None) -> dict[Source, str]:
    """The Hub datasets and models of ``sources`` that an offline load does not find, each with its error."""
    missing: dict[Source, str] = {}
    hf = [s for s in sources if isinstance(s, HFDataset)]
    if hf:
        results = _hf_worker("check", [_hf_item(s) for s in hf], hf_home, evals_cache, offline=True, env=env)
        missing.update({src: res["error"] for src, res in zip(hf, results, strict=True) if not res["ok"]})
    models = [s for s in sources if isinstance(s, HFModel)]
    if models:
        items = [{"repo": m.repo, "revision": m.revision} for m in models]
        results = _hf_worker("check_model", items, hf_home, evals_cache, True, env)
        missing.update({src: res["error"] for src, res in zip(models, results, strict=True) if not res["ok"]})
    return missing


def missing_sources(sources: list[Source], hf_home, evals_cache, env=None) -> list[str]:
    """One line per missing piece, checked without the network (an empty list: ready for an offline job)."""
    evals_cache = Path(evals_cache)
    lines: list[str] = []
    hf = [s for s in sources if isinstance(s, HFDataset)]
    if hf:
        results = _hf_worker("check", [_hf_item(s) for s in hf], hf_home, evals_cache, offline=True, env=env)
        for src, res in zip(hf, results, strict=True):
            if not res["ok"]:
                token = " (gated: the fetch needs HF_TOKEN)" if src.gated else ""
                lines.append(f"missing {src.describe()} in {hf_home}{token}: {res['error']}; {FIX_HINT}")
    models = [s for s in sources if isinstance(s, HFModel)]
    if models:
        items = [{"repo": m.repo, "revision": m.revision} for m in models]
        for src, res in zip(models, _hf_worker("check_model", items, hf_home, evals_cache, True, env), strict=True):
            if not res["ok"]:
                lines.append(f"missing {src.describe()} in {hf_home}; {FIX_HINT}")
    for src in sources:
        if isinstance(src, URLFile):
            path = evals_cache / src.cache_path
            # Presence only: the fetch verified the sha256 before renaming the file into place, and a file
            # placed there by other means (a mirror, a test fixture) is the operator's choice.
            if not path.is_file() or not path.stat().st_size:
                lines.append(f"missing {src.describe()} at {path}; {FIX_HINT}")
        elif isinstance(src, GitData):
            absent = missing_git(src, evals_cache)
            if absent:
                shown = ", ".join(absent[:3]) + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
                lines.append(f"missing {src.describe()}: {shown}; {FIX_HINT}")
    return lines


# --- PostTrainBench's resources.json ---------------------------------------------------------------------------


def parse_resources_json(path: str | Path) -> list[Source]:
    """PostTrainBench's ``containers/download_hf_cache/resources.json`` as sources.

    Format: ``{"models": ["org/name", ...], "datasets": [{"dataset": "org/name", "config": str | "configs": [str],
    "splits": [str]}, ...]}``; ``config`` defaults to the dataset's default config, no ``splits`` means every split
    (``load_dataset`` without ``split``). No revisions: entries are unpinned (loaded at the default branch)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from None
    return resources_from_text(text, path)


def resources_from_text(text: str, path) -> list[Source]:
    """:func:`parse_resources_json` of a file's text (read from git at a commit, say); ``path`` names it in errors."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict) or set(data) - {"models", "datasets"}:
        raise ValueError(f"{path}: expected an object with 'models' and 'datasets', got keys {sorted(data)}")
    out: list[Source] = []
    for i, model in enumerate(data.get("models", [])):
        if not isinstance(model, str) or model.count("/") != 1:
            raise ValueError(f"{path}: models[{i}] = {model!r} is not an org/name repo id")
        out.append(HFModel(model))
    for i, entry in enumerate(data.get("datasets", [])):
        where = f"{path}: datasets[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("dataset"), str):
            raise ValueError(f"{where} needs a 'dataset' repo id")
        extra = set(entry) - {"dataset", "config", "configs", "splits"}
        if extra:
            raise ValueError(f"{where} ({entry['dataset']}): unknown keys {sorted(extra)}")
        if "config" in entry and "configs" in entry:
            raise ValueError(f"{where} ({entry['dataset']}): give 'config' or 'configs', not both")
        configs = entry.get("configs") or [entry.get("config")]
        splits = tuple(entry.get("splits") or [None])
        for config in configs:
            name = None if config in (None, "default") else config
            out.append(HFDataset(entry["dataset"], None, splits, name=name))  # type: ignore[arg-type]
    return out


if __name__ == "__main__":
    _worker_main(sys.argv[1], sys.argv[2])
