"""PostTrainBench d27a95e's judge panel run through ptflow's panel: a v1.1 checkout's cells get its three judges (the
panel, the votes rule all asks for, each vote's params), and a vote job (ptflow.stages.judge.vote.judge_cell with the
v1.1 vote) runs its judge in the home judge_v11 builds, with stand-in ``codex`` and ``opencode`` CLIs on PATH (they
write the fixture's verdicts and print the sign-in's tokens and the key, which must come back masked), its
judgement.json kept in the vote's dir and read as aggregate_judgement.py reads it; the export of such votes is what
the fixture's aggregate_contamination.py reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ptflow.config.load import resolve
from ptflow.jobs.build import Jobs
from ptflow.jobs.rule_values import RuleInputs
from ptflow.stages.judge.ballot import Ballot
from ptflow.stages.judge.panel import _vote, decide
from ptflow.stages.judge.sign_in import subscription_secrets
from ptflow.stages.judge.vote import judge_cell
from ptflow.stages.posttrainbench import judge_run_v11
from ptflow.stages.posttrainbench import judge_v11 as v11
from tests.conftest import REPO
from tests.unit.test_ptb_judge_v11 import MODEL, VERDICTS, checkout  # noqa: F401 (the fixture checkout)

KEY = "sk-opencode-fixture-key-0123456789"
# A stand-in CLI (named codex or opencode on PATH): the verdict of verdicts.json beside it into the working dir's
# judgement.json (the api judge by its prompt), and on stdout what a careless CLI might print: the home's auth.json
# and the key.
STAND_IN = r"""#!PYTHON
import json, os, sys
from pathlib import Path
kind = "api" if "disallowed_api_usage" in sys.argv[-1] else Path(sys.argv[0]).name
auth = Path(os.environ["HOME"], ".codex/auth.json")
print(json.dumps({"type": "note", "auth": auth.read_text() if auth.is_file() else "",
                  "key": os.environ.get("OPENCODE_API_KEY", ""), "argv": sys.argv[1:4]}))
