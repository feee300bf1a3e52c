"""cli-agent cells: the agent command line (timeout, container flags), the task dir, the judge and the report marks."""

import json
import os
import subprocess
import sys

import pytest

from ptflow.cluster import images
from ptflow.cluster.runtime import AGENT_HOME
from ptflow.config.entries import Agent
from ptflow.config.sites import load_site
from ptflow.results.report import ReportOutputs, score_cells, write_report
from ptflow.results.settings import Settings
from ptflow.specs import CellRef, StageRuntime
from ptflow.stages.judge.ballot import Ballot
from ptflow.stages.judge.trace import readable_trace
from ptflow.stages.judge.vote import JudgeError, judge_cell, parse_verdict
from ptflow.stages.train.agent.context import AgentCellError
from ptflow.stages.train.agent.launch import DEFAULT_COMMANDS, agent_command, build_argv, timeout_argv
from ptflow.stages.train.agent.task_dir import TaskSetup, make_task_dir
from tests.conftest import REPO
from tests.support.agent_cells import agent_job, agent_spec
from tests.support.fake_judge import verdict

SITES = REPO / "config" / "sites"
VALUES = {"model": "claude-opus-4-6", "task_dir": "/tmp/t", "hours": "10", "prompt": "P", "prompt_file": "/tmp/t/p",
          "python": "/usr/bin/python3"}  # fmt: skip


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    for var in ("PTFLOW_ACCOUNT", "PTFLOW_PARTITION"):
        monkeypatch.setenv(var, "x")
    monkeypatch.setenv("USER", "alice")


def agent(**kw):
    return agent_spec(**{"id": "claude-opus-4-6", "cli": "claude", "model": "claude-opus-4-6", "hours": 10, **kw})


def test_timeout_is_hours_times_60_plus_grace_with_term_and_kill_after():
    """PostTrainBench: timeout --signal=TERM --kill-after=30s $((hours*60+5))m."""
    assert timeout_argv(10) == ["timeout", "--signal=TERM", "--kill-after=30s", "605m"]
    assert timeout_argv(1, 5) == ["timeout", "--signal=TERM", "--kill-after=30s", "65m"]
    assert timeout_argv(0.005, 0.2) == ["timeout", "--signal=TERM", "--kill-after=30s", "0.5m"]


def test_the_agent_defaults_live_in_the_config_entries_and_the_job_reads_the_same():
    """A train job's params leave a key out at its default (finished cells do not rerun): agent_cell fills in the
    config entries' defaults, and writes none of its own."""
    import ast
    import inspect

    from ptflow.config import entries
    from ptflow.stages.train.agent import budget, cell, context, launch, task_dir

    parsed = entries.build_agents([{"id": "c", "kind": "cli-agent", "cli": "scripted", "model": "m", "hours": 1}])["c"]
    assert parsed == Agent("c", "cli-agent", cli="scripted", model="m", hours=1)  # the dataclass's defaults agree
    assert (parsed.grace_minutes, parsed.on_restart, parsed.repeats, parsed.sync_minutes) == (
        entries.DEFAULT_GRACE_MINUTES, entries.DEFAULT_ON_RESTART, entries.DEFAULT_REPEATS, None)  # fmt: skip
    assert timeout_argv(1) == timeout_argv(1, parsed.grace_minutes)
    assert entries.ON_RESTART_MODES[0] == parsed.on_restart  # the agent cell checks against the entries' modes
    assert launch.DEFAULT_SYNC_MINUTES is entries.DEFAULT_SYNC_MINUTES
    # every agent.get(<key>, <default>) of the agent cell takes its default from a name, never a literal of its own
    tree = ast.parse("\n".join(inspect.getsource(m) for m in (context, task_dir, budget, launch, cell)))
    literal = [
        f"{call.args[0].value}: {ast.unparse(call.args[1])}"
        for call in ast.walk(tree)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "get"
        and ast.unparse(call.func.value) == "agent" and len(call.args) == 2 and isinstance(call.args[0], ast.Constant)
        and call.args[0].value in ("grace_minutes", "on_restart", "sync_minutes", "repeats")
        and isinstance(call.args[1], ast.Constant)
    ]  # fmt: skip
    assert literal == []


