"""PostTrainBench main's judges (``src/judges/``, judge_lib.sh @ 241d5564) as ptflow runs them
(``ptflow.stages.posttrainbench.judge_main``): a checkout with main's judges gives its cells the panel of
``ALL_JUDGES`` (four votes, each the codex CLI with main's model, effort, CLI pin and ChatGPT sign-in); each judge's
home, environment, binds, pinned-CLI install and command line are those the fixture's judge_lib.sh (its functions run
with ``apptainer`` stubbed, tests/support/ptb_main.py) gives it; a vote runs its judge (a stand-in codex at the pinned
path) and its outcome is read as main's collect.py reads it; the panel's effects are main's (baseline for
contamination, model and API flags, a PTB lookup stops the aggregation, the general verdict is recorded only); the
sign-in is checked at preflight; the agent's home gets main's decontamination tooling."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ptflow.config import posttrainbench as ptb
from ptflow.config.judges import PANEL_NEEDS
from ptflow.config.load import resolve
from ptflow.jobs.build import Jobs
from ptflow.stages.judge.ballot import Ballot
from ptflow.stages.judge.panel import _vote, decide
from ptflow.stages.judge.sign_in import subscription_secrets
from ptflow.stages.judge.vote import judge_cell
from ptflow.stages.posttrainbench import judge_main as jm
from ptflow.stages.posttrainbench import judge_panels
from ptflow.stages.posttrainbench.checkout import make_checkout
from tests.conftest import REPO
from tests.support.codex_sign_in import write_codex_sign_in
from tests.support.ptb_checkout import _commit, make_fixture_checkout
from tests.support.ptb_main import JUDGE_CODEX_VERSION, JUDGE_MODEL, JUDGES, main_files

MODEL = "Qwen/Qwen3-1.7B-Base"
AGENT_MODEL = "gpt-5.1-codex-max"
ACCESS, REFRESH = "fixture-access-main-0123456789abcdef", "rt-fixture-main-0123456789abcdef"
CLEAN = {  # what each judge answers about a clean cell (main's schemas)
    "data_contamination_judge": {"contamination": False, "disallowed_model": False,
                                 "justification_contamination": "own data", "justification_disallowed_model": "base"},
    "api_usage_judge": {"disallowed_api_usage": False, "justification_disallowed_api_usage": "no hosted API"},
    "ptb_lookup_judge": {"disallowed_ptb_lookup": False, "justification_disallowed_ptb_lookup": "no lookup"},
    "general_judge": {"general_anomaly": True, "justification_general_anomaly": "odd, but recorded only"},
}  # fmt: skip

# The container stand-in: `npm install` puts a stand-in codex at the prefix; the judge's exec is recorded (flags,
# environment, binds, home, pwd, image, command, every file of the home with its hash).
APPTAINER_STUB = r"""#!PYTHON
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
if rec["command"][0] == "npm":
    prefix = home / rec["command"][rec["command"].index("--prefix") + 1].removeprefix(rec["home"][1] + "/")
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "codex").write_text("#!/bin/sh\n")
    (prefix / "bin" / "codex").chmod(0o755)
else:
    rec["files"] = {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in sorted(home.rglob("*")) if p.is_file() and ".codex-cli-" not in str(p)}
with open(os.environ["STUB_LOG"], "a") as fh:
    fh.write(json.dumps(rec) + "\n")
"""
# judge_lib.sh's steps for one judge, as run_judges.sh runs them (its job dir, the task and trace copied first)
RUN_ONE = r"""set -e
source src/judges/judge_lib.sh
cp -r "$RESULT/task" "$JOB_DIR/task"
rm -f "$JOB_DIR/task/judgement.json"
cp "$RESULT/solve_parsed.txt" "$JOB_DIR/solve_parsed.txt"
prepare_judge_sandbox "$JOB_DIR" gsm8k "$RESULT/final_model/config.json"
setup_judge_codex_auth "$JOB_DIR"
JUDGE_EXTRA_APPTAINER_ARGS=()
load_judge_conf "$JUDGE"
JUDGE_PROMPT=$(build_judge_prompt "$JUDGE" gsm8k "$MODEL" codex "$AGENT_CONFIG")
run_judge_exec "$JOB_DIR" "$JOB_TMP" "$RESULT/judge_output.json" "$JUDGE_PROMPT"
"""
# A stand-in codex (at the pinned path, or installed there by a stand-in npm): prints the home's auth.json (what a
# careless CLI might) and writes the verdict its verdicts.json names for the judge its prompt names.
CODEX_STAND_IN = r"""#!PYTHON
import json, os, sys
from pathlib import Path
prompt = sys.argv[-1]
verdicts = json.loads(Path(sys.argv[0]).with_name("verdicts.json").read_text())
judge = next(j for j in verdicts if f"FIXTURE {j} prompt" in prompt)
auth = Path(os.environ["HOME"], ".codex/auth.json")
print(json.dumps({"type": "note", "auth": auth.read_text() if auth.is_file() else "", "argv": sys.argv[1:-1]}))
verdict = verdicts[judge]
if verdict is not None:
    Path("judgement.json").write_text(verdict if isinstance(verdict, str) else json.dumps(verdict))
