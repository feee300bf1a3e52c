"""Seeds of PostTrainBench main's seeded final evaluation, run by ptflow (ptflow.stages.evaluate.final_seed over
ptflow.stages.posttrainbench.final_eval), on the FIXTURE checkout with main's evaluation alone
(tests/support/ptb_main.py ``commit_main_evaluation``) and a tiny random model, outside Snakemake: the seed's cascade
with the per-stage arguments the checkout's run_final_eval.sh gives (4/3/2 attempts, any failure steps on), main's
log names, a later seed from the first seed's stage, the greedy probe by the checkout's default_temperature.py, and
the cell's mean equal to the checkout's own aggregate_seed_metrics.py over the seeds that succeeded; humaneval's
seed in the checkout's answer sandbox (with_answer_sandbox_local.sh run for real; with_answer_sandbox.sh's command
lines with an apptainer stand-in) and its refusals. The Snakemake proof is tests/e2e/test_posttrainbench_final_eval.py
(gsm8k)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ptflow.cluster.runtime import run_in_runtime
from ptflow.config import posttrainbench as ptb
from ptflow.config.sites import RuntimeSpec
from ptflow.jobs.build import JobsError
from ptflow.specs import CellRef, CheckoutCall, EvaluateSpec, StageRuntime
from ptflow.stages.evaluate import seeds
from ptflow.stages.evaluate.final_seed import evaluate_final_seed
from ptflow.stages.evaluate.job import sandbox_wrap
from ptflow.stages.evaluate.run import EvalConfigError, EvalInputs, EvalOutputs, ModelUnderTest, validate_eval_json
from ptflow.stages.posttrainbench import answer_sandbox
from ptflow.stages.tiny_model import build_char_tokenizer, create_tiny_llama
from tests.support.ptb_checkout import fill_hf_cache, make_fixture_checkout
from tests.support.ptb_main import commit_main_evaluation

CELL = CellRef("ptflow/tiny-qwen3", "ptflow--tiny-qwen3", "gsm8k", "baseline")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ptb-final")
    checkout = root / "PostTrainBench"
    make_fixture_checkout(checkout, evals=("gsm8k",), agents=("codex",))
    commit = commit_main_evaluation(checkout, evals=("gsm8k",))
    model = root / "tiny-qwen3"  # the checkout's script picks its qwen3.jinja by the path
    create_tiny_llama(model, build_char_tokenizer(["What is 12 + 34?"]), layers=1, hidden=16, heads=2, seed=0)
    fill_hf_cache(root, ("gsm8k",))
    marker = root / "checkout.json"
    marker.write_text(json.dumps({"path": str(checkout), "commit": commit}))
    final = ptb.final_eval(str(checkout), commit, "gsm8k")
    return {"checkout": checkout, "commit": commit, "marker": marker, "model": model, "root": root, "final": final}


def _seed(setup, name, seed, monkeypatch, start_stage=0, first=True, fail_above=None, fail_seeds=None):
    calls = setup["root"] / f"{name}.calls.jsonl"
    monkeypatch.setenv("PTB_FIXTURE_CALLS", str(calls))
    for var, value in (("PTB_FIXTURE_FAIL_ABOVE", fail_above), ("PTB_FIXTURE_FAIL_SEEDS", fail_seeds)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, str(value))
    monkeypatch.chdir(setup["root"])
    final = setup["final"]
    call = CheckoutCall.from_params(
        {
            "eval_id": "gsm8k",
            "task": "posttrainbench/gsm8k",
            "seed": seed,
            "limit": 2,
            "final": {"script": final.script, "stages": list(final.stages)},
            "posttrainbench": {"eval_dir": "gsm8k", "objects": {}},
        }  # fmt: skip
    )
    job = EvaluateSpec(CELL, call, model_revision="fixture", hf_home=".", evals_cache=".")
    out = setup["root"] / name / "seeds" / str(seed)
    model = str(setup["model"])
    evaluate_final_seed(
        job,
        ModelUnderTest(model, {"path": model, "kind": "base", "commit_or_hash": "fixture", "step": None}),
        EvalOutputs(str(out / "eval.json"), str(out / "inspect")),
        EvalInputs(checkout=str(setup["marker"]), start_stage=start_stage),
        first=first,
        log=lambda *_: None,
    )
    data = seeds.mark_seed(out / "eval.json", call, first=first)
    records = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return data, records, out


def test_the_checkouts_script_gives_the_seeds_the_greedy_rule_the_script_and_the_cascade(setup):
    final = setup["final"]
    assert final.seeds == (72332, 87681, 38992, 92201, 13818) and final.seed_only_samples
    assert final.script == "evaluate_final_eval.py" and final.stages == ("", "--max-tokens 3000", "--max-tokens 2000")


def test_a_seed_runs_the_cascade_with_mains_arguments_and_log_names(setup, monkeypatch):
    data, calls, out = _seed(setup, "cascade", 72332, monkeypatch, fail_above=3000)
    validate_eval_json(data)
    assert data["status"] == "scored" and data["seed"] == 72332 and data["stage"] == 1
    assert [a["max_new_tokens"] for a in data["attempts"]] == [None] * 4 + [3000]
    argvs = [c["argv"] for c in calls]
    assert all("--max-tokens" not in a for a in argvs[:4])
    assert argvs[4][argvs[4].index("--max-tokens") + 1] == "3000"
    assert argvs[4][argvs[4].index("--seed") + 1] == "72332"
    assert argvs[4][argvs[4].index("--templates-dir") + 1] == "../../../../src/eval/templates"
    names = sorted(p.name for p in (out / "inspect").iterdir())
    assert names == sorted(["default_temperature.txt", "default_temperature_log.txt", "metrics_seed72332.json",
                            *(f"final_eval_seed72332_{n}.txt" for n in range(1, 6))])  # fmt: skip
    assert data["decoding"] == "sampling" and data["posttrainbench"]["final_eval"] == "evaluate_final_eval.py"


def test_a_later_seed_starts_at_the_first_seeds_stage_and_probes_nothing(setup, monkeypatch):
    data, calls, out = _seed(setup, "later", 87681, monkeypatch, start_stage=1, first=False)
    assert data["status"] == "scored" and data["stage"] == 1 and "decoding" not in data
    assert len(calls) == 1 and calls[0]["argv"][calls[0]["argv"].index("--max-tokens") + 1] == "3000"
    assert not (out / "inspect" / "default_temperature.txt").exists()


def test_a_seed_failing_every_stage_is_eval_failed_after_nine_attempts(setup, monkeypatch):
    data, calls, _ = _seed(setup, "failed", 38992, monkeypatch, first=False, fail_seeds="38992")
    validate_eval_json(data)
    assert data["status"] == "eval_failed" and len(calls) == 4 + 3 + 2
    assert [a["stage"] for a in data["attempts"]] == [0] * 4 + [1] * 3 + [2] * 2


def test_greedy_model_by_the_checkouts_probe(setup, monkeypatch):
    monkeypatch.setenv("PTB_FIXTURE_GREEDY", "tiny-qwen3")
    data, _, _ = _seed(setup, "greedy", 72332, monkeypatch)
    assert data["decoding"] == "greedy"
    assert seeds.why_skipped(data, seed_changes_data=False) is not None
    assert seeds.why_skipped(data, seed_changes_data=True) is None  # gpqamain's: every seed


def test_the_cells_mean_is_the_checkouts_aggregate_seed_metrics(setup, monkeypatch, tmp_path):
    cell = tmp_path / "cell"
    files, results = [], []
    for i, seed in enumerate((72332, 87681, 38992)):
        data, _, out = _seed(setup, f"mean{seed}", seed, monkeypatch, first=i == 0, fail_seeds="38992")
        target = cell / "seeds" / str(seed)
        target.parent.mkdir(parents=True, exist_ok=True)
        out.rename(target)
        files.append(target / "eval.json")
        if data["status"] == "scored":
            results += [
                "--seed-result",
                str(seed),
                str(data["stage"]),
                str(target / "inspect" / f"metrics_seed{seed}.json"),
            ]
    mean = seeds.seed_mean(files, cell / "eval.json")
    validate_eval_json(mean)
    agg = tmp_path / "metrics.json"
    subprocess.run([sys.executable, str(setup["checkout"] / ptb.AGGREGATE_SEED_METRICS), "--output", str(agg),
                    "--num-seeds", "3", *results], check=True)  # fmt: skip
    theirs = json.loads(agg.read_text())
    assert mean["seeds"]["num_seeds"] == theirs["num_seeds"] == 3
    assert mean["seeds"]["num_seeds_succeeded"] == theirs["num_seeds_succeeded"] == 2
    assert mean["metrics"]["value"] == pytest.approx(theirs["accuracy"])
    assert mean["metrics"]["stderr"] == pytest.approx(theirs["stderr"])
    kept = json.loads((cell / mean["posttrainbench"]["metrics_file"]).read_text())
    assert kept == theirs["per_seed"]["72332"]["metrics"]


def test_humaneval_without_its_answer_sandbox_in_the_checkout_stays_refused(tmp_path):
    """Main's run_final_eval.sh runs humaneval's final evaluation inside with_answer_sandbox.sh, and the task's
    evaluate_final_eval.py refuses to score without the sandbox's socket: run bare, each of its nine attempts would
    fail at once and the cell would fall to the baseline after its agent's GPU hours. A checkout whose script names
    the sandbox but which has neither sandbox script (nor answer_sandbox.py) is refused in one line."""
    checkout = tmp_path / "PostTrainBench"
    make_fixture_checkout(checkout, evals=("gsm8k", "humaneval"), agents=("codex",))
    commit = commit_main_evaluation(checkout, evals=("gsm8k", "humaneval"), answer_sandbox=())
    with pytest.raises(ptb.CheckoutError) as refused:
        ptb.final_eval(str(checkout), commit, "humaneval")
    line = str(refused.value)
    assert "\n" not in line and "runs humaneval's final evaluation inside its answer sandbox" in line
    assert "src/eval/tasks/humaneval/with_answer_sandbox.sh" in line and line.endswith("pin a commit that has them")
    assert ptb.final_eval(str(checkout), commit, "gsm8k").script == "evaluate_final_eval.py"  # the others run


# ---- humaneval in the checkout's answer sandbox (with_answer_sandbox_local.sh run for real: unshare, chroot) ----

HE_CELL = CellRef("ptflow/tiny-qwen3", "ptflow--tiny-qwen3", "humaneval", "baseline")
HONEST = 'def solution():\n    a, b = QUESTION[len("What is ") : -1].split(" + ")\n    return str(int(a) + int(b))\n'
# An answer that reaches for what it could reach were it run in the evaluation's process: a marker file here, the
# evaluation's environment, the checkout (its tests), the model, the HF cache, the evaluation's process (/proc), a TCP
# port of this host. Where it reaches nothing it answers right (from the prompt's QUESTION); else it raises what it saw.
ANSWER = """import json, os, socket
def _write(path):
    try:
        open(path, "w").write("the answer ran here")
        return True
    except OSError:
        return False
