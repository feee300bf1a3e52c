"""What a checkout's evaluations load from the hub, asked of their own ``evaluate.py``: to warm the cache in exactly
the form each will ask for, and to prove afterwards, offline, that it is there.

``datasets`` finds a dataset offline only under the exact arguments of the load that will ask for it: the prepared
cache of ``load_dataset("openai/gsm8k", "main")`` does not answer ``load_dataset("openai/gsm8k", data_dir="main",
revision=<sha>)``, which is what inspect_evals' GSM8K asks. So the arguments are not written down here; they are
recorded from the evaluation itself. Each eval's ``evaluate.py`` runs in its directory as the evaluation runs it, with
the evaluation's interpreter and packages (the installed inspect_evals, whatever its pins), up to the point where it
would start its model:

- ``inspect_ai.eval`` is replaced by a stop that first builds the tasks it was given (a registry name such as
  ``inspect_evals/gsm8k`` is created as inspect creates it): the tasks' datasets load there, as in a real run.
- ``datasets.load_dataset`` is wrapped: each call's arguments and outcome are recorded (``warm``: after an online
  load with ``data_dir`` and no config name, the offline name of that prepared cache is linked to it, the one quirk
  of ``datasets`` 5 that a load with the same arguments cannot fix by itself).
- inspect_evals' git downloaders (``inspect_evals.bfcl``'s ``download_github_directory`` and
  ``download_func_source``: ptflow's inspect_evals clones BFCL's data from GitHub, no hub dataset) are wrapped the same
  way: each call's repository, commit, path and target dir are recorded (``kind`` ``git``). ``warm`` fetches it with
  ptflow's own git fetch (:func:`ptflow.stages.evaluate.sources.fetch_git`: the same downloader, into a temp dir
  renamed into place in the inspect_evals cache); ``check`` never clones: the evaluation asks for the clone only
  where the cache lacks it, so the call is a miss.
- ``--model-path`` names no model (a path holding the family name, so the scripts pick their template as usual):
  a script that loads its data by other means stops when it reaches for the model.

inspect's own copy of loaded datasets (``~/.cache/inspect_ai``) is pointed at an empty directory for the probe, so
what is checked is the HF cache the jobs share, not a copy on this node.

Run ``python -m ptflow.stages.posttrainbench.data_probe <request.json> <result.json>`` (``probe`` does it in a child
process with the environment it is given: online to warm, :data:`OFFLINE_ENV` to check).
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# A model path that names no model, with a family name in it: PostTrainBench's scripts pick a chat template by a
# substring of the path (qwen3.jinja here), and their tool-call parser (bfcl) the same way.
PROBE_MODEL = "/nonexistent/ptflow-data-probe/qwen3-probe"
STOPPED_AT_EVAL = "stopped at inspect_ai.eval (its tasks built)"
PROBE_TIMEOUT_S = 3600  # warm mode downloads: the cache job's runtime is the real bound
LOAD_ARGS = ("path", "name", "data_dir", "data_files", "split", "revision")
GIT_ARGS = ("repo_url", "commit", "sparse_path", "cache_dir", "fetcher")
# inspect_evals' git downloaders: (module, function, the GitData kind ptflow's fetch_git runs, its target argument)
GIT_DOWNLOADERS = (
    ("inspect_evals.bfcl.data", "download_github_directory", "bfcl-data", "local_dir"),
    ("inspect_evals.bfcl.backends.downloader", "download_func_source", "bfcl-func-source", "dest_dir"),
)


class ProbeStop(BaseException):  # noqa: N818 - a control-flow signal, not an error; BaseException so no script catches it
    """Raised where the evaluation would start its model."""


class ProbeMiss(BaseException):  # noqa: N818 - BaseException: no retry policy (backoff, tenacity) catches it
    """Raised, in check mode, for a load the cache does not answer: offline a miss is final, and inspect_evals'
    retries would only sleep (3 tries with waits of up to a minute each, 5 where CI is set)."""


@dataclass(frozen=True)
class Load:
    """One ``datasets.load_dataset`` call an evaluation makes (its arguments as given), and how it went."""

    eval: str
    args: dict
    ok: bool
    error: str | None = None
    cache_holds: tuple[str, ...] = ()
    kind: str = "dataset"  # "dataset": datasets.load_dataset; "git": an inspect_evals git download (GIT_ARGS)

    def git_data(self):
        """The :class:`ptflow.config.tasks.GitData` of a ``git`` load."""
        from ptflow.config.tasks import GitData

        a = self.args
        return GitData(a["repo_url"], a["commit"], a["sparse_path"], a["cache_dir"], (), a["fetcher"])

    def describe(self) -> str:
        if self.kind == "git":
            return self.git_data().describe()
        shown = ", ".join(f"{k}={v!r}" for k, v in self.args.items() if v is not None and k != "path")
        return f"dataset {self.args.get('path')} ({shown or 'no arguments'})"


@dataclass(frozen=True)
class ProbeResult:
    """One eval's probe: its loads, and where its evaluate.py stopped."""

    eval: str
    loads: tuple[Load, ...]
    stopped: str

    def failed(self) -> list[Load]:
        """The loads that failed, each once (inspect_evals retries a failed load: the same call again)."""
        out: list[Load] = []
        for ld in self.loads:
            if not ld.ok and ld.args not in [o.args for o in out]:
                out.append(ld)
        return out