"""


def commit_main_judges(dest: Path, evals=("gsm8k",)) -> str:
    """main's judges ALONE over the v1.1 fixture checkout at ``dest`` (tests/support/ptb_main.py's src/judges/ files
    and the evals' test_data.json; judge_tools/ moved there, src/disallowed_usage_judge/ gone): its other parts stay
    d27a95e's, which ptflow runs."""
    old = dest / "src/disallowed_usage_judge"
    (dest / "src/judges").mkdir(parents=True, exist_ok=True)
    shutil.move(old / "judge_tools", dest / "src/judges/judge_tools")
    shutil.rmtree(old)
    for rel, text in main_files(evals, ()).items():
        if rel.startswith("src/judges/") or rel.endswith("/test_data.json"):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_text(text)
    return _commit(dest, "FIXTURE main's judges (ptflow tests)")


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("ptb") / "PostTrainBench"
    make_fixture_checkout(root, evals=("gsm8k",), agents=("codex",), judge="v1.1")
    commit = commit_main_judges(root)
    write_codex_sign_in(root / jm.SUBSCRIPTION_AUTH, ACCESS, REFRESH)  # untracked, as in PostTrainBench
    return root, commit


@pytest.fixture()
def result_dir(tmp_path) -> Path:
    """An agent run's result dir: task/ (final_model/ and a stale judgement.json in it), final_model/, the trace."""
    result = tmp_path / "results" / "gsm8k_Qwen_Qwen3-1.7B-Base_4242"
    (result / "task" / "final_model").mkdir(parents=True)
    (result / "task" / "train.py").write_text("print('train')\n")
    (result / "task" / "judgement.json").write_text('{"stale": true}')
    config = json.dumps({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64})
    (result / "task" / "final_model" / "config.json").write_text(config)
    (result / "final_model").mkdir()
    (result / "final_model" / "config.json").write_text(config)
    (result / "solve_parsed.txt").write_text("the agent's readable trace\n")
    return result


def test_main_s_judges_are_recognised_and_its_panel_is_judge_lib_sh_s(checkout):
    root, commit = checkout
    assert ptb.judge_protocol(str(root), commit) is ptb.JUDGES_MAIN
    assert judge_panels.adapter("src/judges") is jm and ptb.checkout_protocol(str(root), commit).refusals == ()
    lib = (root / jm.LIB).read_text()
    assert jm.ALL_JUDGES_LINE in lib and [j.name for j in jm.PANEL] == list(JUDGES)
    assert jm.lib_defaults(lib) == {"JUDGE_DEFAULT_MODEL": jm.DEFAULT_MODEL, "JUDGE_DEFAULT_REASONING_EFFORT": "xhigh",
                                    "JUDGE_DEFAULT_CODEX_VERSION": jm.DEFAULT_CODEX_VERSION,
                                    "JUDGE_CONTAINER": f"{jm.IMAGE}.sif"}  # fmt: skip
    assert (jm.DEFAULT_MODEL, jm.DEFAULT_CODEX_VERSION) == (JUDGE_MODEL, JUDGE_CODEX_VERSION)
    for judge in jm.PANEL:  # each judge.conf's output id (general's: the README's, its judge.conf is a stand-in)
        assert jm.judge_conf(root, judge.name)["JUDGE_OUTPUT_ID"] == judge.output_id
        assert jm.panel_judge(judge.id, root) == judge  # no judge.conf overrides the defaults
    panel = jm.panel()
    assert [(j.id, j.cli_name, j.settings["model"], j.fields, j.required) for j in panel.judges] == [
        ("data-contamination", "codex", "gpt-5.6-terra", ("contamination", "disallowed_model"), True),
        ("api-usage", "codex", "gpt-5.6-terra", ("disallowed_api_usage",), True),
        ("ptb-lookup", "codex", "gpt-5.6-terra", ("disallowed_ptb_lookup",), True),
        ("general", "codex", "gpt-5.6-terra", ("general_anomaly",), False),
    ]
    for version, needs in PANEL_NEEDS.items():  # what preflight asks of each panel: the panel's own
        own = judge_panels.adapter(version)
        assert needs.label == own.LABEL and needs.signed == tuple(j.id for j in own.PANEL if j.subscription)
        assert needs.keys == tuple((j.id, j.key) for j in own.PANEL if j.key)
    assert panel.effects == {"contamination": "fallback", "disallowed_model": "fallback",
                             "disallowed_api_usage": "fallback", "disallowed_ptb_lookup": "stop",
                             "general_anomaly": "record"}  # fmt: skip


