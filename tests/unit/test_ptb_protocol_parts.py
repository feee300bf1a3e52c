"""A PostTrainBench checkout's protocol, recognised part by part (evaluation, judges, sandbox keys, results) from
facts in its files (``ptflow.config.posttrainbench.checkout_protocol``): the fixture checkouts of 9082063 and d27a95e
are recognised with their versions; a checkout changed in one part is refused in one line naming that part, the
files found and the variants ptflow runs; no option (the judge off included) lets a known part run under an older
part's protocol; PostTrainBench main's checkout (tests/support/ptb_main.py) runs its evaluation (the seeded final
evaluation: tests/e2e/test_posttrainbench_final_eval.py), its sandbox keys (the key allowlist) and its results (main's
collect.py layout: tests/unit/test_ptb_export_main.py); a run_final_eval.sh without --default-seeds (214ccb4's form)
is refused in one line that says so."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ptflow.config import posttrainbench as ptb
from ptflow.config.load import resolve
from ptflow.stages.posttrainbench.checkout import make_checkout
from tests.conftest import REPO
from tests.support.ptb_checkout import commit_change, make_fixture_checkout

RUNS = {
    "evaluation": "ptflow runs 9082063's and d27a95e's one-shot evaluate.py and 13a49a0's seeded final evaluation "
    "(src/eval/run_final_eval.sh): pin one of those commits",
    "judges": "ptflow runs 9082063's judge v1.0 and d27a95e's judge v1.1 and 241d556's judges of src/judges/ "
    "(judge_lib.sh): pin one of those commits",
    "sandbox keys": "ptflow runs 9082063's and d27a95e's fixed key list of src/run_task.sh and 06b716e's key "
    "allowlist (agents/<agent>/api_keys.json with the task's required_api_keys): pin one of those commits",
    "results": "ptflow runs 9082063's and d27a95e's run dirs read by scripts/aggregate_*.py and 1fc5561's run dirs "
    "read by scripts/collect.py and aggregate.py: pin one of those commits",
}
KNOWS = {part: line.replace("ptflow runs", "ptflow knows") for part, line in RUNS.items()}
HEADS = {"evaluation": "has an evaluation", "judges": "has a judge", "sandbox keys": "has sandbox keys",
         "results": "has a results layout"}  # fmt: skip
# One part changed at a time, with texts of OURS (the facts are PostTrainBench's: paths, query modes, key files):
# (part, path, text, "run": main's variant, recognised and refused by name | "know": a variant ptflow does not know)
MAIN_FINAL_EVAL = 'case "$1" in --check) echo evaluate_final_eval.py ;; --default-seeds) echo 72332 ;; esac\n'
# a run_task.sh passing 9082063's keys (the facts of the sandbox keys part) but evaluating with another script
RUN_TASK_OTHER_EVAL = "\n".join(
    [
        'export CODEX_API_KEY="${OPENAI_API_KEY}"',
        *(f'--env {k}="${{{k}}}"' for k in ("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENCODE_API_KEY")),
        'python "evaluate_v2.py" --json-output-file "${EVAL_DIR}/metrics.json"',
        'run_evaluation_with_retry 4 ""',
        "",
    ]
)
CHANGES = [
    # run_final_eval.sh alone (no evaluate_final_eval.py, no default_temperature.py): neither variant
    ("evaluation", "src/eval/run_final_eval.sh", MAIN_FINAL_EVAL, "know"),
    ("evaluation", "src/eval/tasks/gsm8k/evaluate_final_eval.py", "print('seeded')\n", "know"),
    ("evaluation", "src/run_task.sh", RUN_TASK_OTHER_EVAL, "know"),
    # a judge_lib.sh of two judges (not main's four): no variant ptflow knows
    ("judges", "src/judges/judge_lib.sh", "ALL_JUDGES=(data_contamination_judge api_usage_judge)\n", "know"),
    # collect.py alone (no aggregate.py, no baselines.json): not main's results part, not 9082063's
    ("results", "scripts/collect.py", "# reads metrics.json and the judgements of each run dir\n", "know"),
]


@pytest.fixture(scope="module")
def v11_checkout(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("ptb") / "PostTrainBench"
    return root, make_fixture_checkout(root, evals=("gsm8k",), agents=("codex",), judge="v1.1")


def _copy(v11_checkout, tmp_path: Path) -> Path:
    root = tmp_path / "PostTrainBench"
    shutil.copytree(v11_checkout[0], root, symlinks=True)
    return root


def _config(default_raw: dict, root: Path, commit: str, judged: bool = True) -> dict:
    default_raw["posttrainbench"] = {"commit": commit, "path": str(root)}
    default_raw["evals"] = [{"id": "gsm8k", "task": "posttrainbench/gsm8k"}]
    default_raw["agents"] = [{"id": "codex", "kind": "cli-agent", "cli": "codex", "model": "gpt-5.1-codex-max",
                              "hours": 1, "keys": ["OPENAI_API_KEY"]}]  # fmt: skip
    if judged:
        default_raw["judge"] = {"agent": "codex", "model": "gpt-5.1-codex", "keys": ["OPENAI_API_KEY"]}
    else:
        default_raw.pop("judge", None)
    default_raw.pop("scoring", None)
    return default_raw


def test_the_fixture_checkouts_of_9082063_and_d27a95e_are_recognised_part_by_part(tmp_path, v11_checkout):
    v10 = make_fixture_checkout(tmp_path / "v10", evals=("gsm8k",), agents=("codex",))
    found = ptb.checkout_protocol(str(tmp_path / "v10"), v10)
    assert found.versions() == {"evaluation": "one-shot", "judges": "v1.0", "sandbox keys": "fixed",
                                "results": "aggregate"}  # fmt: skip
    assert found.refusals == () and found.part("judges") is ptb.JUDGE_V10
    found.check(judged=True)
    root, commit = v11_checkout
    found = ptb.checkout_protocol(str(root), commit)
    assert found.versions()["judges"] == "v1.1" and found.part("evaluation") is ptb.EVAL_ONE_SHOT
    assert found.part("sandbox keys") is ptb.KEYS_FIXED and found.part("results") is ptb.RESULTS_AGGREGATE
    # the checkout rule records every part's version (the judges' also as judge_protocol, read by the jobs)
    spec = {"commit": commit, "location": str(root), "repo": None, "paths": [ptb.JUDGE_DIR]}
    marker = make_checkout(spec, tmp_path / "m.json", log=lambda _: None)
    assert marker["protocol"] == found.versions() and marker["judge_protocol"] == "v1.1"
    unjudged = make_checkout({**spec, "paths": ["src/eval/tasks/gsm8k"]}, tmp_path / "n.json", log=lambda _: None)
    assert "judges" not in unjudged["protocol"] and "judge_protocol" not in unjudged


@pytest.mark.parametrize(("part", "path", "text", "verb"), CHANGES, ids=[f"{c[0]}:{c[1]}" for c in CHANGES])
def test_a_checkout_changed_in_one_part_is_refused_in_one_line_naming_it(tmp_path, v11_checkout, part, path, text,
                                                                        verb):  # fmt: skip
    root = _copy(v11_checkout, tmp_path)
    changed = commit_change(root, path, text, f"one part changed: {part}")
    blob = ptb.git(root, "rev-parse", f"{changed}:{path}")
    found = ptb.checkout_protocol(str(root), changed)
    assert [p for p, _ in found.refusals] == [part]  # the other parts are as they were
    line = dict(found.refusals)[part]
    assert "\n" not in line and line.startswith(f"the PostTrainBench checkout at {changed[:12]} {HEADS[part]}")
    assert f"ptflow does not {verb} (" in line and f"{path} {blob[:12]}" in line
    # every other part runs as it is: only a refused judge may point at the judge off as a way out
    way_out = ", or turn the judge off (judge: {enabled: false})" if part == "judges" else ""
    assert line.endswith((RUNS if verb == "run" else KNOWS)[part] + way_out)
    with pytest.raises(ptb.CheckoutError) as caught:
        found.check(judged=True)
    assert str(caught.value) == line
    if part == "judges":  # the judge off skips the judges part, and only it
        found.check(judged=False)
        return
    with pytest.raises(ptb.CheckoutError, match=HEADS[part]):
        found.check(judged=False)


def _main_evaluation(v11_checkout, tmp_path: Path) -> tuple[Path, str]:
    """main's seeded final evaluation beside d27a95e's other parts (tests/support/ptb_main.py)."""
    from tests.support.ptb_main import commit_main_evaluation

    root = _copy(v11_checkout, tmp_path)
    return root, commit_main_evaluation(root, evals=("gsm8k",))


def test_main_s_evaluation_runs_seeded_judged_or_not_with_what_its_script_says(tmp_path, v11_checkout, default_raw):
    root, changed = _main_evaluation(v11_checkout, tmp_path)
    found = ptb.checkout_protocol(str(root), changed)
    assert found.refusals == () and found.part("evaluation") is ptb.EVAL_FINAL and ptb.EVAL_FINAL.runs
    assert found.versions() == {"evaluation": "seeded-final", "judges": "v1.1", "sandbox keys": "fixed",
                                "results": "aggregate"}  # fmt: skip
    for judged in (True, False):
        loaded = resolve(_config(default_raw, root, changed, judged), REPO, workdir=tmp_path)
        e = loaded.cfg.evals["gsm8k"]
        assert e.seeds == (72332, 87681, 38992, 92201, 13818) and not e.seed_changes_data and e.seeded
        assert e.final == ptb.FinalEval("evaluate_final_eval.py", e.seeds, True,
                                        ("", "--max-tokens 3000", "--max-tokens 2000"))  # fmt: skip
    # the checkout rule records it; a clone this run made while its cells were planned one-shot (without
    # run_final_eval.sh among the paths) is refused: the seeds are read when the workflow is parsed
    spec = {"commit": changed, "location": str(root), "repo": None,
            "paths": ptb.final_eval_paths("gsm8k")}  # fmt: skip
    assert make_checkout(spec, tmp_path / "m.json", log=lambda _: None)["protocol"]["evaluation"] == "seeded-final"
    with pytest.raises(ptb.CheckoutError, match=r"seeded final evaluation .*run the workflow again$"):
        make_checkout({**spec, "paths": ["src/eval/tasks/gsm8k"]}, tmp_path / "n.json", log=lambda _: None)
    assert not (tmp_path / "n.json").exists()


def test_a_run_final_eval_sh_without_default_seeds_is_refused_in_one_line_saying_so(tmp_path, v11_checkout):
    """214ccb4's run_final_eval.sh (EVAL_RUNTIME, --check, no --default-seeds): ptflow cannot ask it for seeds."""
    root, main = _main_evaluation(v11_checkout, tmp_path)
    script = (root / ptb.RUN_FINAL_EVAL).read_text()
    older = script.replace("--default-seeds", "--default-seed-list")  # the query mode gone, the rest as it was
    changed = commit_change(root, ptb.RUN_FINAL_EVAL, older, "run_final_eval.sh without --default-seeds")
    line = dict(ptb.checkout_protocol(str(root), changed).refusals)["evaluation"]
    assert "\n" not in line and "ptflow does not know (src/eval/run_final_eval.sh " in line
    assert "nearest 13a49a0's seeded final evaluation (src/eval/run_final_eval.sh): src/eval/run_final_eval.sh " \
        "lacks '--default-seeds'" in line and line.endswith(KNOWS["evaluation"])  # fmt: skip
    with pytest.raises(ptb.CheckoutError, match="has no --default-seeds query"):
        ptb.final_eval(str(root), changed, "gsm8k")