HUB_TOKEN = "HF_TOKEN"  # the one secret a probe gets: gated datasets need it to be fetched


def probe_env(env: dict | None, hf_home, evals_cache, offline: bool) -> dict:
    """The probe's environment: ``env`` (else this process's) pointed at the caches (``data_env``), online or with
    the hub's offline switches, and without any secret but HF_TOKEN: the scripts run only up to their models, so
    their graders' keys are not theirs to see (a script that wants one stops there, as healthbench's does)."""
    from ptflow.keys import looks_like_secret
    from ptflow.stages.evaluate.sources import OFFLINE_ENV, data_env

    base = {k: v for k, v in (os.environ if env is None else env).items()
            if k not in OFFLINE_ENV and (k == HUB_TOKEN or not looks_like_secret(k))}  # fmt: skip
    return {**base, **data_env(hf_home, evals_cache, offline=offline)}


def probe(evals: dict[str, Path], templates: Path, mode: str, env: dict) -> dict[str, ProbeResult]:
    """Run the probe over ``evals`` (eval id -> its directory in the checkout) in a child process with ``env``
    (:func:`probe_env`)."""
    if mode not in ("warm", "check"):
        raise ValueError(f"mode must be warm or check, not {mode!r}")
    with tempfile.TemporaryDirectory(prefix="ptflow-data-probe-") as tmp:
        request, result = Path(tmp) / "request.json", Path(tmp) / "result.json"
        items = [{"eval": e, "dir": str(Path(d).resolve())} for e, d in sorted(evals.items())]
        request.write_text(json.dumps({"mode": mode, "templates": str(Path(templates).resolve()), "evals": items}))
        child_env = {**env, "XDG_CACHE_HOME": str(Path(tmp) / "xdg-cache")}  # inspect's copies: an empty dir
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "ptflow.stages.posttrainbench.data_probe", str(request), str(result)],
                env=child_env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"the data probe ({mode}) of {', '.join(sorted(evals))} took over {PROBE_TIMEOUT_S} s (a hub that "
                "does not answer: inspect_evals retries its loads for minutes); check HF_ENDPOINT from this node"
            ) from None
        if not result.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"the data probe ({mode}) exited {proc.returncode}: {tail[0]}")
        raw = json.loads(result.read_text())
    results = {}
    for e, r in raw.items():
        loads = tuple(Load(e, **{**ld, "cache_holds": tuple(ld.get("cache_holds", ()))}) for ld in r["loads"])
        results[e] = ProbeResult(e, loads, r["stopped"])
    return results


# --- the child: runs each evaluate.py up to its model --------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:400]


def _cache_holds(path: str) -> list[str]:
    """The config ids ``datasets`` prepared for a repo in this HF_HOME (what an offline load can find)."""
    try:
        import datasets
        from datasets.naming import camelcase_to_snakecase
    except ImportError:
        return []
    parts = path.split("/")
    parts[-1] = camelcase_to_snakecase(parts[-1])
    root = Path(datasets.config.HF_DATASETS_CACHE) / "___".join(parts)
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def _plain(value):
    return value if value is None or isinstance(value, str | int | float | bool) else repr(value)


class _Recorder:
    def __init__(self, mode: str):
        self.mode = mode
        self.loads: list[dict] = []

    def wrap(self, load_dataset):
        import inspect

        signature = inspect.signature(load_dataset)

        def recorded(*args, **kwargs):
            bound = signature.bind_partial(*args, **kwargs).arguments
            call = {k: _plain(bound.get(k)) for k in LOAD_ARGS}
            entry = {"args": call, "ok": False, "error": None, "cache_holds": []}
            self.loads.append(entry)
            try:
                out = load_dataset(*args, **kwargs)
            except Exception as exc:
                entry["error"] = _first_line(exc)
                entry["cache_holds"] = _cache_holds(str(call["path"]))
                if self.mode == "check":
                    raise ProbeMiss(entry["error"]) from exc
                raise
            entry["ok"] = True
            if self.mode == "warm" and call["data_dir"] and not call["name"]:
                from ptflow.stages.evaluate.sources import _alias_data_dir_config

                _alias_data_dir_config({"repo": call["path"], "name": None, "data_dir": call["data_dir"],
                                        "revision": call["revision"]})  # fmt: skip
            return out

        return recorded

    def wrap_git(self, download, fetcher: str, target: str):
        """An inspect_evals git downloader, recorded: ``warm`` fetches through ptflow's fetch_git into the same
        place (the inspect_evals cache root is INSPECT_EVALS_CACHE_DIR), ``check`` records a miss and stops."""
        import inspect

        signature = inspect.signature(download)
        busy = []  # fetch_git calls the downloader (this wrapper, once installed): that call is the real one

        def recorded(*args, **kwargs):
            if busy:
                return download(*args, **kwargs)
            bound = signature.bind_partial(*args, **kwargs).arguments
            dest = Path(bound[target]).resolve()
            root = Path(os.environ.get("INSPECT_EVALS_CACHE_DIR") or dest.parent).resolve()
            cache_dir = str(dest.relative_to(root)) if dest.is_relative_to(root) else str(dest)
            call = {"repo_url": bound.get("repo_url"), "commit": bound.get("commit"),
                    "sparse_path": bound.get("sparse_path"), "cache_dir": cache_dir, "fetcher": fetcher}  # fmt: skip
            entry = {"args": call, "ok": False, "error": None, "kind": "git"}
            self.loads.append(entry)
            if self.mode == "check":
                entry["error"] = f"not in {dest} (offline: the evaluation would clone it)"
                raise ProbeMiss(entry["error"])
            from ptflow.stages.evaluate.sources import fetch_git

            busy.append(True)
            try:
                fetch_git(Load("", call, False, kind="git").git_data(), root, force=True)
            except Exception as exc:
                entry["error"] = _first_line(exc)
                raise
            finally:
                busy.clear()
            entry["ok"] = True

        return recorded