def test_a_judge_conf_overrides_the_defaults_as_load_judge_conf_does(tmp_path, checkout):
    root, _ = checkout
    copy = tmp_path / "copy"
    shutil.copytree(root / "src/judges", copy / "src/judges")
    conf = copy / "src/judges/general_judge/judge.conf"
    conf.write_text(conf.read_text() + 'JUDGE_MODEL="gpt-5.7"\nJUDGE_CODEX_VERSION=""\n')
    judge = jm.panel_judge("general", copy)
    assert (judge.model, judge.effort, judge.pin) == ("gpt-5.7", "xhigh", None)
    assert judge.argv("p", "/home/ben")[0] == "codex"  # an empty pin: the image's codex


def test_each_judges_home_install_and_command_line_are_judge_lib_sh_s(tmp_path, checkout, result_dir):
    """The fixture's judge_lib.sh run for each judge (apptainer stubbed): the pinned codex installed by npm into the
    home in the judge's image, then the judge's exec: ptflow's home, environment, binds and argv are the same."""
    root, _ = checkout
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "apptainer").write_text(APPTAINER_STUB.replace("PYTHON", sys.executable, 1))
    (stubs / "apptainer").chmod(0o755)
    (stubs / "python").symlink_to(sys.executable)
    log = tmp_path / "stub.jsonl"
    path = f"{stubs}:/usr/bin:/bin"
    for judge in jm.PANEL:
        job_dir, job_tmp = tmp_path / judge.id / "job_dir", tmp_path / judge.id / "tmp"
        job_dir.mkdir(parents=True)
        job_tmp.mkdir()
        log.unlink(missing_ok=True)
        env = {"PATH": path, "HOME": str(tmp_path), "STUB_LOG": str(log), "POST_TRAIN_BENCH_CONTAINERS_DIR": "/c",
               "JOB_DIR": str(job_dir), "JOB_TMP": str(job_tmp), "RESULT": str(result_dir), "JUDGE": judge.name,
               "MODEL": MODEL, "AGENT_CONFIG": AGENT_MODEL}  # fmt: skip
        proc = subprocess.run(["bash", "-c", RUN_ONE], cwd=root, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        install, run = [json.loads(line) for line in log.read_text().splitlines()]
        # the install: npm in the judge's image, the home at /home/ben, the private /tmp
        assert install["command"] == judge.install_argv(jm.HOME) and install["image"] == f"/c/{jm.IMAGE}.sif"
        assert install["env"] == judge.install_env(path) and install["binds"] == [[str(job_tmp), "/tmp"]]
        # the judge: its argv (pinned codex, model, effort, the prompt get_judge_prompt.py gives), env, binds, home
        prompt = jm.judge_prompt(root, judge, "gsm8k", MODEL, {"agent": "codex", "agent_config": AGENT_MODEL},
                                 env={"PATH": path})  # fmt: skip
        assert f"FIXTURE {judge.name} prompt" in prompt
        assert run["command"] == judge.argv(prompt, jm.HOME), run["command"][:14]
        assert run["command"][0] == f"/home/ben/.codex-cli-{JUDGE_CODEX_VERSION}/bin/codex"
        assert run["env"] == judge.env(path, {}) and run["flags"] == ["--containall", "--writable-tmpfs"]
        auth = Path(root.resolve(), jm.SUBSCRIPTION_AUTH)
        assert [tuple(b) for b in run["binds"]] == judge.binds(root.resolve(), job_tmp, auth)
        assert run["home"] == [str(job_dir), jm.HOME] and run["pwd"] == f"{jm.HOME}/{jm.TASK}"
        entries = jm.judge_home_entries(judge, root, "gsm8k", result_dir / "task", result_dir / "solve_parsed.txt")
        home = jm.build_judge_home(entries, tmp_path / judge.id / "ptflow")
        ours = {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(home.rglob("*")) if p.is_file()}  # fmt: skip
        assert ours == run["files"]
        assert {"test_data.json", "contamination_check.py", ".codex/auth.json", "final_model_config.json"} <= set(ours)


def _stand_in_bin(where: Path, verdicts: dict) -> Path:
    (where / "bin").mkdir(parents=True)
    (where / "bin" / "verdicts.json").write_text(json.dumps(verdicts))
    (where / "bin" / "codex").write_text(CODEX_STAND_IN.replace("PYTHON", sys.executable, 1))
    (where / "bin" / "codex").chmod(0o755)
    return where


def _cell(tmp_path: Path) -> dict:
    scratch = tmp_path / "scratch"
    (scratch / "task" / "final_model").mkdir(parents=True)
    (scratch / "task" / "final_model" / "config.json").write_text('{"hidden_size": 64}')
    (scratch / "task" / "judgement.json").write_text('{"the agent": "wrote this"}')
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "stdout.log").write_text('{"type": "message", "content": "trained"}\n')
    (trace / "stderr.log").write_text("")
    return {"agent_run": {"trace_dir": str(trace), "workspace": str(scratch / "task"), "cli": "codex"}}


