"""PostTrainBench's judge protocols: which one a checkout has (read from its files), the refusal of one ptflow does
not know, and d27a95e's panel (run_judge.sh) as ptflow builds it, against the fixture's run_judge.sh run with the
container and CLIs stubbed on PATH (tests/support/ptb_judge_v11.py: its steps and command lines are the real ones')."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ptflow.config import posttrainbench as ptb
from ptflow.config.load import resolve
from ptflow.config.validate import ConfigError
from ptflow.stages.judge.sign_in import subscription_secrets
from ptflow.stages.posttrainbench import judge_v11 as v11
from ptflow.stages.posttrainbench.checkout import make_checkout
from tests.conftest import REPO
from tests.support.ptb_checkout import commit_change, make_fixture_checkout
from tests.unit.test_ptb_export import run  # noqa: F401, F811 (the export's fixture)

MODEL = "Qwen/Qwen3-1.7B-Base"
VERDICTS = {  # what each stubbed judge writes into task/judgement.json
    "codex": {"contamination": False, "disallowed_model": False, "justification_contamination": "clean data",
              "justification_disallowed_model": "fine-tuned the base model"},
    "opencode": {"contamination": True, "disallowed_model": False, "justification_contamination": "trained on test",
                 "justification_disallowed_model": "base model"},
    "api": {"disallowed_api_usage": False, "justification_disallowed_api_usage": "no hosted API call"},
}  # fmt: skip

# The container stand-in: records what run_judge.sh's `apptainer exec` gives the judge (options, environment,
# command, every file of the home with its content's hash), then plays the CLI: a JSON event on stdout and the
# verdict of $STUB_VERDICTS (by CLI; the API judge by its prompt) in the task dir.
APPTAINER_STUB = r"""#!/usr/bin/env python3
import hashlib, json, os, sys
from pathlib import Path

args = sys.argv[1:]
assert args.pop(0) == "exec"
rec = {"flags": [], "env": {}, "binds": []}
while args[0].startswith("--"):
    flag = args.pop(0)
    if flag in ("--containall", "--writable-tmpfs"):
        rec["flags"].append(flag)
    elif flag == "--env":
        key, _, value = args.pop(0).partition("=")
        rec["env"][key] = value
    elif flag == "--bind":
        rec["binds"].append(args.pop(0).split(":"))
    elif flag == "--home":
        rec["home"] = args.pop(0).split(":")
    elif flag == "--pwd":
        rec["pwd"] = args.pop(0)
rec["image"], rec["command"] = args[0], args[1:]
home = Path(rec["home"][0])
rec["files"] = {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(home.rglob("*")) if p.is_file()}
with open(os.environ["STUB_LOG"], "a") as fh:
    fh.write(json.dumps(rec) + "\n")
verdicts = json.loads(os.environ["STUB_VERDICTS"])
kind = "api" if "disallowed_api_usage" in rec["command"][-1] else rec["command"][0]
task = home / rec["pwd"].removeprefix(rec["home"][1] + "/")
(task / "judgement.json").write_text(json.dumps(verdicts[kind]))
print(json.dumps({"type": "turn.completed", "cli": rec["command"][0]}))
"""


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> tuple[Path, str]:
    """The fixture checkout at d27a95e's judge, with what git ignores there: .env, the subscription's auth.json and
    gsm8k's test_data.json."""
    root = tmp_path_factory.mktemp("ptb") / "PostTrainBench"
    commit = make_fixture_checkout(root, evals=("gsm8k",), agents=("codex",), judge="v1.1")
    (root / ".env").write_text("POST_TRAIN_BENCH_CONTAINERS_DIR=/containers\n")
    auth = {"OPENAI_API_KEY": None, "tokens": {"id_token": "eyJ-fixture-id-token-0123456789",
            "access_token": "fixture-access-token-0123456789", "refresh_token": "rt-fixture-refresh-0123456789",
            "account_id": "acct-fixture-0001"}, "last_refresh": "2026-05-18T00:00:00Z"}  # fmt: skip
    (root / v11.SUBSCRIPTION_AUTH).parent.mkdir(parents=True, exist_ok=True)
    (root / v11.SUBSCRIPTION_AUTH).write_text(json.dumps(auth))
    (root / "src/eval/tasks/gsm8k/test_data.json").write_text(json.dumps([{"question": "1+1?", "answer": "2"}]))
    return root, commit


