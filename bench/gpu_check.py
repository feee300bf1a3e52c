"""The CUDA paths of ptflow that run on one GPU with no network, each timed: TRL SFT of a tiny random-init Llama on the
toy task's train split (ptflow.stages.train.sft), a short TRL GRPO from it (ptflow.stages.train.grpo), the ``hf``
provider's evaluation of the trained model (inspect-ai through ptflow.stages.evaluate.run.evaluate_cell), and an agent
cell's staging in its allocation (a copied HF view of one model, and the workspace sync of a 1 GiB task dir after 10 MiB
changed).

Run by ``bench/gpu_check.sh`` on the device machine; ``--device cpu`` runs the same here (a smoke run: CUDA hidden).
Prints one line per step and a JSON summary; exits 1 when a step fails or CUDA was asked for and not used."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


def step(name: str, results: dict):
    def wrap(func):
        t0 = time.perf_counter()
        try:
            value = func()
        except Exception as exc:  # noqa: BLE001 - a check reports every step, then fails
            results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
            print(f"FAIL {name}: {results[name]['error']}", flush=True)
            return None
        results[name] = {"ok": True, "seconds": round(time.perf_counter() - t0, 2), **(value or {})}
        print(f"ok   {name}: {json.dumps(results[name])}", flush=True)
        return value

    return wrap


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--steps", type=int, default=300, help="SFT steps (the embedded default's)")
    ap.add_argument("--grpo-steps", type=int, default=20, help="GRPO steps from the SFT model")
    ap.add_argument("--limit", type=int, default=64, help="test samples evaluated")
    ap.add_argument("--workspace-mib", type=int, default=1024, help="task dir size for the sync figure")
    args = ap.parse_args(argv)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch

    from ptflow.cluster import hfview
    from ptflow.config.entries import eval_from_entry
    from ptflow.specs import CellRef, EvaluateSpec
    from ptflow.stages.data.synthetic import generate_arithmetic
    from ptflow.stages.data.verl_format import to_verl_frame, write_parquet
    from ptflow.stages.evaluate.run import EvalInputs, EvalOutputs, ModelUnderTest, evaluate_cell
    from ptflow.stages.evaluate.settings import Provider, build_call
    from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama
    from ptflow.stages.train.agent.task_dir import sync_workspace
    from ptflow.stages.train.grpo import GrpoSettings, train_grpo
    from ptflow.stages.train.sft import SftSettings, train_sft

    results: dict = {}
    root = Path(tempfile.mkdtemp(prefix="ptflow-gpu-check-"))
    cuda = torch.cuda.is_available()
    results["machine"] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "python": sys.version.split()[0],
    }
    print(f"machine: {json.dumps(results['machine'])}", flush=True)
    if args.device == "cuda" and not cuda:
        print("FAIL cuda: torch sees no GPU", flush=True)
        return 1
    base, train, test = root / "base", root / "train.parquet", root / "test.parquet"
    gpus = int(args.device == "cuda")  # as a train job that asked its site for one GPU (TrainRun.gpus), or for none

    @step("data_and_tiny_model", results)
    def _():
        write_parquet(to_verl_frame(generate_arithmetic("add", 2, 600, 11), "ptflow/arith-add", "train"), train)
        write_parquet(to_verl_frame(generate_arithmetic("add", 2, args.limit, 12), "ptflow/arith-add", "test"), test)
        create_tiny_llama(base, build_char_tokenizer([]), layers=2, hidden=64, heads=4, seed=0)

    @step("sft_" + args.device, results)
    def trained():
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        hp = SftSettings(steps=args.steps, batch_size=32, learning_rate=3e-3, seed=0, gradient_checkpointing=False)
        out = train_sft(base, train, root / "sft", hp, log=lambda _m: None, gpus=gpus)
        peak = torch.cuda.max_memory_allocated() if cuda else 0
        if args.device == "cuda" and not peak:
            raise RuntimeError("the trainer allocated nothing on the GPU: it did not train there")
        return {"step": out["step"], "train_loss": round(out["train_loss"], 4), "gpu_peak_mib": peak // 2**20}

    @step("grpo_" + args.device, results)
    def grpo():
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        start = root / "sft" if (root / "sft" / "config.json").exists() else base
        hp = GrpoSettings(steps=args.grpo_steps, batch_size=4, num_generations=4, learning_rate=1e-4,
                          max_completion_length=16, seed=0, gradient_checkpointing=False)  # fmt: skip
        out = train_grpo(start, train, root / "grpo", hp, log=lambda _m: None, gpus=gpus)
        peak = torch.cuda.max_memory_allocated() if cuda else 0
        if args.device == "cuda" and not peak:
            raise RuntimeError("the GRPO trainer allocated nothing on the GPU: it did not train there")
        return {"step": out["step"], "reward_mean": round(out["reward_mean"], 3), "gpu_peak_mib": peak // 2**20}

    @step("evaluate_hf_" + args.device, results)
    def evaluated():
        generator = {"op": "add", "digits": 2, "carry": False, "n_train": 600, "n_test": args.limit, "seed": 11}
        dataset = {"source": "local", "repo": "ptflow/arith-add", "generator": generator}  # the default's toy eval
        ev = eval_from_entry({"id": "add", "task": "ptflow", "max_new_tokens": 20, "sampling": "greedy",
                              "dataset": dataset, "preprocess": "gsm8k"})  # fmt: skip
        cell = CellRef("ptflow/tiny-llama-h64", "ptflow--tiny-llama-h64", "add", "sft")
        call = build_call(ev, Provider(kind="hf", device=args.device, gpus=int(cuda)))
        job = EvaluateSpec(cell, call, model_revision="x", hf_home=str(root / "hf"), evals_cache=str(root / "evals"))
        model = str(root / "sft")
        data = evaluate_cell(
            job,
            ModelUnderTest(model, {"path": model, "kind": "trained", "commit_or_hash": "x", "step": 1}),
            EvalOutputs(str(root / "eval.json"), str(root / "inspect")),
            EvalInputs(test_parquet=str(test)),
            log=lambda _m: None,
        )
        if data["status"] != "scored":
            raise RuntimeError(f"eval.json says {data['status']}")
        return {"accuracy": data["metrics"]["value"], "n": data["metrics"]["n"]}

    @step("agent_staging", results)
    def staged():
        shared = root / "shared_hf"  # the hub layout: refs/main names the snapshot (a fixture repo id)
        repo = shared / "hub" / "models--ptflow--tiny-llama-h64"
        shutil.copytree(base, repo / "snapshots" / ("0" * 40))
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("0" * 40)
        t0 = time.perf_counter()
        view = hfview.open_view(shared, root / "view", method="copy", log=lambda _m: None,
                                models=["ptflow/tiny-llama-h64"])  # fmt: skip
        view_s = time.perf_counter() - t0
        hfview.close_view(view, log=lambda _m: None)
        task, ws = root / "task", root / "resume" / "workspace"
        (task / "final_model").mkdir(parents=True)
        chunk = os.urandom(2**20)
        for i in range(args.workspace_mib // 16):
            (task / f"shard-{i:03d}.bin").write_bytes(chunk * 16)
        t0 = time.perf_counter()
        sync_workspace(task, ws)
        first = time.perf_counter() - t0
        (task / "changed.bin").write_bytes(chunk * 10)
        t0 = time.perf_counter()
        counts = sync_workspace(task, ws)
        again = time.perf_counter() - t0
        return {"hf_view_copy_s": round(view_s, 3), "hf_view_mib": round(view.bytes / 2**20, 1),
                "sync_first_s": round(first, 3), "sync_10mib_changed_s": round(again, 3), **counts}  # fmt: skip

    del trained, grpo, evaluated, staged
    ok = all(v.get("ok", True) for v in results.values())
    print("summary: " + json.dumps(results), flush=True)
    if not ok:  # the evaluation's subprocess output says why; the temp dir goes below
        for out in sorted(root.glob("inspect/attempts/*/output.txt")):
            print(f"--- {out.relative_to(root)} (last 40 lines)\n" + "\n".join(out.read_text().splitlines()[-40:]))
    shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