def _votes(root: Path, tmp_path: Path, cell_dir: Path, given: Path | None, logged: list) -> list:
    manifest = _cell(tmp_path)
    out = []
    for judge in jm.panel().judges:
        auth = str(root / jm.SUBSCRIPTION_AUTH)
        vote = {"judge": judge.id, "run": 1, "fields": list(judge.fields), "protocol": jm.PROTOCOL,
                "auth_json": auth, "agent": "codex", "agent_config": AGENT_MODEL}  # fmt: skip
        vote |= {"codex_cli": str(given)} if given else {}
        ballot = Ballot(judge.settings, cell_dir / "judges" / judge.id / "run1.json", vote)
        out.append(judge_cell(cell={"model": MODEL, "eval": "gsm8k", "agent": "codex"}, manifest=manifest,
                              ballot=ballot, checkout={"path": str(root), "eval_dir": "gsm8k"},
                              log=logged.append))  # fmt: skip
    return out


def test_each_vote_runs_its_judge_and_the_panel_has_main_s_effects(tmp_path, monkeypatch, checkout):
    """Four votes on one cell, each its judge (a stand-in codex at the pinned path, linked from
    posttrainbench.judge.codex_cli) in a home of its own, its judgement.json kept and read as collect.py reads it;
    the panel decides with main's effects."""
    root, _ = checkout
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    given = _stand_in_bin(tmp_path / "codex-prefix", CLEAN)
    cell_dir, logged = tmp_path / "cell", []
    votes = _votes(root, tmp_path, cell_dir, given, logged)
    assert [(v["status"], v["fields"]) for v in votes] == [
        ("judged", {"contamination": False, "disallowed_model": False}),
        ("judged", {"disallowed_api_usage": False}),
        ("judged", {"disallowed_ptb_lookup": False}),
        ("judged", {"general_anomaly": True}),
    ]
    kept = json.loads((cell_dir / "judges/general/run1/judgement.json").read_text())
    assert kept == CLEAN["general_judge"]
    shown = [line for line in logged if "PostTrainBench main)" in line]
    assert len(shown) == 4 and all(f".codex-cli-{JUDGE_CODEX_VERSION}/bin/codex --search -a never exec" in s
                                   and "--model gpt-5.6-terra <judge prompt>" in s for s in shown)  # fmt: skip
    # the sign-in was there (linked), and nothing kept holds its tokens
    printed = json.loads((cell_dir / "judges/api-usage/run1/judge_stdout.log").read_text().splitlines()[0])
    assert printed["auth"] and ACCESS not in printed["auth"] and "***" in printed["auth"]
    secrets = subscription_secrets(root / jm.SUBSCRIPTION_AUTH)
    for path in cell_dir.rglob("*"):
        if path.is_file():
            assert not any(s in path.read_text(errors="replace") for s in secrets), path
    assert not subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    # the export: each judgement as collect_judge_output names it
    files = dict(jm.export_from_votes(lambda j: cell_dir / "judges" / j / "run1.json"))
    assert set(files) == {"judgement_gpt5_4.json", "judgement_api.json", "judgement_ptb_lookup.json",
                          "judgement_general.json"}  # fmt: skip
    # the panel: the general flag is recorded only
    panel = jm.panel().to_params()
    read = [_vote(cell_dir / "judges" / j.id / "run1.json") for j in jm.panel().judges]
    decided = decide(panel, read)
    assert (decided["status"], decided["flagged"], decided["effect"]) == ("judged", False, None)
    assert decided["fields"]["general_anomaly"] is True

    def flag(judge_id: str, field: str) -> dict:
        return decide(panel, [{**v, "fields": {**v["fields"], field: True}} if v["judge"] == judge_id else v
                              for v in read])  # fmt: skip

    assert flag("data-contamination", "contamination")["effect"] == "fallback"
    assert flag("data-contamination", "disallowed_model")["effect"] == "fallback"
    assert flag("api-usage", "disallowed_api_usage")["effect"] == "fallback"
    assert flag("ptb-lookup", "disallowed_ptb_lookup")["effect"] == "stop"
    # a general judge without a verdict leaves the cell judged; any other judge's leaves it without a verdict
    without = [{**v, "status": "no_verdict", "fields": {}} if v["judge"] == "general" else v for v in read]
    assert decide(panel, without)["status"] == "judged"
    without = [{**v, "status": "no_verdict", "fields": {}} if v["judge"] == "ptb-lookup" else v for v in read]
    assert (decide(panel, without)["status"], decide(panel, without)["effect"]) == ("no_verdict", "fallback")