def _connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False
LOADED = _write(@MARKER@ + ".load")
def solution():
    seen = {"load_marker": LOADED, "call_marker": _write(@MARKER@ + ".call"), "port": _connect(@PORT@),
            "env": sorted(set(os.environ) - {"HOME", "LANG", "PATH"}),
            "paths": [p for p in @PATHS@ if os.path.exists(p)]}
    if any(seen.values()):
        raise RuntimeError("PROBE " + json.dumps(seen))
    a, b = QUESTION[len("What is ") : -1].split(" + ")
    return str(int(a) + int(b))
"""


@pytest.fixture(scope="module")
def sandboxed():
    """The checkout with humaneval's answer sandbox files (main's), in a directory ``nobody`` can read (run as root,
    with_answer_sandbox_local.sh runs the sandbox as nobody, and bind-mounts the checkout's answer_sandbox.py)."""
    root = Path(tempfile.mkdtemp(prefix="ptflow-answer-sandbox-"))
    root.chmod(0o755)
    try:
        checkout = root / "PostTrainBench"
        make_fixture_checkout(checkout, evals=("humaneval",), agents=("codex",))
        commit = commit_main_evaluation(checkout, evals=("humaneval",))
        model = root / "tiny-qwen3"
        create_tiny_llama(model, build_char_tokenizer(["What is 12 + 34?"]), layers=1, hidden=16, heads=2, seed=0)
        fill_hf_cache(root, ("humaneval",))
        marker = root / "checkout.json"
        marker.write_text(json.dumps({"path": str(checkout), "commit": commit}))
        final = ptb.final_eval(str(checkout), commit, "humaneval")
        yield {"checkout": checkout, "commit": commit, "marker": marker, "model": model, "root": root, "final": final}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _he_call(final, seed=72332):
    return CheckoutCall.from_params({"eval_id": "humaneval", "task": "posttrainbench/humaneval", "seed": seed,
                                     "limit": 2, **final.call(seed),
                                     "posttrainbench": {"eval_dir": "humaneval", "objects": {}}})  # fmt: skip


def _he_seed(sb, name, monkeypatch, answer: str, runtime=None):
    (sb["root"] / f"{name}.py").write_text(answer)
    monkeypatch.setenv("PTB_FIXTURE_ANSWER_CODE", str(sb["root"] / f"{name}.py"))
    monkeypatch.delenv("ANSWER_SANDBOX_SOCKET", raising=False)
    monkeypatch.chdir(sb["root"])
    job = EvaluateSpec(HE_CELL, _he_call(sb["final"]), "fixture", ".", ".", runtime=runtime)
    out, model = sb["root"] / name, str(sb["model"])
    data = evaluate_final_seed(
        job, ModelUnderTest(model, {"path": model, "kind": "base", "commit_or_hash": "fixture", "step": None}),
        EvalOutputs(str(out / "eval.json"), str(out / "inspect")), EvalInputs(checkout=str(sb["marker"])),
        first=False, log=lambda *_: None,
    )  # fmt: skip
    return data, out / "inspect"


def test_humaneval_seed_is_scored_through_the_checkouts_answer_sandbox_and_its_answers_reach_nothing(
    sandboxed, monkeypatch
):
    """A seed of humaneval, each attempt inside the checkout's with_answer_sandbox_local.sh (run for real): its
    answers run in the sandbox, not the evaluation's process. They write no file here, see none of the evaluation's
    environment (a variable set there included), none of the checkout, model, HF cache or the evaluation's process,
    and no TCP port of this host; reaching nothing, they answer right, and the seed scores 1.0 through the socket."""
    final = sandboxed["final"]
    assert final.sandbox == ("apptainer", "local") and final.stages == ("", "--max-tokens 3000", "--max-tokens 2000")
    assert final.call(72332)["final"]["answer_sandbox"] == ["apptainer", "local"]
    listener = socket.create_server(("127.0.0.1", 0))
    monkeypatch.setenv("PTB_FIXTURE_VISIBLE", "an evaluation variable")
    root, marker = sandboxed["root"], sandboxed["root"] / "marker"
    paths = [str(sandboxed["checkout"] / "src/eval/tasks/humaneval/evaluate_final_eval.py"), str(sandboxed["model"]),
             str(root / "datasets"), str(root), f"/proc/{os.getpid()}"]  # fmt: skip
    answer = ANSWER.replace("@MARKER@", repr(str(marker))).replace("@PORT@", str(listener.getsockname()[1]))
    with listener:
        data, inspect = _he_seed(sandboxed, "answer", monkeypatch, answer.replace("@PATHS@", repr(paths)))
    log = (inspect / "final_eval_seed72332_1.txt").read_text()
    assert "PROBE" not in log and not list(root.glob("marker*")), log
    validate_eval_json(data)
    assert data["status"] == "scored" and data["metrics"]["value"] == 1.0 and len(data["attempts"]) == 1
    local = str(sandboxed["checkout"].resolve() / "src/eval/tasks/humaneval/with_answer_sandbox_local.sh")
    argv = data["posttrainbench"]["argv"]
    assert argv[:3] == ["bash", local, sys.executable] and argv[3] == "evaluate_final_eval.py"
    assert "answer sandbox ready (namespace jail" in log


def test_a_probe_that_reaches_something_is_reported(tmp_path):
    """The answer above raises what it saw where it reaches something: run here, outside any sandbox, it does."""
    marker = tmp_path / "marker"
    answer = (
        ANSWER.replace("@MARKER@", repr(str(marker))).replace("@PORT@", "1").replace("@PATHS@", repr([str(tmp_path)]))
    )
    namespace = {"QUESTION": "What is 12 + 34?"}
    exec(compile(answer, "<answer>", "exec"), namespace)  # noqa: S102 (our own test answer)
    with pytest.raises(RuntimeError, match="PROBE") as seen:
        namespace["solution"]()
    assert '"load_marker": true' in str(seen.value) and str(tmp_path) in str(seen.value)


def test_humaneval_is_never_scored_outside_its_sandbox(sandboxed):
    """Run bare, the checkout's evaluate_final_eval.py refuses before any model loads (main's flaw: an attempt
    outside the sandbox fails at once)."""
    cwd = sandboxed["checkout"] / "src/eval/tasks/humaneval"
    templates, model = "../../../../src/eval/templates", str(sandboxed["model"])
    argv = [sys.executable, "evaluate_final_eval.py", "--model-path", model, "--limit", "1", "--templates-dir",
            templates, "--seed", "1", "--json-output-file", "m.json"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "ANSWER_SANDBOX_SOCKET"}
    env.update(HF_HOME=str(sandboxed["root"]), HF_HUB_OFFLINE="1")
    bare = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert bare.returncode != 0 and "ANSWER_SANDBOX_SOCKET is not set" in bare.stderr
    assert not (cwd / "m.json").exists()


def test_a_sandbox_that_does_not_start_fails_the_seed_in_one_line_before_any_attempt(sandboxed, tmp_path):
    """An image without unshare (or user namespaces) fails the seed's job in one line, not each attempt into a
    baseline fallback; in an apptainer site's image, a socket that is not there does too."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "bash").symlink_to(shutil.which("bash"))
    call = _he_call(sandboxed["final"])
    with pytest.raises(ValueError, match=r"does not start here: ERROR: unshare not found") as failed:
        answer_sandbox.attempt_prefix(sandboxed["checkout"], call, "pyxis", {"PATH": str(bindir)})
    assert "\n" not in str(failed.value)
    with pytest.raises(ValueError, match="started without the checkout's answer sandbox"):
        answer_sandbox.attempt_prefix(sandboxed["checkout"], call, "apptainer", {"ANSWER_SANDBOX_SOCKET": "/no.sock"})


def test_a_site_without_the_checkouts_sandbox_for_it_is_refused_in_one_line(tmp_path):
    """13a49a0's checkout has with_answer_sandbox.sh only: an apptainer site runs it, a site without apptainer
    (venv, pyxis, enroot-edf, this machine) is refused when the jobs are built and before any attempt."""
    checkout = tmp_path / "PostTrainBench"
    make_fixture_checkout(checkout, evals=("humaneval",), agents=("codex",))
    only = ("src/eval/tasks/humaneval/answer_sandbox.py", "src/eval/tasks/humaneval/with_answer_sandbox.sh")
    local_sh = "src/eval/tasks/humaneval/with_answer_sandbox_local.sh"
    commit = commit_main_evaluation(checkout, evals=("humaneval",), answer_sandbox=only)
    final = ptb.final_eval(str(checkout), commit, "humaneval")
    assert final.sandbox == ("apptainer",)
    call = _he_call(final)
    assert answer_sandbox.checked(call, RuntimeSpec(site="hpc", kind="apptainer"), JobsError) is call
    with pytest.raises(JobsError) as refused:
        answer_sandbox.checked(call, RuntimeSpec(site="jrc", kind="pyxis"), JobsError)
    line = str(refused.value)
    assert "\n" not in line and "site jrc (runtime.kind pyxis) has no apptainer" in line
    assert "src/eval/tasks/humaneval/with_answer_sandbox_local.sh" in line
    local_only = tmp_path / "local-only"  # the other way round: a site with apptainer needs with_answer_sandbox.sh
    make_fixture_checkout(local_only, evals=("humaneval",), agents=("codex",))
    at = commit_main_evaluation(local_only, evals=("humaneval",), answer_sandbox=(only[0], local_sh))
    assert ptb.final_eval(str(local_only), at, "humaneval").sandbox == ("local",)
    why = answer_sandbox.refusal(_he_call(ptb.final_eval(str(local_only), at, "humaneval")), "apptainer")
    assert "runs its evaluation in apptainer" in why and "with_answer_sandbox.sh:" in why
    marker = tmp_path / "checkout.json"
    marker.write_text(json.dumps({"path": str(checkout), "commit": commit}))
    out, model = tmp_path / "seed", tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with pytest.raises(EvalConfigError, match="has no apptainer"):
        evaluate_final_seed(
            EvaluateSpec(HE_CELL, call, "fixture", ".", "."), ModelUnderTest(str(model), {}),
            EvalOutputs(str(out / "eval.json"), str(out / "inspect")), EvalInputs(checkout=str(marker)), first=True,
        )  # fmt: skip
    assert not list((out / "inspect").glob("final_eval_seed*"))


def test_on_an_apptainer_site_the_evaluation_image_starts_beside_the_checkouts_sandbox(sandboxed, tmp_path):
    """The job's start in the evaluation image runs as main's apptainer arm: the checkout's with_answer_sandbox.sh with
    the image's sif, then ptflow's ``apptainer exec`` of the job, which gets the socket's directory in APPTAINER_BIND
    and APPTAINERENV_ANSWER_SANDBOX_SOCKET. No apptainer here: a recording STAND-IN takes both command lines (the
    sandbox's server it starts on this host, unconfined, only so that the socket appears)."""
    bindir, record = tmp_path / "bin", tmp_path / "apptainer.jsonl"
    bindir.mkdir()
    (bindir / "apptainer").write_text(f"#!{sys.executable}\n" + APPTAINER_RECORDER.replace("@RECORD@", str(record)))
    (bindir / "apptainer").chmod(0o755)
    sif = tmp_path / "vllm_debug.sif"
    sif.touch()
    runtime = StageRuntime(RuntimeSpec(site="hpc", kind="apptainer"), image=str(sif), gpus=1)
    job = EvaluateSpec(HE_CELL, _he_call(sandboxed["final"]), "fixture", ".", ".", runtime=runtime)
    wrap = sandbox_wrap(job, str(sandboxed["marker"]))
    script = sandboxed["checkout"].resolve() / "src/eval/tasks/humaneval/with_answer_sandbox.sh"
    assert wrap == ["bash", str(script), str(sif)]
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "environ", env)
        assert run_in_runtime(runtime, "job.py", log=lambda *_: None, wrap=wrap) == 0
    sandbox, evaluation = [json.loads(ln) for ln in record.read_text().splitlines()]
    socket_dir = sandbox["argv"][sandbox["argv"].index("--bind") + 1].removesuffix(":/answer_sandbox")
    assert sandbox["argv"] == ["exec", "-c", "--cleanenv", "--pid", "--no-init", "--net", "--network", "none",
                               "--bind", f"{socket_dir}:/answer_sandbox", "--bind",
                               f"{script.parent}/answer_sandbox.py:/answer_sandbox.py:ro", str(sif), "python",
                               "/answer_sandbox.py", "serve", "/answer_sandbox/answers.sock"]  # fmt: skip
    assert set(sandbox["env"]) <= {"HOME", "PATH", "LC_CTYPE"}  # env -i (Python adds LC_CTYPE): none of the job's
    assert evaluation["argv"][:2] == ["exec", "--nv"] and evaluation["argv"][-3:] == [str(sif), "python3", "job.py"]
    assert evaluation["env"]["APPTAINER_BIND"] == f"{socket_dir}:/answer_sandbox"
    assert evaluation["env"]["APPTAINERENV_ANSWER_SANDBOX_SOCKET"] == "/answer_sandbox/answers.sock"
    assert not Path(socket_dir).exists()  # the sandbox went with the job


APPTAINER_RECORDER = r"""# STAND-IN apptainer (ptflow tests): records each command line and its environment; the
# answer sandbox's server (`... serve`) runs on this host, unconfined, its socket in the dir bound at /answer_sandbox
import json, os, sys
with open("@RECORD@", "a") as fh:
    fh.write(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ)}) + "\n")
if "serve" in sys.argv:
    binds = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "--bind"]
    host = {b.split(":")[1]: b.split(":")[0] for b in binds}
    server, sock = host["/answer_sandbox.py"], host["/answer_sandbox"] + "/answers.sock"
    os.execv(sys.executable, [sys.executable, server, "serve", sock])
"""