def _wrap_git_downloaders(recorder: _Recorder) -> None:
    """Each of inspect_evals' git downloaders wrapped where it is defined and wherever it was imported by name (its
    task modules bind it at import): every module of inspect_evals holding the original gets the wrapper."""
    import importlib

    for module_name, name, fetcher, target in GIT_DOWNLOADERS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        original = getattr(module, name, None)
        if original is None:
            continue
        wrapped = recorder.wrap_git(original, fetcher, target)
        for other in [m for n, m in sys.modules.items() if n == "inspect_evals" or n.startswith("inspect_evals.")]:
            if getattr(other, name, None) is original:
                setattr(other, name, wrapped)


def _stop_at_eval(tasks=None, *args, **kwargs):
    """inspect_ai.eval's stand-in for the probe: build the tasks (their datasets load), then stop."""
    from inspect_ai import Task
    from inspect_ai._eval.loader import load_tasks  # inspect's own task creation (private; pinned in requirements)

    for task in tasks if isinstance(tasks, list | tuple) else [tasks]:
        if isinstance(task, str):
            load_tasks([task], kwargs.get("task_args") or {})
        elif callable(task) and not isinstance(task, Task):
            task()
    raise ProbeStop


def _install_hooks(recorder: _Recorder) -> None:
    try:
        import datasets
    except ImportError:
        datasets = None
    if datasets is not None:
        datasets.load_dataset = recorder.wrap(datasets.load_dataset)
    _wrap_git_downloaders(recorder)
    try:
        import inspect_ai
    except ImportError:
        return
    inspect_ai.eval = _stop_at_eval


def _run_one(eval_dir: Path, templates: str) -> str:
    """evaluate.py in its dir, as the evaluation runs it, until it stops; returns where it stopped."""
    before = set(sys.modules)
    cwd = os.getcwd()
    os.chdir(eval_dir)
    sys.path.insert(0, str(eval_dir))
    sys.argv = ["evaluate.py", "--model-path", PROBE_MODEL, "--templates-dir", templates, "--limit", "-1"]
    try:
        runpy.run_path("evaluate.py", run_name="__main__")
        return "ended without reaching its model"
    except ProbeStop:
        return STOPPED_AT_EVAL
    except ProbeMiss as miss:
        return f"stopped at a load the cache does not answer: {miss}"
    except SystemExit as exc:
        return f"exited {exc.code!r}"
    except Exception as exc:
        return _first_line(exc)
    finally:
        os.chdir(cwd)
        sys.path.remove(str(eval_dir))
        # the script's own modules (evaluation_code, ...) are not the next script's: all found first, then dropped
        # (a namespace package's path is computed from its parent's, which must still be there)
        own = [name for name in set(sys.modules) - before if _lives_in(sys.modules[name], str(eval_dir))]
        for name in own:
            sys.modules.pop(name, None)


def _lives_in(module, directory: str) -> bool:
    places = [getattr(module, "__file__", None) or ""]
    try:
        places += [str(p) for p in getattr(module, "__path__", None) or []]
    except (TypeError, KeyError):  # a __path__ that is not a list of places (a lazy module's namespace object)
        pass
    return any(str(p).startswith(directory) for p in places)


def _main(request_path: str, result_path: str) -> None:
    request = json.loads(Path(request_path).read_text())
    recorder = _Recorder(request["mode"])
    _install_hooks(recorder)
    results = {}
    for item in request["evals"]:
        recorder.loads = []
        stopped = _run_one(Path(item["dir"]), request["templates"])
        results[item["eval"]] = {"loads": recorder.loads, "stopped": stopped}
    tmp = Path(result_path).with_suffix(".tmp")
    tmp.write_text(json.dumps(results))
    os.replace(tmp, result_path)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