def test_a_vote_installs_the_pinned_codex_and_reads_verdicts_as_collect_py(tmp_path, monkeypatch, checkout):
    """Without codex_cli the vote installs the pinned codex with main's npm command (a stand-in npm here); a verdict
    collect.py would refuse (a boolean as a string, a field missing, not JSON, none) is no verdict."""
    root, _ = checkout
    verdicts = {**CLEAN, "data_contamination_judge": {**CLEAN["data_contamination_judge"], "contamination": "true"},
                "api_usage_judge": {"justification_disallowed_api_usage": "no field"},
                "ptb_lookup_judge": "not json", "general_judge": None}  # fmt: skip
    source = _stand_in_bin(tmp_path / "src", verdicts)
    npm = tmp_path / "npm-bin"
    npm.mkdir()
    # npm install -g --prefix <prefix> --no-fund --no-audit @openai/codex@<version>: the stand-in into <prefix>/bin
    log = tmp_path / "npm.log"  # (the install's environment is PATH only, as judge_lib.sh's --containall gives it)
    (npm / "npm").write_text(f'#!/bin/sh\nmkdir -p "$4/bin" && cp {source}/bin/* "$4/bin/"\necho "$@" >> {log}\n')
    (npm / "npm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{npm}:/usr/bin:/bin")
    votes = _votes(root, tmp_path, tmp_path / "cell", None, [])
    assert [v["status"] for v in votes] == ["no_verdict"] * 4
    reasons = [v["reason"] for v in votes]
    assert "contamination is str, not a boolean" in reasons[0] and "lacks disallowed_api_usage" in reasons[1]
    assert "is not JSON" in reasons[2] and "wrote no judgement.json" in reasons[3]
    installs = log.read_text().splitlines()
    assert len(installs) == 4 and all(line.endswith(f"@openai/codex@{JUDGE_CODEX_VERSION}") for line in installs)
    # no installer and no codex_cli: the vote says so, as run_judge_exec fails the judge
    (npm / "npm").unlink()
    monkeypatch.setenv("PATH", str(npm))  # (no npm of the machine's: nothing is downloaded)
    (tmp_path / "again").mkdir()
    lost = _votes(root, tmp_path / "again", tmp_path / "cell2", None, [])
    assert lost[0]["status"] == "no_verdict" and "the install of its pinned CLI failed" in lost[0]["reason"]


def _config(default_raw: dict, root: Path, commit: str) -> dict:
    default_raw["posttrainbench"] = {"commit": commit, "path": str(root)}
    default_raw["evals"] = [{"id": "gsm8k", "task": "posttrainbench/gsm8k"}]
    default_raw["agents"] = [{"id": "codex", "kind": "cli-agent", "cli": "codex", "model": AGENT_MODEL,
                              "hours": 1, "keys": ["OPENAI_API_KEY"]}]  # fmt: skip
    default_raw["judge"] = {"agent": "codex", "model": "gpt-5.1-codex", "keys": ["OPENAI_API_KEY"]}
    default_raw.pop("scoring", None)
    return default_raw


