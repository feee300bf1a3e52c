"""Benchmark the ML core as the workflow runs it: every step in a fresh Python process.

Prints, per model x eval, the accuracy of the baseline / SFT / GRPO-from-SFT agents and the wall
seconds of each process (interpreter start + imports + work). A benchmark, not a test: no asserts.

    PYTHONPATH=src .venv/bin/python bench/ml_timings.py [--workdir DIR] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

# Defaults proposed for the embedded config (see the report printed at the end).
DEFAULTS = {
    "data": {"digits": 1, "n_train": 400, "n_test": 100, "train_seed": 0, "test_seed": 1},
    "models": {
        "tiny-h64": {"layers": 2, "hidden": 64, "heads": 4, "seed": 0},
        "tiny-h96": {"layers": 2, "hidden": 96, "heads": 4, "seed": 1},
    },
    "evals": ["add", "sub"],
    "sft": {"steps": 200, "batch_size": 32, "learning_rate": 3e-3, "seed": 0},
    "grpo": {
        "steps": 16,
        "batch_size": 8,
        "num_generations": 4,
        "learning_rate": 2e-5,
        "max_completion_length": 20,
        "seed": 0,
    },
    "eval": {"max_tokens": 20},
}


def _step(kind: str, kw: dict) -> dict:
    """Run one step in this process (the child side)."""
    if kind == "data":
        from ptflow.stages.data.synthetic import generate_arithmetic
        from ptflow.stages.data.verl_format import to_verl_frame, write_parquet

        d = kw["data"]
        for op in kw["evals"]:
            for split, n, seed in (("train", d["n_train"], d["train_seed"]), ("test", d["n_test"], d["test_seed"])):
                recs = generate_arithmetic(op, d["digits"], n, seed)
                write_parquet(to_verl_frame(recs, f"synthetic/{op}", split), f"{kw['dir']}/{op}_{split}.parquet")
        return {}
    if kind == "create":
        from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama

        create_tiny_llama(kw["out"], build_char_tokenizer([]), **kw["spec"])
        return {}
    if kind == "sft":
        from ptflow.stages.train.sft import SftSettings, train_sft

        return train_sft(kw["model"], kw["train"], kw["out"], SftSettings(**kw["hp"]), log=lambda s: None)
    if kind == "grpo":
        from ptflow.stages.train.grpo import GrpoSettings, train_grpo

        return train_grpo(kw["model"], kw["train"], kw["out"], GrpoSettings(**kw["hp"]), log=lambda s: None)
    if kind == "eval":
        from ptflow.config.entries import eval_from_entry
        from ptflow.stages.evaluate.run import EvalCaches, evaluate, with_toy_data
        from ptflow.stages.evaluate.settings import Provider, build_call

        t = time.perf_counter()
        entry = {"id": kw["task"], "task": "ptflow", "max_new_tokens": kw["hp"]["max_tokens"],
                 "dataset": {"source": "local", "repo": "synthetic/x", "generator": {}}}  # fmt: skip
        call = with_toy_data(build_call(eval_from_entry(entry), Provider()), kw["test"])
        out = evaluate(call, kw["model"], kw["log_dir"], EvalCaches(kw["log_dir"], kw["log_dir"]), log=print)
        h = out.headline
        return {"accuracy": h["value"], "stderr": h["stderr"], "n": h["n"], "scorer": h["scorer"],
                "seconds": time.perf_counter() - t, "log": out.log_path}  # fmt: skip
    raise ValueError(kind)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(kind: str, kw: dict, env: dict) -> tuple[dict, float, float]:
    """Run one step in a fresh process; return (result, wall seconds, CPU seconds of the child)."""
    t, c = time.perf_counter(), _cpu()
    proc = subprocess.run(
        [sys.executable, __file__, "--step", kind, json.dumps(kw)], env=env, capture_output=True, text=True
    )
    wall, cpu = time.perf_counter() - t, _cpu() - c
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"step {kind} failed")
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for each step")
    ap.add_argument("--step", default=None, help=argparse.SUPPRESS)
    ap.add_argument("kwargs", nargs="?", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.step:
        print(json.dumps(_step(a.step, json.loads(a.kwargs))))
        return

    work = a.workdir or tempfile.mkdtemp(prefix="ptflow-bench-")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    if a.threads:
        env["OMP_NUM_THREADS"] = str(a.threads)
    D = DEFAULTS
    t_all = time.perf_counter()
    walls: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    inner: dict[str, list[float]] = {}

    def run(kind: str, kw: dict) -> dict:
        out, wall, cpu = _run(kind, kw, env)
        walls.setdefault(kind, []).append(wall)
        cpus.setdefault(kind, []).append(cpu)
        if "seconds" in out:
            inner.setdefault(kind, []).append(out["seconds"])
        return out

    imports = {
        "ptflow.stages.gsm8k_answer+data": (
            "import ptflow.stages.gsm8k_answer, ptflow.stages.data.synthetic, ptflow.stages.data.verl_format"
        ),
        "trl SFTTrainer": "from trl import SFTTrainer",
        "trl GRPOTrainer": "from trl import GRPOTrainer",
        "inspect_ai+hf provider": "import inspect_ai, inspect_ai.model._providers.hf",
    }
    print("fresh-process import cost (python -c '<import>'):")
    for label, stmt in imports.items():
        t, c = time.perf_counter(), _cpu()
        subprocess.run([sys.executable, "-c", stmt], env=env, check=True)
        print(f"  {label:24s} wall {time.perf_counter() - t:5.1f}s  cpu {_cpu() - c:5.1f}s", flush=True)

    _, w, c = _run("data", {"data": D["data"], "evals": D["evals"], "dir": work}, env)
    walls["data"], cpus["data"] = [w], [c]
    rows = []
    for name, spec in D["models"].items():
        base = f"{work}/{name}"
        run("create", {"out": base, "spec": spec})
        for op in D["evals"]:
            train, test = f"{work}/{op}_train.parquet", f"{work}/{op}_test.parquet"
            sft, grpo = f"{work}/{name}-{op}-sft", f"{work}/{name}-{op}-grpo"
            acc = {}
            for agent, model in (("baseline", base), ("sft", sft), ("grpo", grpo)):
                if agent == "sft":
                    tr = run("sft", {"model": base, "train": train, "out": sft, "hp": D["sft"]})
                if agent == "grpo":
                    tr = run("grpo", {"model": sft, "train": train, "out": grpo, "hp": D["grpo"]})
                m = run(
                    "eval",
                    {
                        "model": model,
                        "test": test,
                        "log_dir": f"{work}/logs/{name}/{agent}",
                        "task": op,
                        "hp": D["eval"],
                    },
                )
                acc[agent] = m
            rows.append((name, op, acc, tr))
            print(
                f"{name:9s} {op}: baseline {acc['baseline']['accuracy']:.2f}  sft {acc['sft']['accuracy']:.2f}  "
                f"grpo {acc['grpo']['accuracy']:.2f}  (n={acc['sft']['n']}, grpo reward_mean "
                f"{tr.get('reward_mean', float('nan')):.2f})",
                flush=True,
            )
    total = time.perf_counter() - t_all

    def fmt(xs: list[float]) -> str:
        return f"mean {sum(xs) / len(xs):5.1f}s  min {min(xs):5.1f}s  max {max(xs):5.1f}s  (n={len(xs)})"

    # CPU seconds (user+sys of the child) are the better figure on a shared machine: with one
    # thread per step they approximate the wall time the step takes on an idle core.
    print(f"\nseconds per fresh process (start + imports + work); load average now {os.getloadavg()[0]:.1f}:")
    for kind, xs in walls.items():
        extra = f"   in-function wall {fmt(inner[kind])}" if kind in inner else ""
        print(f"  {kind:6s} wall {fmt(xs)}\n  {'':6s} cpu  {fmt(cpus[kind])}{extra}")
    print(f"sequential total {total:.1f}s   workdir {work}")
    print("defaults:", json.dumps({k: D[k] for k in ("data", "sft", "grpo", "eval")}))
    ok = all(
        r[2]["sft"]["accuracy"] >= r[2]["baseline"]["accuracy"] + 0.3
        and r[2]["grpo"]["accuracy"] >= r[2]["sft"]["accuracy"] - 0.05
        for r in rows
    )
    print("goal (sft >= baseline+0.3 and grpo >= sft-0.05 everywhere):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
