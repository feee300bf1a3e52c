#!/usr/bin/env python3
"""Evaluate a model exactly as ptflow's final evaluation will (PostTrainBench's ``evaluate.py`` interface).

    python evaluate.py --model-path final_model [--limit N] [--max-tokens N] [--max-connections N]
                       [--json-output-file metrics.json]

The task, its arguments, the inference provider and the generation settings come from ``evaluate_settings.json``
beside this file, written by ptflow from the same config as the final evaluation; ptflow's final evaluation runs
this very script (its own copy) with that file. ``--limit -1`` evaluates every sample. The JSON output holds the
eval's headline metric as ``accuracy`` (PostTrainBench's key, even when the metric has another name, which is
given as ``metric``), with ``stderr`` and ``n``.

Standalone on purpose: it imports inspect_ai (and inspect_evals), never ptflow (except the embedded default's toy
task ``ptflow``, which lives in the package), so it runs wherever inspect runs.
API keys (a grader's, say) are read from the environment only; their names are listed in the settings file.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect as pyinspect
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

KIT_DIR = Path(__file__).resolve().parent
SETTINGS_NAME = "evaluate_settings.json"
TEMPLATES_DIR = KIT_DIR / "templates"
OWN_TASKS_FILE = KIT_DIR / "ptflow_tasks.py"
SETTINGS_SCHEMA = 1
# Chat templates for base models without one, by model family (read from config.json's model_type).
FAMILY_TEMPLATES = {"llama": "llama3.jinja", "gemma": "gemma3.jinja", "smollm": "smollm3.jinja"}
TEMPLATE_POLICIES = ("if_missing", "always", "never")


class TaskSpecError(ValueError):
    """A task spec or task argument that cannot be resolved (fails at once, never retried)."""


class MissingKeyError(RuntimeError):
    """An API key the settings name is not in the environment (fails at once, never retried)."""


# --- task resolution ---------------------------------------------------------------------------------------------


def _load_own_tasks():
    """ptflow_tasks.py beside this script, loaded by path under one module name (so its @task functions are
    registered once, whether this script runs inside ptflow or from a copy in an agent's directory)."""
    if "ptflow_tasks" in sys.modules:
        return sys.modules["ptflow_tasks"]
    spec = importlib.util.spec_from_file_location("ptflow_tasks", OWN_TASKS_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ptflow_tasks"] = module
    spec.loader.exec_module(module)
    return module


def check_args(fn, spec: str, task_args: dict) -> None:
    params = pyinspect.signature(fn).parameters
    required = [
        n for n, p in params.items() if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    absent = [n for n in required if n not in task_args]
    if absent:
        raise TaskSpecError(f"task {spec!r}: task argument(s) {absent} required; set them in task_args")
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return
    unknown = sorted(set(task_args) - set(params))
    if unknown:
        raise TaskSpecError(
            f"task {spec!r}: unknown task argument(s) {unknown}; it accepts {sorted(params)} (fix task_args)"
        )


def task_function(spec: str, base_dir: Path | None = None):
    """The @task function a spec names, or TaskSpecError. Specs: ``ptflow`` (the toy verl-parquet task),
    ``ptflow/<name>`` (ptflow_tasks.py), ``<file>.py@<name>`` (relative to ``base_dir``, then the working
    directory), or an inspect registry name ``<package>/<name>`` such as ``inspect_evals/gsm8k``."""
    if not isinstance(spec, str) or not spec.strip():
        raise TaskSpecError(f"task {spec!r}: empty task spec; name an inspect task such as inspect_evals/gsm8k")
    if spec == "ptflow":
        try:
            from ptflow.stages.evaluate.inspect_eval import verl_parquet_task
        except ImportError as exc:
            raise TaskSpecError(f"task 'ptflow' needs the ptflow package installed here ({exc})") from None
        return verl_parquet_task
    if spec.startswith("ptflow/"):
        tasks = _load_own_tasks().TASKS
        name = spec.split("/", 1)[1]
        if name not in tasks:
            raise TaskSpecError(f"task {spec!r}: ptflow has no task {name!r}; ptflow's tasks are {sorted(tasks)}")
        return tasks[name]
    if "@" in spec:
        file_part, name = spec.rsplit("@", 1)
        candidates = [Path(file_part)] if Path(file_part).is_absolute() else []
        candidates += [(base_dir or KIT_DIR) / file_part, Path.cwd() / file_part]
        path = next((c for c in candidates if c.is_file()), None)
        if path is None or path.suffix != ".py":
            raise TaskSpecError(f"task {spec!r}: no Python file {file_part!r} (looked in {candidates[-2].parent})")
        module_spec = importlib.util.spec_from_file_location(f"ptflow_file_task_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        fn = getattr(module, name, None)
        if fn is None or not callable(fn):
            raise TaskSpecError(f"task {spec!r}: {path} defines no task function {name!r}")
        return fn
    if "/" not in spec:
        raise TaskSpecError(
            f"task {spec!r}: not a task spec; use <package>/<task> (e.g. inspect_evals/{spec}), ptflow/<task>, "
            "or <file>.py@<task>"
        )
    # inspect's registry (the lookup `inspect eval <package>/<task>` uses). Importing the task's own module first
    # registers it without loading every task of the package through its entry point (seconds, for inspect_evals).
    from inspect_ai._util.registry import registry_lookup

    try:
        importlib.import_module(spec.replace("/", "."))
    except ImportError:
        pass
    fn = registry_lookup("task", spec)
    if fn is None:
        raise TaskSpecError(f"task {spec!r}: no such task in inspect's registry (is its package installed?)")
    return fn


def resolve_task(spec: str, task_args: dict | None = None, base_dir: Path | None = None):
    """The one place a task spec becomes an inspect Task: the named task function called with ``task_args``
    (checked against its signature first, so a misspelt argument fails at once instead of being ignored)."""
    from inspect_ai import Task

    task_args = dict(task_args or {})
    fn = task_function(spec, base_dir)
    check_args(fn, spec, task_args)
    task = fn(**task_args)
    if not isinstance(task, Task):
        raise TaskSpecError(f"task {spec!r}: {fn.__name__}() returned {type(task).__name__}, not an inspect Task")
    return task


# --- model, provider and inspect call ------------------------------------------------------------------------


def model_family(model_path: str | Path) -> str | None:
    """llama / gemma / qwen / smollm from config.json's model_type (None when unknown)."""
    cfg = Path(model_path) / "config.json"
    if not cfg.is_file():
        return None
    model_type = str(json.loads(cfg.read_text()).get("model_type", "")).lower()
    for family in ("smollm", "gemma", "qwen", "llama"):
        if model_type.startswith(family):
            return family
    return None


def has_chat_template(model_path: str | Path) -> bool:
    path = Path(model_path)
    if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
        return True
    tok_cfg = path / "tokenizer_config.json"
    return tok_cfg.is_file() and bool(json.loads(tok_cfg.read_text()).get("chat_template"))


def chat_template_for(call: dict, model_path: str | Path) -> str | None:
    """Path of the family template to force on the model, or None to use the model's own.

    ``if_missing``: only a model without a template gets its family's (qwen has none here: Qwen base models ship
    their own); ``always``: every model of a listed family gets it (PostTrainBench's final evaluation does this, so
    an agent cannot change the template it is scored with); ``never``."""
    policy = call.get("chat_template_policy", "if_missing")
    if policy not in TEMPLATE_POLICIES:
        raise ValueError(f"chat_template_policy {policy!r} must be one of {TEMPLATE_POLICIES}")
    if policy == "never" or (policy == "if_missing" and has_chat_template(model_path)):
        return None
    family = model_family(model_path)
    if family not in FAMILY_TEMPLATES:
        if policy == "if_missing":
            raise ValueError(
                f"model {model_path} has no chat template and its family ({family}) has none in {TEMPLATES_DIR}; "
                "give the model a chat_template"
            )
        return None
    return str(TEMPLATES_DIR / FAMILY_TEMPLATES[family])


def allocation_device() -> str:
    """The hf provider's device for "the allocation's GPUs" (``device: cuda`` in the settings), as this process sees
    them: ``cuda:0`` for one, ``auto`` (spread by accelerate) for several, ``cpu`` where none is usable (said on
    stderr: a GPU allocation without CUDA, such as a test cluster's placeholder GPUs)."""
    import torch

    if not torch.cuda.is_available():
        print("evaluate.py: GPUs were requested but CUDA sees none here; the hf provider runs on cpu", file=sys.stderr)
        return "cpu"
    return "cuda:0" if torch.cuda.device_count() == 1 else "auto"


def model_spec(call: dict, model_path: str | Path) -> tuple[str, dict]:
    """inspect model name and model_args for this provider."""
    path = str(Path(model_path).resolve())
    args = dict(call.get("model_args") or {})
    family = model_family(path)
    args.update((call.get("model_args_by_family") or {}).get(family or "", {}))
    template = chat_template_for(call, path)
    if call["provider"] == "hf":
        # The model's own path as its name: inspect looks the name up as a model id, and a local path resolves
        # without the Hub (the name "local" would be looked up online).
        args.setdefault("device", "cpu")
        if args["device"] == "cuda":
            args["device"] = allocation_device()
        if call.get("sampling", {}).get("greedy"):
            args["do_sample"] = False
        if template:
            args["chat_template"] = Path(template).read_text()
        return f"hf/{path}", args
    if call["provider"] == "vllm":
        if template:
            args["chat_template"] = template
        return f"vllm/{path}", args
    raise ValueError(f"provider {call['provider']!r} must be hf or vllm")


def register_model_info(model: str, model_path: str | Path) -> None:
    """Give inspect the facts it would otherwise load the model a second time for. inspect looks up the model of
    every model event in its model-info database (for its ACP usage update); a name the database lacks, as a local
    path is, makes it build the provider to find a canonical name (inspect_ai.model._model_info
    ._resolve_model_info). For hf that loads the weights again, and get_model keeps that copy: two copies of the
    model in (GPU) memory for the rest of the eval. A model registered with ``set_model_info`` is found first. The
    context length is the model's own (config.json), None where it names none."""
    from inspect_ai.model import ModelInfo, set_model_info

    cfg = Path(model_path) / "config.json"
    config = json.loads(cfg.read_text()) if cfg.is_file() else {}
    context = config.get("max_position_embeddings")
    set_model_info(model, ModelInfo(context_length=context if isinstance(context, int) else None))


def generate_config(call: dict, max_tokens: int) -> dict:
    sampling = call.get("sampling") or {}
    out: dict[str, Any] = {"max_tokens": int(max_tokens)}
    if sampling.get("greedy"):
        if call["provider"] == "vllm":
            out["temperature"] = 0.0  # hf gets do_sample=False instead (transformers rejects temperature 0)
    else:
        for key in ("temperature", "top_p"):
            if sampling.get(key) is not None:
                out[key] = sampling[key]
    if sampling.get("seed") is not None:
        out["seed"] = sampling["seed"]
    return out


def eval_kwargs(call: dict, model_path: str | Path, max_tokens: int, log_dir: str | Path) -> dict:
    """Every argument of the ``inspect_ai.eval`` call except the task (JSON-able: the call as text)."""
    model, model_args = model_spec(call, model_path)
    kwargs: dict[str, Any] = {
        "model": model,
        "model_args": model_args,
        "log_dir": str(log_dir),
        "log_format": "eval",
        "display": "none",
        "log_realtime": False,
        "score_display": False,
        **generate_config(call, max_tokens),
    }
    for key in ("limit", "epochs", "max_connections"):
        if call.get(key) is not None:
            kwargs[key] = call[key]
    return kwargs


def task_spec_for_cli(call: dict) -> str:
    spec = call["task"]
    if spec.startswith("ptflow/"):
        return f"{OWN_TASKS_FILE}@{spec.split('/', 1)[1]}"
    if spec == "ptflow":
        raise ValueError("task 'ptflow' has no inspect CLI form (it is built from a parquet in Python)")
    return spec


def _cli_value(value) -> str:
    """A -T/-M value inspect reads back as ``value``: it parses them as YAML, of which JSON is a subset; a plain
    string stays bare when YAML reads it back unchanged (paths, model names)."""
    import yaml

    if isinstance(value, str) and value and yaml.safe_load(value) == value:
        return value
    return json.dumps(value)


def inspect_argv(call: dict, model_path: str | Path, max_tokens: int, log_dir: str | Path) -> list[str]:
    """The ``inspect eval`` command line equivalent to ``inspect_ai.eval(task, **eval_kwargs(...))``."""
    kw = eval_kwargs(call, model_path, max_tokens, log_dir)
    argv = ["inspect", "eval", task_spec_for_cli(call), "--model", kw.pop("model")]
    for key, value in sorted(kw.pop("model_args").items()):
        argv += ["-M", f"{key}={_cli_value(value)}"]
    task_args = dict(call.get("task_args") or {})
    grader = call.get("grader")
    if grader:
        if grader.get("model_args") or grader.get("config"):
            raise ValueError("a grader with model_args or config has no inspect CLI form (a -T value is a name)")
        task_args[grader["task_arg"]] = grader["model"]
    for key, value in sorted(task_args.items()):
        argv += ["-T", f"{key}={_cli_value(value)}"]
    flags = {"log_realtime": "--no-log-realtime", "score_display": "--no-score-display"}
    for key, value in kw.items():
        if key in flags:
            argv.append(flags[key])
        else:
            argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


# --- running one attempt ---------------------------------------------------------------------------------------


def check_keys(call: dict, env=None) -> None:
    env = os.environ if env is None else env
    grader = call.get("grader") or {}
    missing = [k for k in grader.get("keys", []) if not env.get(k)]
    if missing:
        raise MissingKeyError(
            f"grader {grader.get('model')!r} needs {', '.join(missing)} in the environment; export it (never put "
            "keys in config files or on command lines)"
        )


def task_args_with_grader(call: dict) -> dict:
    task_args = dict(call.get("task_args") or {})
    grader = call.get("grader")
    if grader:
        if grader.get("model_args") or grader.get("config"):
            from inspect_ai.model import GenerateConfig, get_model

            config = GenerateConfig(**(grader.get("config") or {}))
            task_args[grader["task_arg"]] = get_model(grader["model"], config=config, **(grader["model_args"] or {}))
        else:
            task_args[grader["task_arg"]] = grader["model"]
    return task_args


def _exception_chain(exc: BaseException):
    seen, stack = set(), [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        if isinstance(e, BaseExceptionGroup):
            stack.extend(e.exceptions)
        stack.extend([e.__cause__, e.__context__])


def failure_kind(exc: BaseException) -> str | None:
    """``"memory"`` or ``"context"`` when a smaller token budget can cure the failure, else None.

    Decided by exception type: torch's OutOfMemoryError (CUDA) and MemoryError (host); an API error whose
    structured ``code`` is ``context_length_exceeded`` (OpenAI-compatible servers). inspect's vLLM provider
    already turns a vLLM context overflow into a sample ending with stop reason ``model_length``, so that one never
    fails an eval. Anything else (a missing dataset, a bad task, a missing key, a crash) is not budget-curable."""
    torch = sys.modules.get("torch")
    oom_types: tuple[type, ...] = (MemoryError,)
    if torch is not None and hasattr(torch, "OutOfMemoryError"):
        oom_types += (torch.OutOfMemoryError,)
    for e in _exception_chain(exc):
        if isinstance(e, oom_types):
            return "memory"
        if getattr(e, "code", None) == "context_length_exceeded":
            return "context"
    return None


def headline_metric(log, headline: dict) -> dict:
    """The task's headline metric from an inspect log (EvalLog or path): name, value, stderr, n, scorer."""
    if not hasattr(log, "results"):
        from inspect_ai.log import read_eval_log

        log = read_eval_log(str(log), header_only=True)
    if log.status != "success" or log.results is None:
        raise ValueError(f"inspect log {log.location}: status {log.status!r}, no results to read")
    if headline is None:  # a task ptflow has no facts for: its first scorer's first metric (what inspect shows first)
        first = log.results.scores[0] if log.results.scores else None
        if first is None or not first.metrics:
            raise ValueError(f"inspect log {log.location}: no scorer with a metric to read")
        headline = {"metric": next(iter(first.metrics)), "stderr": "stderr", "scorer": first.name}
    name, stderr_name, scorer_name = headline["metric"], headline.get("stderr"), headline.get("scorer")
    found = [s for s in log.results.scores if name in s.metrics and (scorer_name is None or s.name == scorer_name)]
    if len(found) != 1:
        have = {s.name: sorted(s.metrics) for s in log.results.scores}
        raise ValueError(
            f"inspect log {log.location}: expected one scorer with metric {name!r}"
            + (f" named {scorer_name!r}" if scorer_name else "")
            + f", found {len(found)} (scorers and metrics: {have})"
        )
    score = found[0]
    stderr = score.metrics[stderr_name].value if stderr_name and stderr_name in score.metrics else None
    if headline.get("n"):  # the task counts what its metric averages over itself (Arena-Hard: judged questions)
        n = score.metrics[headline["n"]].value
    else:
        n = score.scored_samples if score.scored_samples is not None else log.results.completed_samples
    return {
        "name": name,
        "value": float(score.metrics[name].value),
        "stderr": None if stderr is None else float(stderr),
        "n": int(n),
        "scorer": score.name,
    }


CTL_SERVER_ENV = "INSPECT_EVAL_CTL_SERVER"


def control_server_off() -> dict:
    """inspect's control channel off, unless ``INSPECT_EVAL_CTL_SERVER`` (inspect's own switch) says otherwise.

    inspect starts it for every eval by default: a FastAPI server on a UNIX socket, with a discovery file, in inspect's
    data directory ($XDG_DATA_HOME or ~/.local/share: a shared home on a cluster), for ``inspect ctl`` clients of a
    live eval. An attempt here is a batch job nobody attaches to, and the server cost ~1 CPU-s of each attempt's ~13
    (importing FastAPI and uvicorn, starting them). A user who wants to attach sets the variable (``true``)."""
    return {} if CTL_SERVER_ENV in os.environ else {"ctl_server": False}


def sample_seed(run_seed: int, sample_id, epoch: int = 1, call: int = 0) -> int:
    """The generation seed of one request of a seeded evaluation: a hash of the evaluation's seed, the sample, the
    epoch and the index of the generate() call in the sample, a non-negative 31-bit int. One seed on every request
    makes vLLM draw the same noise for every sample (PostTrainBench saw every gsm8k answer of a seed come out the
    same), so each request gets its own, reproducible for a fixed evaluation seed."""
    import hashlib

    digest = hashlib.sha256(f"{run_seed}:{sample_id}:{epoch}:{call}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def with_sample_seeds(task, run_seed: int):
    """The task with its solver's every generate() call seeded by :func:`sample_seed` (where the provider takes a
    seed: vLLM's does; one the task's solver passes itself is refused, not overridden)."""
    from inspect_ai import task_with
    from inspect_ai.solver import solver

    inner = task.solver

    @solver
    def per_sample_seed():
        async def solve(state, generate):
            calls = 0

            async def seeded(state, *args, **kwargs):
                nonlocal calls
                if "seed" in kwargs:
                    raise ValueError(f"the task's solver passes its own seed ({kwargs['seed']}) to generate()")
                kwargs["seed"] = sample_seed(run_seed, state.sample_id, state.epoch, calls)
                calls += 1
                return await generate(state, *args, **kwargs)

            return await inner(state, seeded)

        return solve

    return task_with(task, solver=per_sample_seed())


def run_attempt(call: dict, model_path: str | Path, max_tokens: int, log_dir: str | Path) -> dict:
    """One inspect eval of the call at ``max_tokens``; returns {"log", "headline"} or raises the eval's error.

    Errors are raised, not logged (``debug_errors``), so the caller sees the exception object and its type."""
    import inspect_ai

    check_keys(call)
    task = resolve_task(call["task"], task_args_with_grader(call))
    if call.get("seed") is not None:  # one seed of a seeded evaluation (ptflow's matrix.seeds / evals[].seeds)
        task = with_sample_seeds(task, call["seed"])
    kwargs = eval_kwargs(call, model_path, max_tokens, log_dir)
    register_model_info(kwargs["model"], model_path)
    if call["task"] == "ptflow" and call.get("max_connections") is None:
        # The hf provider batches up to max_connections requests and otherwise waits 2 s for more to arrive: one
        # batch holding every sample of the (small) toy test split avoids that idle wait.
        n = len(task.dataset) if call.get("limit") is None else min(call["limit"], len(task.dataset))
        kwargs["max_connections"] = kwargs["max_samples"] = max(n, 1)
    logs = inspect_ai.eval(task, debug_errors=True, fail_on_error=True, **kwargs, **control_server_off())
    if len(logs) != 1:
        raise RuntimeError(f"expected one inspect log, got {len(logs)}")
    log = logs[0]
    if log.status != "success":
        raise RuntimeError(f"inspect eval ended {log.status!r}: {log.error.message if log.error else 'no error'}")
    return {"log": log.location, "headline": headline_metric(log, call["headline"])}


# --- the script ------------------------------------------------------------------------------------------------


def read_settings(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"settings file {path} not found; ptflow writes it beside this script")
    call = json.loads(path.read_text())
    if call.get("schema") != SETTINGS_SCHEMA:
        raise ValueError(f"{path}: settings schema {call.get('schema')!r}, this script reads {SETTINGS_SCHEMA}")
    return call


def write_json_atomic(path: str | Path, data) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def parse_args(argv=None, call_defaults: dict | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", default="final_model", help="model directory (HF format)")
    parser.add_argument("--limit", type=int, default=None, help="samples to evaluate; -1 = all (default: settings)")
    parser.add_argument("--max-tokens", type=int, default=None, help="generation budget (default: settings)")
    parser.add_argument("--max-connections", type=int, default=None, help="concurrent requests (default: settings)")
    parser.add_argument("--json-output-file", default=None, help="write the headline metric here as JSON")
    parser.add_argument("--settings", default=str(KIT_DIR / SETTINGS_NAME), help="settings JSON written by ptflow")
    parser.add_argument("--log-dir", default="logs", help="inspect log directory")
    parser.add_argument("--attempt-result", default=None, help=argparse.SUPPRESS)  # ptflow's structured result
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    call = read_settings(args.settings)
    if args.limit is not None:
        call["limit"] = None if args.limit == -1 else args.limit
    if args.max_connections is not None:
        call["max_connections"] = args.max_connections
    max_tokens = args.max_tokens if args.max_tokens is not None else call["max_tokens"]
    try:
        result = run_attempt(call, args.model_path, max_tokens, args.log_dir)
    except (TaskSpecError, MissingKeyError) as exc:
        if args.attempt_result:
            write_json_atomic(args.attempt_result, {"ok": False, "error": str(exc), "failure_kind": None})
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:  # recorded with its budget-curability, then re-raised for the traceback
        if args.attempt_result:
            message = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            write_json_atomic(
                args.attempt_result, {"ok": False, "error": message[:500], "failure_kind": failure_kind(exc)}
            )
        raise
    if args.attempt_result:
        write_json_atomic(args.attempt_result, {"ok": True, "max_tokens": max_tokens, **result})
    h = result["headline"]
    if args.json_output_file:
        write_json_atomic(
            args.json_output_file,
            {"accuracy": h["value"], "stderr": h["stderr"], "n": h["n"], "metric": h["name"], "scorer": h["scorer"]},
        )
    stderr = "" if h["stderr"] is None else f" ± {h['stderr']:.4f}"
    print(f"{call['task']}: {h['name']} = {h['value']:.4f}{stderr} (n={h['n']}, scorer {h['scorer']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