def test_venv_site_runs_plain_command_under_timeout():
    argv = build_argv(agent(), VALUES, None, "/tmp/t", [])
    assert argv[:4] == ["timeout", "--signal=TERM", "--kill-after=30s", "605m"]
    assert argv[4:] == ["claude", "--print", "--verbose", "--output-format", "stream-json",
                        "--dangerously-skip-permissions", "--model", "claude-opus-4-6", "P"]  # fmt: skip


def test_container_site_agent_in_standard_image_with_agent_flags():
    site = load_site("generic", SITES)
    name = images.image_for(site.runtime, "train", Agent("claude-opus-4-6", "cli-agent"))
    image = images.runtime_handle(site.runtime, name)
    runtime = StageRuntime(site.runtime, image=image, gpus=1, binds=("/shared/r",), agent_cell=True)
    argv = build_argv(agent(grace_minutes=5), VALUES, runtime, "/tmp/t", ["/tmp/t"])
    assert argv[:4] == ["timeout", "--signal=TERM", "--kill-after=30s", "605m"]
    inner = argv[4:]
    assert inner[:7] == ["apptainer", "exec", "--nv", "-c", "--writable-tmpfs", "--home", f"/tmp/t:{AGENT_HOME}"]
    assert "/shared/ptflow/images/standard.sif" in inner
    assert inner[-2:] == ["claude-opus-4-6", "P"]
    assert ["--bind", "/tmp/t"] == inner[inner.index("/tmp/t") - 1 : inner.index("/tmp/t") + 1]


def test_every_cli_has_a_default_and_config_command_wins():
    for cli in ("claude", "codex", "gemini", "scripted"):
        assert DEFAULT_COMMANDS[cli]
    assert "gpt-5.3-codex" in agent_command(
        agent(cli="codex", model="gpt-5.3-codex"), {**VALUES, "model": "gpt-5.3-codex"}
    )
    assert agent_command(agent(command=["x", "{hours}"]), VALUES) == ["x", "10"]
    with pytest.raises(AgentCellError, match="no default command"):
        agent_command(agent(cli="aider"), VALUES)
    with pytest.raises(AgentCellError, match="placeholder 'nope'"):
        agent_command(agent(command=["{nope}"]), VALUES)


def test_task_dir_holds_prompt_kit_data_deadline_timer(tmp_path):
    from ptflow.config.entries import eval_from_entry
    from ptflow.stages.evaluate.settings import Provider, build_call

    train, test = tmp_path / "train.parquet", tmp_path / "test.parquet"
    train.write_bytes(b"PAR1")
    test.write_bytes(b"PAR1-test")
    call = build_call(eval_from_entry({"id": "add", "task": "ptflow", "max_new_tokens": 20, "dataset": {
        "source": "local", "repo": "x/y", "generator": {}}}), Provider())  # fmt: skip
    cell = CellRef("ptflow/tiny", "tiny", "add", "a")
    spec = agent(hours=0.5, eval_call=call, eval_test_parquet=str(test))
    td = make_task_dir(str(tmp_path), TaskSetup(spec, cell, base_model="/m", train_parquet=str(train), started=1000.0))
    prompt = (td / "prompt.md").read_text()
    assert "30 minutes" in prompt and "/m" in prompt and str(td / "final_model") in prompt
    assert "python evaluate.py --model-path final_model" in prompt
    assert (td / "deadline").read_text().strip() == str(1000 + 1800)
    assert (td / "data" / "train.parquet").is_file()
    # the evaluation kit: PostTrainBench's evaluate.py, the family templates and the final evaluation's call
    assert {p.name for p in td.iterdir()} >= {"evaluate.py", "ptflow_tasks.py", "templates", "evaluate_settings.json"}
    settings = json.loads((td / "evaluate_settings.json").read_text())
    assert settings == {
        **call.to_params(),
        "task_args": {"test_parquet": str(td / "eval_data" / "test.parquet"), "name": "add"},
    }
    # the toy task's data is the test split, for evaluate.py only (the agent is told not to train on it)
    assert (td / "eval_data" / "test.parquet").read_bytes() == b"PAR1-test"
    assert [p.name for p in td.rglob("test*")] == ["test.parquet"]
    out = subprocess.run(["bash", str(td / "timer.sh")], capture_output=True, text=True, check=True).stdout
    assert "time is up" in out  # the deadline (epoch 2800) is long past