verdicts = json.loads(Path(sys.argv[0]).with_name("verdicts.json").read_text())
Path("judgement.json").write_text(json.dumps(verdicts[kind]))
"""


def _config(default_raw: dict, root: Path, commit: str) -> dict:
    default_raw["posttrainbench"] = {"commit": commit, "path": str(root)}
    default_raw["evals"] = [{"id": "gsm8k", "task": "posttrainbench/gsm8k"}]
    default_raw["agents"] = [{"id": "codex", "kind": "cli-agent", "cli": "codex", "model": "gpt-5.1-codex-max",
                              "hours": 1, "keys": ["OPENAI_API_KEY"]}]  # fmt: skip
    default_raw["judge"] = {"agent": "codex", "model": "gpt-5.1-codex", "keys": ["OPENAI_API_KEY"]}
    default_raw.pop("scoring", None)
    return default_raw


def test_a_v11_checkouts_cells_are_judged_by_its_panel(tmp_path, default_raw, checkout):  # noqa: F811
    root, commit = checkout
    loaded = resolve(_config(default_raw, root, commit), REPO, workdir=tmp_path)
    marker = {"objects": {p: "0" * 40 for p in (v11.ptb.JUDGE_DIR, "src/eval/tasks/gsm8k", "containers")}}
    jobs = Jobs(loaded.cfg, loaded.site, loaded.layout, lambda: marker)
    panel = jobs.cell_panel("gsm8k")
    assert [(j.id, j.cli_name, j.settings["model"], j.fields) for j in panel.judges] == [
        ("gpt", "codex", "gpt-5.4", ("contamination", "disallowed_model")),
        ("kimi", "opencode", "opencode/kimi-k2.6", ("contamination", "disallowed_model")),
        ("api", "codex", "gpt-5.4", ("disallowed_api_usage",)),
    ]
    assert panel.effects["disallowed_api_usage"] == "record" and panel.decision == "any"
    cell = loaded.cfg.cells[0]
    votes = RuleInputs(jobs).judge_vote_jsons()[:3]  # the first cell's
    assert [Path(v).relative_to(Path(v).parents[2]).as_posix() for v in votes] == [
        "judges/gpt/run1.json", "judges/kimi/run1.json", "judges/api/run1.json"
    ]  # fmt: skip
    spec = jobs.judge(cell.model, cell.eval, cell.agent, lambda paths: {}, "gpt", 1).to_params()
    assert spec["vote"] == {"judge": "gpt", "run": 1, "fields": ["contamination", "disallowed_model"],
                            "protocol": "v1.1", "auth_json": str(root / v11.SUBSCRIPTION_AUTH)}  # fmt: skip
    # info.json and the codex home are covered by the marker's nearest directories (a cloned checkout's marker)
    assert set(spec["posttrainbench"]["objects"]) == {v11.ptb.JUDGE_DIR, "src/eval/tasks/gsm8k", "containers"}
    kimi = jobs.judge(cell.model, cell.eval, cell.agent, lambda paths: {}, "kimi", 1).to_params()
    assert "auth_json" not in kimi["vote"] and kimi["judge"]["keys"] == ["OPENCODE_API_KEY"]
    assert jobs.judge_panel(cell.model, cell.eval, cell.agent).to_params()["panel"]["effects"] == panel.effects
    assert "posttrainbench.judge.auth_json" not in "".join(_preflight(loaded, {"OPENCODE_API_KEY": KEY}))
    assert any("OPENCODE_API_KEY is not set" in p for p in _preflight(loaded, {}))


def _preflight(loaded, env) -> list[str]:
    from ptflow.cluster.preflight import check_checkout_judge

    return check_checkout_judge(loaded.cfg, loaded.layout, env)


def test_each_vote_runs_its_judge_as_run_judge_sh_and_keeps_its_verdict(tmp_path, monkeypatch, checkout):  # noqa: F811
    root, _ = checkout
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in ("codex", "opencode"):
        (stubs / name).write_text(STAND_IN.replace("PYTHON", sys.executable))
        (stubs / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{stubs}:/usr/bin:/bin")
    monkeypatch.setenv("OPENCODE_API_KEY", KEY)
    (stubs / "verdicts.json").write_text(json.dumps(VERDICTS))  # the judge's environment is run_judge.sh's only
    scratch = tmp_path / "scratch"
    (scratch / "task" / "final_model").mkdir(parents=True)
    (scratch / "task" / "final_model" / "config.json").write_text('{"hidden_size": 64}')
    (scratch / "task" / "judgement.json").write_text('{"the agent": "wrote this"}')
    trace = tmp_path / "trace"
    trace.mkdir()
    (trace / "stdout.log").write_text('{"type": "message", "content": "trained"}\n')
    (trace / "stderr.log").write_text("")
    manifest = {"agent_run": {"trace_dir": str(trace), "workspace": str(scratch / "task"), "cli": "codex"}}
    auth = root / v11.SUBSCRIPTION_AUTH
    before = auth.read_text()
    cell_dir = tmp_path / "cell"
    votes, logged = [], []
    for judge in judge_run_v11.panel().judges:
        vote = {"judge": judge.id, "run": 1, "fields": list(judge.fields), "protocol": "v1.1"}
        vote |= {"auth_json": str(auth)} if judge.id != "kimi" else {}
        out = cell_dir / "judges" / judge.id / "run1.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        votes.append(judge_cell(cell={"model": MODEL, "eval": "gsm8k", "agent": "codex"}, manifest=manifest,
                                ballot=Ballot(judge.settings, out, vote),
                                checkout={"path": str(root), "eval_dir": "gsm8k"}, log=logged.append))  # fmt: skip
    assert [(v["status"], v.get("fields", v.get("reason"))) for v in votes] == [
        ("judged", {"contamination": False, "disallowed_model": False}),
        ("judged", {"contamination": True, "disallowed_model": False}),
        ("judged", {"disallowed_api_usage": False}),
    ]
    kept = {j: json.loads((cell_dir / "judges" / j / "run1" / "judgement.json").read_text()) for j in ("gpt", "kimi")}
    assert kept == {"gpt": VERDICTS["codex"], "kimi": VERDICTS["opencode"]}
    # the sign-in was there (linked, not copied), and nothing kept holds its tokens or the key
    printed = [json.loads(ln) for ln in (cell_dir / "judges/gpt/run1/judge_stdout.log").read_text().splitlines()]
    assert printed[0]["auth"] and "fixture-access-token" not in printed[0]["auth"] and "***" in printed[0]["auth"]
    secrets = [*subscription_secrets(auth), KEY]
    for path in cell_dir.rglob("*"):
        if path.is_file():
            assert not any(s in path.read_text(errors="replace") for s in secrets), path
    assert auth.read_text() == before and not list(scratch.glob("task.judge-*"))  # the sign-in stays, homes go
    # the home's .codex/config.toml (forced_login_method added) is its own file: the checkout stays as committed
    assert not subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True).stdout
    assert any("codex --search -a never exec" in line and "<judge prompt>" in line for line in logged)
    # the panel decides: kimi's flag flags the cell; the API verdict is recorded only
    panel = judge_run_v11.panel().to_params()
    votes = [_vote(cell_dir / "judges" / j.id / "run1.json") for j in judge_run_v11.panel().judges]
    decided = decide(panel, votes)
    assert decided["flagged"] is True and decided["fields"]["contamination"] is True
    clean = [{**v, "fields": {**v["fields"], "contamination": False}} for v in votes[:2]]
    api_flag = {**votes[2], "fields": {"disallowed_api_usage": True}}
    assert decide(panel, [*clean, api_flag])["flagged"] is False  # record: shown, no score change
    # the export from the votes' dirs: the fixture's aggregate_judgement.py writes the same judge_result.json
    files = dict(judge_run_v11.export_from_votes(lambda j: cell_dir / "judges" / j / "run1.json"))
    assert set(files) == {"judgement_gpt5_4.json", "judgement_kimi.json", "judgement_api.json", "judge_result.json"}
    assert json.loads(files["judge_result.json"])["contamination"] is True


def test_a_v11_checkouts_marker_records_what_each_vote_reads(tmp_path, checkout):  # noqa: F811
    """The checkout rule (a cloned checkout's protocol known only there): for a v1.1 checkout its marker holds the
    object ids of judge_v11.checkout_paths of each judged eval, so a vote's params get their own, not a parent's."""
    from ptflow.config import posttrainbench as ptb
    from ptflow.stages.posttrainbench.checkout import make_checkout

    root, commit = checkout
    paths = [*ptb.eval_paths("gsm8k"), *ptb.judge_paths("gsm8k")]
    marker = make_checkout({"commit": commit, "location": str(root), "paths": paths}, tmp_path / "m.json", log=print)
    assert marker["judge_protocol"] == "v1.1"
    assert set(v11.checkout_paths("gsm8k")) <= set(marker["objects"])
    assert {"src/eval/tasks/gsm8k/info.json", v11.CODEX_HOME_SOURCE} <= set(marker["objects"])