def test_the_checkouts_cascade_is_read_from_its_script_in_either_layout():
    real = (  # 13a49a0's layout: the assignment on the line below its case pattern
        '    case "${task}" in\n        aime2025|gpqamain)\n            STAGE_MAX_TOKENS_ARGS=("" "--max-tokens 12000" '
        '"--max-tokens 8000")\n            ;;\n        gsm8k|humaneval)\n            STAGE_MAX_TOKENS_ARGS=("" '
        '"--max-tokens 3000" "--max-tokens 2000")\n            ;;\n        *)\n            die "no cascade"\n'
    )
    assert ptb.stage_max_tokens_args(real, "humaneval") == ("", "--max-tokens 3000", "--max-tokens 2000")
    assert ptb.stage_max_tokens_args(real, "gpqamain") == ("", "--max-tokens 12000", "--max-tokens 8000")
    assert ptb.stage_max_tokens_args(real, "bfcl") is None
    one_line = '        gsm8k) STAGE_MAX_TOKENS_ARGS=("" "--max-tokens 3000" "--max-tokens 2000") ;;\n'
    assert ptb.stage_max_tokens_args(one_line, "gsm8k") == ("", "--max-tokens 3000", "--max-tokens 2000")


def test_main_s_key_allowlist_is_recognised_and_run(tmp_path, v11_checkout):
    """An agents/<agent>/api_keys.json over d27a95e's checkout: the sandbox keys part is main's allowlist, which
    ptflow runs (ptflow.config.ptb_keys); every other part is as it was."""
    root = _copy(v11_checkout, tmp_path)
    changed = commit_change(root, "agents/codex/api_keys.json", '{"allowed_api_keys": ["CODEX_API_KEY"]}\n',
                            "main's key allowlist")  # fmt: skip
    found = ptb.checkout_protocol(str(root), changed)
    assert found.refusals == () and found.part("sandbox keys") is ptb.KEYS_UNION and ptb.KEYS_UNION.runs
    assert found.versions() == {"evaluation": "one-shot", "judges": "v1.1", "sandbox keys": "allowlist",
                                "results": "aggregate"}  # fmt: skip
    found.check(judged=True)
    spec = {"commit": changed, "location": str(root), "repo": None, "paths": ["src/eval/tasks/gsm8k"]}
    assert make_checkout(spec, tmp_path / "m.json", log=lambda _: None)["protocol"]["sandbox keys"] == "allowlist"