def test_readable_trace_renders_stream_json_and_redacts():
    out = "\n".join([
        json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "hello"}]}}),
        json.dumps({"type": "assistant", "message": {"content": [{"type": "tool_use", "name": "Bash",
                                                                  "input": {"command": "ls"}}]}}),
        "plain line with sk-SECRET",
    ])  # fmt: skip
    md = readable_trace(out, "warn", redact=("sk-SECRET",))
    assert "**assistant**: hello" in md and "tool call `Bash`" in md and "plain line with ***" in md
    assert "sk-SECRET" not in md and "## stderr" in md


def test_verdict_parsing_and_fake_judge():
    assert verdict("read data/test.parquet", [])["contamination"] is True
    assert verdict("trained on train.parquet", ["Qwen/Qwen3-8B"])["contamination"] is False
    assert verdict("from_pretrained('Qwen/Qwen3-8B')", ["Qwen/Qwen3-8B"])["disallowed_model"] is True
    assert parse_verdict('noise\n{"contamination": false, "disallowed_model": true}\n', ["j"])["disallowed_model"]
    with pytest.raises(JudgeError, match="no JSON verdict"):
        parse_verdict("I think it is fine", ["j"])


def _trace(tmp_path, text):
    d = tmp_path / "agent"
    d.mkdir()
    (d / "stdout.log").write_text(text)
    (d / "stderr.log").write_text("")
    return {"agent_run": {"trace_dir": str(d)}}


def test_judge_cell_judged_and_skipped(tmp_path):
    cell = {"model": "m", "eval": "add", "agent": "a"}
    judge = {"cli": ["{python}", "-m", "tests.support.fake_judge", "--model", "{model}"], "model": "fake"}
    manifest = _trace(tmp_path, "pd.read_parquet('test.parquet')\n")
    data = judge_cell(cell=cell, manifest=manifest, ballot=Ballot(judge, tmp_path / "judge.json"))
    assert data["status"] == "judged" and data["flagged"] is True and data["contamination"] is True
    assert (tmp_path / "agent" / "trace.md").is_file()
    data = judge_cell(cell=cell, manifest=manifest, ballot=Ballot(None, tmp_path / "j2.json"))
    assert data["status"] == "skipped" and data["flagged"] is None
    bad = {"cli": [sys.executable, "-c", "print('fine')"]}
    with pytest.raises(JudgeError, match="judge.cli"):
        judge_cell(cell=cell, manifest=manifest, ballot=Ballot(bad, tmp_path / "j3.json"))


def _eval(root, agent_id, acc, **extra):
    d = root / agent_id
    d.mkdir(parents=True)
    metrics = None if acc is None else {"name": "accuracy", "value": acc, "stderr": 0.01, "n": 10}
    data = {
        **{"model": "m", "eval": "add", "agent": agent_id, "metrics": metrics, "scorer": "s", "task": "ptflow"},
        "status": "scored",
        **{"checkpoint": {"kind": "trained", "path": "/x"}, "max_new_tokens": 8, "host": "h", "slurm_job_id": None},
        **{"timings": {"eval_seconds": 1.0, "train_seconds": None}},
        **extra,
    }
    (d / "eval.json").write_text(json.dumps(data))
    return d


def test_report_scores_flagged_and_no_model_cells_as_the_base_model(tmp_path):
    """PostTrainBench's fallback through the aggregate stage: the flagged cell and the cell without a final model
    count as the baseline's score, said so in summary.csv; the unjudged one is scored with its mark."""
    import csv

    paths = [_eval(tmp_path, "baseline", 0.1)]
    d = _eval(tmp_path, "good", 0.9, agent_run={"budget_exhausted": False})
    (d / "judge.json").write_text(json.dumps({"status": "judged", "flagged": False}))
    paths.append(d)
    d = _eval(tmp_path, "cheat", 1.0, agent_run={"budget_exhausted": True})
    (d / "judge.json").write_text(json.dumps({"status": "judged", "flagged": True, "contamination": True}))
    paths.append(d)
    d = _eval(tmp_path, "none", None, status="no_model", agent_run={"budget_exhausted": True})
    (d / "judge.json").write_text(json.dumps({"status": "skipped", "flagged": None}))
    paths.append(d)
    d = _eval(tmp_path, "unjudged", 0.6, agent_run={"budget_exhausted": False})
    (d / "judge.json").write_text(json.dumps({"status": "skipped", "flagged": None}))
    paths.append(d)
    settings = Settings(reference_agent="good", agent_order=["baseline", "good", "cheat", "none", "unjudged"])
    out = ReportOutputs(*(tmp_path / "out" / f for f in ("s.csv", "a.csv", "l.md", "h.png", "report")))
    result = score_cells([p / "eval.json" for p in paths], settings, model_ids={}, log=lambda _: None)
    write_report(result, settings, out, log=lambda _: None)
    rows = {r["agent"]: r for r in csv.DictReader(out.summary_csv.open())}
    assert rows["cheat"]["fallback"] == "yes" and float(rows["cheat"]["score"]) == pytest.approx(0.1)
    assert rows["cheat"]["fallback_reason"].startswith("judge flagged contamination")
    assert rows["none"]["fallback"] == "yes" and "no final model (budget exhausted)" in rows["none"]["fallback_reason"]
    assert rows["unjudged"]["fallback"] == "" and rows["unjudged"]["judge"] == "not judged"
    assert result.agent("cheat").score == pytest.approx(0.1) and result.agent("unjudged").score == pytest.approx(0.6)
    assert (tmp_path / "out" / "report" / "index.html").is_file() and (tmp_path / "out" / "h.png").is_file()