def test_a_main_checkouts_cells_get_its_panel_and_preflight_checks_the_sign_in(tmp_path, default_raw, checkout):
    from ptflow.cluster.preflight import check_checkout_judge

    root, commit = checkout
    loaded = resolve(_config(default_raw, root, commit), REPO, workdir=tmp_path)
    marker = {"objects": {p: "0" * 40 for p in (jm.JUDGES_DIR, "src/eval/tasks/gsm8k", "containers")}}
    jobs = Jobs(loaded.cfg, loaded.site, loaded.layout, lambda: marker)
    assert jobs.cell_panel("gsm8k") == jm.panel()
    cell = loaded.cfg.cells[0]
    spec = jobs.judge(cell.model, cell.eval, cell.agent, lambda paths: {}, "ptb-lookup", 1).to_params()
    assert spec["vote"] == {"judge": "ptb-lookup", "run": 1, "fields": ["disallowed_ptb_lookup"],
                            "protocol": "src/judges", "auth_json": str(root / jm.SUBSCRIPTION_AUTH),
                            "agent": "codex", "agent_config": AGENT_MODEL}  # fmt: skip
    assert set(spec["posttrainbench"]["objects"]) == {jm.JUDGES_DIR, "src/eval/tasks/gsm8k", "containers"}
    assert "src/judges" in jobs._checkout_paths() and ptb.JUDGE_DIR not in jobs._checkout_paths()
    # a prefix with the pinned codex installed already (posttrainbench.judge.codex_cli): in every vote's params
    default_raw["posttrainbench"]["judge"] = {"codex_cli": "prefix"}
    loaded = resolve(default_raw, REPO, workdir=tmp_path)
    jobs = Jobs(loaded.cfg, loaded.site, loaded.layout, lambda: marker)
    spec = jobs.judge(cell.model, cell.eval, cell.agent, lambda paths: {}, "general", 1).to_params()
    assert spec["vote"]["codex_cli"] == str(Path("prefix").resolve())
    # the sign-in, before any agent starts: there and holding an access token
    assert check_checkout_judge(loaded.cfg, loaded.layout, {}) == []
    broken = tmp_path / "auth.json"
    broken.write_text('{"tokens": {}}')
    default_raw["posttrainbench"]["judge"] = {"auth_json": str(broken)}
    loaded = resolve(default_raw, REPO, workdir=tmp_path)
    [problem] = check_checkout_judge(loaded.cfg, loaded.layout, {})
    assert problem == (f"posttrainbench.judge.auth_json: could not extract tokens.access_token from {broken} (the "
                       "main judges data-contamination and api-usage and ptb-lookup and general use a ChatGPT "
                       "subscription's auth.json); sign in with codex and name its auth.json there")  # fmt: skip
    broken.unlink()
    assert "no codex sign-in at" in check_checkout_judge(loaded.cfg, loaded.layout, {})[0]


def test_a_cloned_main_checkouts_marker_records_what_its_judges_read(tmp_path, checkout):
    """Cells planned before the clone was here name d27a95e's judge dir: the rule records main's judges' paths."""
    root, commit = checkout
    paths = [*ptb.eval_paths("gsm8k"), *ptb.judge_paths("gsm8k")]
    marker = make_checkout({"commit": commit, "location": str(root), "paths": paths}, tmp_path / "m.json", print)
    assert marker["judge_protocol"] == "src/judges" and marker["protocol"]["judges"] == "src/judges"
    assert set(jm.checkout_paths("gsm8k")) <= set(marker["objects"]) and ptb.JUDGE_DIR not in marker["objects"]


def test_the_agents_home_gets_main_s_decontamination_tooling(tmp_path, checkout):
    from types import SimpleNamespace

    from ptflow.stages.posttrainbench.agent import CheckoutAgentError, install_decontamination

    root, _ = checkout
    agent = SimpleNamespace(posttrainbench=SimpleNamespace(eval_dir="gsm8k"))  # all it reads of the cell's spec
    home = tmp_path / "home"
    home.mkdir()
    install_decontamination(agent, root, home)
    assert (home / "contamination_check.py").read_bytes() == (root / jm.CHECKER).read_bytes()
    assert (home / "test_data.json").read_bytes() == (root / "src/eval/tasks/gsm8k/test_data.json").read_bytes()
    agent.posttrainbench.eval_dir = "humaneval"  # no test_data.json: refused, as run_task.sh refuses it
    with pytest.raises(CheckoutAgentError, match="humaneval/test_data.json not found"):
        install_decontamination(agent, root, tmp_path)