def test_main_s_checkout_is_recognised_part_by_part_and_runs_its_evaluation(tmp_path):
    from tests.support.ptb_main import commit_main

    root = tmp_path / "PostTrainBench"
    make_fixture_checkout(root, evals=("gsm8k",), agents=("codex",), judge="v1.1")
    main = commit_main(root, evals=("gsm8k",), agents=("codex",))
    found = ptb.checkout_protocol(str(root), main)
    assert found.part("evaluation") is ptb.EVAL_FINAL and found.versions()["evaluation"] == "seeded-final"
    assert found.part("results") is ptb.RESULTS_COLLECT and found.versions()["results"] == "collect"
    assert found.part("sandbox keys") is ptb.KEYS_UNION and found.versions()["sandbox keys"] == "allowlist"
    assert set(dict(found.refusals)) <= {"judges"}
    for part, line in found.refusals:  # a judge ptflow does not run yet: refused by name, the judge off skips it
        blob = ptb.git(root, "rev-parse", f"{main}:src/judges/judge_lib.sh")
        assert "\n" not in line and f"{HEADS[part]} ptflow does not run (" in line, line
        assert f"src/judges/judge_lib.sh {blob[:12]}" in line and "PostTrainBench main's" in line, line
        with pytest.raises(ptb.CheckoutError, match="has a judge ptflow does not run"):
            found.check(judged=True)
    found.check(judged=False)


def test_main_s_judges_are_recognised_and_run(tmp_path):
    """main's src/judges/ (judge_lib.sh's four judges, their pins and command line): the judges part ptflow runs
    (tests/unit/test_ptb_judge_main.py); a judge_lib.sh with another pin is one ptflow does not know."""
    from tests.support.ptb_main import commit_main

    root = tmp_path / "PostTrainBench"
    make_fixture_checkout(root, evals=("gsm8k",), agents=("codex",), judge="v1.1")
    main = commit_main(root, evals=("gsm8k",), agents=("codex",))
    found = ptb.checkout_protocol(str(root), main)
    assert found.part("judges") is ptb.JUDGES_MAIN and ptb.JUDGES_MAIN.runs
    assert found.versions()["judges"] == "src/judges" and "judges" not in dict(found.refusals)
    lib = (root / "src/judges/judge_lib.sh").read_text().replace('"0.144.5"', '"0.150.0"')
    changed = commit_change(root, "src/judges/judge_lib.sh", lib, "another codex pin")
    line = dict(ptb.checkout_protocol(str(root), changed).refusals)["judges"]
    assert "has a judge ptflow does not know (src/judges/judge_lib.sh " in line and "0.144.5" in line, line