def test_preflight_agent_budget_and_judge_keys(monkeypatch):
    from ptflow.cluster.preflight import check_agent_budgets, check_secrets
    from ptflow.config.load import load

    cfg = load(REPO, ["config/posttrainbench-ptflow.yaml"], base_dir=REPO).cfg
    generic = load_site("generic", SITES)  # cli-agent train jobs: 720 min >= 10 h + 5 min
    notes: list[str] = []
    assert check_agent_budgets(cfg, generic, notes) == []
    # 720 min leave 114 after a 10 h agent for its evaluation in the same allocation, less than evaluate's 180: said
    assert any(n.startswith("site generic: the train job of agent claude-opus-4-6 (720 min) leaves 114 min") and
               "(runtime 786 min holds both)" in n for n in notes)  # fmt: skip
    assert not any("agent claude-sonnet-4-5-1h " in n for n in notes)  # a 1 h agent leaves enough
    generic.raw["agent_resources"]["cli-agent"]["runtime"] = 600
    problems = check_agent_budgets(cfg, generic)
    assert any("agent claude-opus-4-6 gets runtime 600 min" in p and "at least 606 min" in p for p in problems)
    cfg.raw["judge"] = {"cli": ["codex", "exec"], "keys": ["JUDGE_KEY"]}
    env = {"OPENAI_API_KEY": "x", "ANTHROPIC_API_KEY": "y", "GEMINI_API_KEY": "z", "HF_TOKEN": "t"}
    assert check_secrets(cfg, env=env)[0].startswith("environment variable JUDGE_KEY is not set but agents (judge)")


# An agent that keeps notes in its task dir: the first session writes a final_model and works until stopped; a
# session that finds the notes (an earlier one's workspace) adds to them and ends.
NOTES_AGENT = """
import json, os, sys, time
from pathlib import Path
task = Path(sys.argv[1])
notes = task / "work" / "notes.txt"
notes.parent.mkdir(exist_ok=True)
earlier = notes.read_text() if notes.exists() else ""
again = json.loads((task / "task.json").read_text())["earlier_session"]
notes.write_text(earlier + f"session earlier_session={again}\\n")
print(json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": "notes: " + earlier}]}}))
sys.stdout.flush()
if earlier:
    sys.exit(0)
(task / "final_model").mkdir()
(task / "final_model" / "model.safetensors").write_bytes(b"w1")
time.sleep(60)
"""


def _notes_cell(tmp_path, on_restart="continue"):
    from ptflow.cluster.preempt import ResumeDir

    script = tmp_path / "notes_agent.py"
    script.write_text(NOTES_AGENT)
    spec = {"id": "notes", "cli": "scripted", "model": "m", "hours": 0.05, "grace_minutes": 0.1, "keys": [],
            "command": ["{python}", str(script), "{task_dir}"], "trace_dir": str(tmp_path / "trace"),
            "on_restart": on_restart, "sync_minutes": 0.01}  # fmt: skip
    return spec, ResumeDir(tmp_path / "resume")