@pytest.fixture()
def result_dir(tmp_path) -> Path:
    """An agent run's result dir as run_task.sh leaves it: task/ (final_model/ and a stale judgement.json in it),
    final_model/, solve_parsed.txt, and the first judging's files (which a rerun leaves alone)."""
    result = tmp_path / "results" / f"gsm8k_{MODEL.replace('/', '_')}_4242"
    (result / "task" / "final_model").mkdir(parents=True)
    (result / "task" / "train.py").write_text("print('train')\n")
    (result / "task" / "judgement.json").write_text('{"stale": true}')
    config = json.dumps({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64})
    (result / "task" / "final_model" / "config.json").write_text(config)
    (result / "final_model").mkdir()
    (result / "final_model" / "config.json").write_text(config)
    (result / "solve_parsed.txt").write_text("the agent's readable trace\n")
    (result / "judgement_gpt5_4.json").write_text('{"first": "judging"}')
    return result


def run_judge(checkout: Path, result: Path, tmp: Path, *mode: str) -> list[dict]:
    """The fixture's run_judge.sh with apptainer stubbed and python on PATH; the stub's records, one per judge."""
    stubs = tmp / "stubs"
    stubs.mkdir(exist_ok=True)
    (stubs / "apptainer").write_text(APPTAINER_STUB.replace("python3", sys.executable, 1))
    (stubs / "apptainer").chmod(0o755)
    (stubs / "python").unlink(missing_ok=True)
    (stubs / "python").symlink_to(sys.executable)
    log = tmp / "stub.jsonl"
    log.unlink(missing_ok=True)
    (tmp / "mktemp").mkdir(exist_ok=True)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(tmp), "TMPDIR": str(tmp / "mktemp"), "STUB_LOG": str(log),
           "STUB_VERDICTS": json.dumps(VERDICTS), "OPENCODE_API_KEY": "sk-opencode-fixture-0123456789"}  # fmt: skip
    script = checkout / "src/disallowed_usage_judge/run_judge.sh"
    proc = subprocess.run(["bash", str(script), *mode, str(result)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [json.loads(line) for line in log.read_text().splitlines()]


def ptflow_home(judge, checkout: Path, result: Path, dest: Path) -> dict[str, str]:
    """ptflow's home for ``judge``, built from its entries: path -> content hash, as the stub records them."""
    entries = v11.judge_home_entries(judge, checkout, "gsm8k", result / "task", result / "solve_parsed.txt")
    home = v11.build_judge_home(entries, dest)
    return {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(home.rglob("*")) if p.is_file()}  # fmt: skip


# ---- recognition ----


def test_the_fixture_checkouts_are_recognised_as_the_commits_they_follow(tmp_path, checkout):
    v10 = make_fixture_checkout(tmp_path / "v10", evals=("gsm8k",), agents=("codex",))
    assert ptb.judge_protocol(str(tmp_path / "v10"), v10) is ptb.JUDGE_V10
    root, commit = checkout
    assert ptb.judge_protocol(str(root), commit) is ptb.JUDGE_V11


def test_a_judge_ptflow_does_not_know_is_refused_at_planning_in_one_line(tmp_path, default_raw):
    root = tmp_path / "PostTrainBench"
    make_fixture_checkout(root, evals=("gsm8k",), agents=("codex",), judge="v1.1")
    script = root / "src/disallowed_usage_judge/run_judge.sh"
    changed = commit_change(root, "src/disallowed_usage_judge/run_judge.sh",
                            script.read_text().replace('"gpt-5.4"', '"gpt-5.5"'), "a newer judge model")  # fmt: skip
    blob = ptb.git(root, "rev-parse", f"{changed}:src/disallowed_usage_judge/run_judge.sh")
    with pytest.raises(ptb.CheckoutError) as caught:
        ptb.judge_protocol(str(root), changed)
    message = str(caught.value)
    assert "\n" not in message and f"at {changed[:12]} has a judge ptflow does not know" in message
    assert f"src/disallowed_usage_judge/run_judge.sh {blob[:12]}" in message
    assert "nearest d27a95e's judge v1.1: src/disallowed_usage_judge/run_judge.sh lacks" in message
    # every other part of the checkout runs as it is: turning the judge off is a way out (only here)
    assert message.endswith("ptflow knows 9082063's judge v1.0 and d27a95e's judge v1.1 and 241d556's judges of "
                            "src/judges/ (judge_lib.sh): pin one of those commits, or turn the judge off (judge: "
                            "{enabled: false})")  # fmt: skip
    # at planning: the config with this checkout and a judge is refused when it is loaded (ptflow plan, snakemake)
    default_raw["posttrainbench"] = {"commit": changed, "path": str(root)}
    default_raw["evals"] = [{"id": "gsm8k", "task": "posttrainbench/gsm8k"}]
    default_raw["agents"] = [{"id": "codex", "kind": "cli-agent", "cli": "codex", "model": "gpt-5.1-codex-max",
                              "hours": 1, "keys": ["OPENAI_API_KEY"]}]  # fmt: skip
    default_raw["judge"] = {"agent": "codex", "model": "gpt-5.1-codex", "keys": ["OPENAI_API_KEY"]}
    default_raw.pop("scoring", None)
    with pytest.raises(ConfigError, match=r"^config error at posttrainbench: the PostTrainBench checkout at") as err:
        resolve(default_raw, REPO, workdir=tmp_path)
    assert "\n" not in str(err.value)
    default_raw.pop("judge")  # nothing judges the cells: the judge's protocol does not matter
    assert resolve(default_raw, REPO, workdir=tmp_path).cfg.posttrainbench.commit == changed
    # a checkout the rule clones is refused by the rule, before any cell
    spec = {"commit": changed, "location": str(root), "repo": None, "paths": [ptb.JUDGE_DIR]}
    with pytest.raises(ptb.CheckoutError, match="has a judge ptflow does not know"):
        make_checkout(spec, tmp_path / "checkout.json", log=lambda _: None)


def test_the_checkout_rule_records_the_protocol_of_a_judged_checkout(tmp_path, checkout):
    root, commit = checkout
    spec = {"commit": commit, "location": str(root), "repo": None, "paths": [ptb.JUDGE_DIR]}
    assert make_checkout(spec, tmp_path / "m.json", log=lambda _: None)["judge_protocol"] == "v1.1"
    unjudged = make_checkout({**spec, "paths": ["src/eval/tasks/gsm8k"]}, tmp_path / "n.json", log=lambda _: None)
    assert "judge_protocol" not in unjudged
    assert set(v11.checkout_paths("gsm8k")) <= set(ptb.object_ids(root, commit, v11.checkout_paths("gsm8k")))


# ---- run_judge.sh as ptflow runs it ----


def test_each_judges_home_command_line_and_environment_are_run_judge_shs(tmp_path, checkout, result_dir):
    root, _ = checkout
    host_path = f"{tmp_path / 'stubs'}:/usr/bin:/bin"
    environ = {"OPENCODE_API_KEY": "sk-opencode-fixture-0123456789"}
    everyone = run_judge(root, result_dir, tmp_path)
    alone = {"gpt": everyone[0], "kimi": run_judge(root, result_dir, tmp_path, "--kimi-only")[0],
             "api": run_judge(root, result_dir, tmp_path, "--api-only")[0]}  # fmt: skip
    assert [r["command"][0] for r in everyone] == ["codex", "opencode", "codex"]
    for judge in v11.PANEL:
        seen = alone[judge.id]
        job_dir, job_tmp = Path(seen["home"][0]), Path(seen["home"][0]).parent / "tmp"
        prompt = v11.judge_prompt(root, judge, "gsm8k", MODEL, env={"PATH": host_path})
        assert seen["command"] == judge.argv(prompt), judge.id
        assert seen["env"] == judge.env(host_path, environ), judge.id
        spec = v11.container_spec(judge, root, job_dir, job_tmp, host_path, environ)
        assert seen["binds"] == [list(b) for b in spec["binds"]] and seen["home"] == list(spec["home"])
        assert seen["pwd"] == spec["pwd"] and seen["image"] == f"/containers/{spec['image']}.sif"
        assert seen["flags"] == ["--containall", "--writable-tmpfs"]
        assert seen["files"] == ptflow_home(judge, root, result_dir, tmp_path / f"home-{judge.id}"), judge.id
    tools = {"contamination_check.py", "model_identity_check.py", "reference_configs/Qwen_Qwen3-1.7B-Base.json"}
    assert tools | {"test_data.json", "final_model_config.json", "solve_parsed.txt"} <= set(alone["api"]["files"])
    assert "task/judgement.json" not in alone["api"]["files"] and "task/train.py" in alone["api"]["files"]
    # the API judge is asked its own question; the contamination judges the same prompt
    assert "disallowed_api_usage" in alone["api"]["command"][-1]
    assert everyone[0]["command"][-1] == everyone[1]["command"][-1] != everyone[2]["command"][-1]
    # in one home for all (run_judge.sh without a switch) a later judge sees what the earlier ones' setup left
    kimi_home, api_home = set(everyone[1]["files"]), set(everyone[2]["files"])
    assert kimi_home - set(alone["kimi"]["files"]) == {".codex/config.toml", ".codex/auth.json"}
    assert api_home - set(alone["api"]["files"]) == {"task/opencode.json"}
    # the subscription: auth.json bound onto an empty placeholder, never copied; its tokens are what ptflow masks
    assert everyone[0]["files"][".codex/auth.json"] == hashlib.sha256(b"").hexdigest()
    secrets = subscription_secrets(v11.subscription_auth(root))
    assert "rt-fixture-refresh-0123456789" in secrets and len(secrets) == 4


def test_reruns_keep_the_first_judging_and_the_other_judges_rerun_files(tmp_path, checkout, result_dir):
    root, _ = checkout
    run_judge(root, result_dir, tmp_path)
    names = {j.id: j.outputs(rerun=True)["verdict"] for j in v11.PANEL}
    verdicts = {j.id: json.loads((result_dir / names[j.id]).read_text()) for j in v11.PANEL}
    aggregated = json.loads((result_dir / "judge_result_rerun.json").read_text())
    assert aggregated == v11.aggregate(verdicts) and aggregated["contamination"] is True  # kimi flagged it
    gpt_before = (result_dir / names["gpt"]).stat().st_mtime_ns
    VERDICTS["opencode"]["contamination"] = False
    try:
        records = run_judge(root, result_dir, tmp_path, "--kimi-only")
    finally:
        VERDICTS["opencode"]["contamination"] = True
    assert [r["command"][0] for r in records] == ["opencode"]
    assert (result_dir / names["gpt"]).stat().st_mtime_ns == gpt_before
    assert json.loads((result_dir / "judge_result_rerun.json").read_text())["contamination"] is False
    assert (result_dir / "judgement_gpt5_4.json").read_text() == '{"first": "judging"}'
    assert {p.name for p in result_dir.glob("judge_output_*_rerun.*")} == {
        f"judge_output_{n}_rerun.{ext}" for n in ("gpt5_4", "kimi", "api") for ext in ("json", "txt")
    }
    assert [r["command"][0] for r in run_judge(root, result_dir, tmp_path, "--gpt-only")] == ["codex", "codex"]


def test_the_export_is_what_d27a95es_aggregation_reads(tmp_path, checkout):
    root, _ = checkout
    texts = {"gpt": json.dumps(VERDICTS["codex"]), "kimi": json.dumps(VERDICTS["opencode"]),
             "api": json.dumps(VERDICTS["api"])}  # fmt: skip
    results = tmp_path / "results"
    runs = {
        "flagged": texts,
        "clean": {**texts, "kimi": json.dumps(VERDICTS["codex"])},
        "partial": {"gpt": texts["gpt"]},
    }
    for method, verdicts in runs.items():
        run_dir = results / method / f"gsm8k_{MODEL.replace('/', '_')}_7"
        run_dir.mkdir(parents=True)
        for name, text in v11.export_texts(verdicts).items():
            (run_dir / name).write_text(text)
    # the checkout's own aggregate_judgement.py writes the judge_result.json ptflow's export writes
    flagged = results / "flagged" / f"gsm8k_{MODEL.replace('/', '_')}_7"
    judges = [f"{j.name}={flagged}/{j.outputs()['verdict']}" for j in v11.PANEL]
    argv = [sys.executable, str(root / v11.AGGREGATE_SCRIPT), *(a for j in judges for a in ("--judge", j))]
    subprocess.run([*argv, "--output", str(tmp_path / "theirs.json")], check=True, capture_output=True)
    assert (tmp_path / "theirs.json").read_text() == (flagged / "judge_result.json").read_text()
    env = {**os.environ, "POST_TRAIN_BENCH_RESULTS_DIR": str(results)}
    subprocess.run([sys.executable, str(root / "scripts/aggregate_contamination.py")], env=env, check=True,
                   capture_output=True, cwd=root)  # fmt: skip
    cells = {m: next(csv.reader((results / f"contamination_{m}.csv").open().readlines()[1:]))[1] for m in runs}
    assert cells == {"flagged": "C", "clean": "", "partial": "C:ERR M:ERR"}


def test_the_panel_a_d27a95e_checkout_implies():
    raw = v11.panel_config()
    assert [(j["id"], j["agent"], j["model"], j["fields"]) for j in raw["judges"]] == [
        ("gpt", "codex", "gpt-5.4", ["contamination", "disallowed_model"]),
        ("kimi", "opencode", "opencode/kimi-k2.6", ["contamination", "disallowed_model"]),
        ("api", "codex", "gpt-5.4", ["disallowed_api_usage"]),
    ]
    assert raw["decision"] == "any" and raw["judges"][1]["keys"] == ["OPENCODE_API_KEY"]
    effects = {"contamination": "fallback", "disallowed_model": "fallback", "disallowed_api_usage": "record"}
    assert raw["effects"] == effects  # the API verdict changes no score at d27a95e: recorded only
    with pytest.raises(v11.PtbVerdictError, match="judge api: judgement.json lacks justification_disallowed_api_usage"):
        v11.read_verdict(v11.API, '{"disallowed_api_usage": true}')


def test_ptflow_export_writes_a_v11_judged_cell_as_d27a95es_run_task_leaves_it(run, tmp_path, checkout):  # noqa: F811
    """A cell whose trace dir keeps the v1.1 panel's verdicts (judgement_<name>.json): the run dir gets them and
    judge_result.json, and the checkout's own aggregate_contamination.py reads the cell as flagged."""
    from ptflow.results.ptb_export import export_posttrainbench
    from tests.unit.test_ptb_export import BASE, cell_dir

    loaded, work, _ = run
    trace = cell_dir(work / "results", BASE, "add", "opus") / "agent"
    for judge, verdict in (("gpt5_4", "codex"), ("kimi", "opencode"), ("api", "api")):
        (trace / f"judgement_{judge}.json").write_text(json.dumps(VERDICTS[verdict]))
    # judge.json: the panel's decision of those votes (rule judge's), the one verdict the export writes
    fields = {"contamination": True, "disallowed_model": False, "disallowed_api_usage": False}
    effects = v11.panel_config()["effects"]
    decided = {"status": "judged", "flagged": True, "fields": fields, "effects": effects, "effect": "fallback"}
    (trace.parent / "judge.json").write_text(json.dumps(decided))
    dest = tmp_path / "ptb"
    export_posttrainbench(loaded.cfg, loaded.layout, dest, workdir=work, site=loaded.site)
    run_dir = next((dest / "claude_claude-opus-4-5_10h_run1").iterdir())
    names = {"judgement_gpt5_4.json", "judgement_kimi.json", "judgement_api.json", "judge_result.json"}
    assert names <= {p.name for p in run_dir.iterdir()}
    assert json.loads((run_dir / "judgement_kimi.json").read_text()) == VERDICTS["opencode"]
    root, _ = checkout
    env = {**os.environ, "POST_TRAIN_BENCH_RESULTS_DIR": str(dest)}
    subprocess.run([sys.executable, str(root / "scripts/aggregate_contamination.py")], env=env, check=True,
                   capture_output=True, cwd=root)  # fmt: skip
    rows = list(csv.reader((dest / "contamination_claude_claude-opus-4-5_10h_run1.csv").open()))
    assert rows[1][1] == "C"  # kimi flagged it: either contamination judge flags the run