def _stop_when_started(tmp_path):
    """Slurm's warning to this process once the agent has started (what a preemption/requeue delivers first)."""
    import os
    import signal
    import threading
    import time

    def send():
        for _ in range(200):
            if (tmp_path / "trace" / "stdout.log").exists() and "notes:" in (
                tmp_path / "trace" / "stdout.log"
            ).read_text():
                time.sleep(1.5)  # a periodic sync (every 0.6 s) happens too
                os.kill(os.getpid(), signal.SIGUSR1)
                return
            time.sleep(0.05)

    threading.Thread(target=send, daemon=True).start()


def test_restarted_agent_cell_continues_in_its_workspace_with_the_budget_left(tmp_path):
    from ptflow.cluster.preempt import StoppedToResume
    from ptflow.stages.train.agent.cell import train_agent_cell

    spec, resume = _notes_cell(tmp_path)
    cell = {"model": "m", "eval": "add"}
    resume.record_attempt({"id": "a1", "started": 1.0})
    _stop_when_started(tmp_path)
    with pytest.raises(StoppedToResume, match="the next attempt continues there"):
        train_agent_cell(agent_job("/base", None, tmp_path / "out1", agent=spec, cell=cell, resume=resume,
                                   attempt="a1", log=lambda m: None))  # fmt: skip
    first = resume.attempts()[0]["agent"]
    assert first["ended_by"] == "stopped for a restart" and not first["finished"] and first["time_taken"] > 1
    assert (resume.root / "workspace" / "final_model" / "model.safetensors").is_file()
    resume.record_attempt({"id": "a2", "started": 2.0})
    lines = []
    result = train_agent_cell(agent_job("/base", None, tmp_path / "out2", agent=spec, cell=cell, resume=resume,
                                        attempt="a2", log=lines.append))  # fmt: skip
    run = result["agent_run"]
    assert [a["attempt"] for a in run["attempts"]] == ["a1", "a2"] and run["exit_code"] == 0
    assert run["time_taken"] == pytest.approx(sum(a["time_taken"] for a in run["attempts"]), abs=0.01)
    assert result["final_model"] and (tmp_path / "out2" / "model.safetensors").read_bytes() == b"w1"  # kept
    trace = (tmp_path / "trace" / "stdout.log").read_text()
    assert "notes: session earlier_session=False" in trace  # the second session read the first one's files
    assert trace.count("=== ptflow: attempt") == 2
    prompt2 = (tmp_path / "trace" / "prompt-2.md").read_text()
    assert "An earlier session worked on this task before you" in prompt2 and "including the `final_model/`" in prompt2
    left = 0.05 * 60 - first["time_taken"] / 60
    assert any(f"{left:.1f} of 3.0 minutes left" in ln for ln in lines), lines


def test_fresh_restart_starts_over_with_the_full_budget(tmp_path):
    from ptflow.cluster.preempt import StoppedToResume
    from ptflow.stages.train.agent.cell import train_agent_cell

    spec, resume = _notes_cell(tmp_path, on_restart="fresh")
    cell = {"model": "m", "eval": "add"}
    resume.record_attempt({"id": "a1", "started": 1.0})
    _stop_when_started(tmp_path)
    with pytest.raises(StoppedToResume):
        train_agent_cell(agent_job("/base", None, tmp_path / "o1", agent=spec, cell=cell, resume=resume,
                                   attempt="a1", log=lambda m: None))  # fmt: skip
    resume.record_attempt({"id": "a2", "started": 2.0})
    _stop_when_started(tmp_path)
    lines = []
    with pytest.raises(StoppedToResume):  # no notes from before: it works (and is stopped) like a first session
        train_agent_cell(agent_job("/base", None, tmp_path / "o2", agent=spec, cell=cell, resume=resume,
                                   attempt="a2", log=lines.append))  # fmt: skip
    assert any("on_restart fresh: starting over with the full budget" in ln for ln in lines)
    assert any("(0.05 h of 0.05 h left)" in ln for ln in lines)
    assert [a.get("discarded") for a in resume.attempts()] == [True, None]
    assert (tmp_path / "trace" / "stdout.log").read_text().count("=== ptflow: attempt") == 2  # both traces kept


def test_sync_copies_what_changed_and_links_the_rest(tmp_path):
    """A sync costs what changed (issue 35): unchanged files are hard links to the previous copy, a changed, new or
    deleted file is copied or gone, and the previous copy is never written to (it is only linked from)."""
    from ptflow.stages.train.agent.task_dir import sync_workspace

    task, ws = tmp_path / "task", tmp_path / "resume" / "workspace"
    (task / "final_model").mkdir(parents=True)
    (task / "final_model" / "model.safetensors").write_bytes(b"w" * 4096)
    (task / "notes.txt").write_text("one")
    (task / "gone.txt").write_text("x")
    (task / "link").symlink_to("notes.txt")
    assert sync_workspace(task, ws) == {"linked": 0, "copied": 3, "copied_bytes": 4096 + 3 + 1}
    weights_inode = (ws / "final_model" / "model.safetensors").stat().st_ino
    old_notes = ws / "notes.txt"
    held = old_notes.open()  # the previous copy's file, as a reader holding it sees it

    (task / "notes.txt").write_text("two, longer")
    (task / "gone.txt").unlink()
    (task / "new.txt").write_text("new")
    counts = sync_workspace(task, ws)
    assert counts == {"linked": 1, "copied": 2, "copied_bytes": len("two, longer") + 3}
    assert (ws / "final_model" / "model.safetensors").stat().st_ino == weights_inode  # linked, not copied
    assert (ws / "notes.txt").read_text() == "two, longer" and (ws / "new.txt").read_text() == "new"
    assert not (ws / "gone.txt").exists() and os.readlink(ws / "link") == "notes.txt"
    assert held.read() == "one"  # the previous copy was replaced, never written
    held.close()
    assert [p.name for p in ws.parent.iterdir()] == ["workspace"]  # no staging dir left behind


def test_final_model_leaves_the_allocation_once(tmp_path):
    """The checkpoint on scratch takes final_model/'s files from the workspace the agent's end has just synced (hard
    links): the weights are written out of the allocation once. A file changed after that sync is copied."""
    from ptflow.stages.train.agent.task_dir import copy_final_model, sync_workspace

    task, ws, out = tmp_path / "task", tmp_path / "resume" / "workspace", tmp_path / "ckpt"
    (task / "final_model").mkdir(parents=True)
    (task / "final_model" / "model.safetensors").write_bytes(b"w" * 4096)
    (task / "final_model" / "config.json").write_text("{}")
    sync_workspace(task, ws)
    (task / "final_model" / "config.json").write_text('{"changed": 1}')  # after the sync
    assert copy_final_model(task / "final_model", out, ws / "final_model") == {"linked": 1, "copied": 1}
    assert (out / "model.safetensors").stat().st_ino == (ws / "final_model" / "model.safetensors").stat().st_ino
    assert (out / "config.json").read_text() == '{"changed": 1}'
    # no workspace (no resume dir): copied whole
    assert copy_final_model(task / "final_model", tmp_path / "ckpt2", None) == {"linked": 0, "copied": 2}


# An agent that reports the threads its environment gives OpenMP and MKL, then ends with a final model.
THREADS_AGENT = """
import json, os, sys
from pathlib import Path
task = Path(sys.argv[1])
seen = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
print(json.dumps({"type": "assistant", "message": {"content": [{"type": "text", "text": json.dumps(seen)}]}}))
(task / "final_model").mkdir()
(task / "final_model" / "model.safetensors").write_bytes(b"w")
"""


@pytest.mark.parametrize("job_env, expected", [({}, "3"), ({"OMP_NUM_THREADS": "5", "MKL_NUM_THREADS": "5"}, "5")])
def test_the_agents_threads_are_the_jobs_unless_its_environment_sets_them(tmp_path, job_env, expected):
    from ptflow.stages.train.agent.cell import train_agent_cell

    script = tmp_path / "threads_agent.py"
    script.write_text(THREADS_AGENT)
    spec = {"id": "threads", "cli": "scripted", "model": "m", "hours": 0.05, "grace_minutes": 0.1, "keys": [],
            "command": ["{python}", str(script), "{task_dir}"], "trace_dir": str(tmp_path / "trace")}  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")} | job_env
    train_agent_cell(agent_job("/base", None, tmp_path / "out", agent=spec, cell={"model": "m", "eval": "add"},
                               env=env, threads=3, log=lambda m: None))  # fmt: skip
    trace = (tmp_path / "trace" / "stdout.log").read_text()
    assert json.dumps({"OMP_NUM_THREADS": expected, "MKL_NUM_THREADS": expected}).replace('"', '\\"') in trace
