"""The real agent CLIs' settings that ptflow owns: pins in config, the image's build arguments, each CLI's
environment (its own key only), the kept workspace, the judge's verdict files and the no-verdict fallback."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from ptflow.cluster import image_build, images
from ptflow.config.agent_clis import CLI_PACKAGES
from ptflow.config.matrix import build_config
from ptflow.config.sites import RuntimeSpec
from ptflow.stages.judge.ballot import Ballot
from ptflow.stages.judge.vote import judge_cell, read_verdict_files
from ptflow.stages.train.agent.clis import CLIS, cell_environment
from ptflow.stages.train.agent.task_dir import keep_workspace
from tests.conftest import REPO
from tests.support.agent_cells import agent_spec


def _cli_agent(**kw):
    return {"id": "a", "kind": "cli-agent", "cli": "claude", "model": "claude-sonnet-4-5", "hours": 1, **kw}


def test_pins_default_to_posttrainbench_and_can_be_changed(default_raw):
    cfg = build_config(default_raw)
    assert cfg.cli_versions == {"claude": "2.0.55", "codex": "0.79.0", "gemini": "0.18.4", "opencode": "1.1.58"}
    assert cfg.node_major == 22
    default_raw["agent_clis"] = {"codex": {"version": "0.80.1"}, "node": 24}
    cfg = build_config(default_raw)
    assert cfg.cli_versions["codex"] == "0.80.1" and cfg.cli_versions["claude"] == "2.0.55"
    assert cfg.image_build_args["CODEX_CLI_VERSION"] == "0.80.1" and cfg.image_build_args["NODE_MAJOR"] == "24"


def test_every_pinned_cli_has_its_module_and_each_module_its_pin():
    """The facts (config.agent_clis) and the code acting on them (stages.train.agent.clis) name the same CLIs, and each
    module's AgentCli takes its package facts from config rather than a copy."""
    assert list(CLIS) == list(CLI_PACKAGES)
    assert all(cli.package is CLI_PACKAGES[name] for name, cli in CLIS.items())


def test_a_version_range_or_unknown_cli_is_one_clear_line(default_raw):
    from tests.unit.test_config import error_of

    default_raw["agent_clis"] = {"claude": {"version": "^2.0"}}
    assert "agent_clis.claude.version" in error_of(default_raw)
    del default_raw["agent_clis"]
    default_raw["agents"].append(_cli_agent(cli="claud"))
    msg = error_of(default_raw)
    assert "agents[" in msg and "'claud'" in msg and "did you mean 'claude'" in msg
    default_raw["agents"][-1]["command"] = ["my-agent", "{prompt}"]  # a custom command needs no known cli
    build_config(default_raw)


def test_standard_image_installs_the_pins_through_build_arguments(tmp_path):
    recipe = REPO / "envs" / "standard.def"
    assert images.declared_build_args(recipe) == [
        "NODE_MAJOR", "CLAUDE_CLI_VERSION", "CODEX_CLI_VERSION", "GEMINI_CLI_VERSION", "OPENCODE_CLI_VERSION"
    ]  # fmt: skip
    text = recipe.read_text()
    assert "--engine-strict" in text and "@openai/codex@{{ CODEX_CLI_VERSION }}" in text
    assert "opencode-ai@{{ OPENCODE_CLI_VERSION }}" in text and "opencode --version" in text
    values = {"NODE_MAJOR": "22", "CLAUDE_CLI_VERSION": "2.0.55", "CODEX_CLI_VERSION": "0.79.0",
              "GEMINI_CLI_VERSION": "0.18.4", "UNUSED": "x"}  # fmt: skip
    spec = {"recipe": "envs/standard.def"}
    args = images.build_args_for(spec, values, REPO)
    assert "UNUSED" not in args and args["CLAUDE_CLI_VERSION"] == "2.0.55"
    rt = RuntimeSpec.from_dict({"site": "s", "kind": "apptainer", "images": {"standard": spec}})
    plan = image_build.plan_build(rt, "standard", tmp_path / "standard.sif", digest="d", recipe_root=REPO,
                             workdir=tmp_path, build_args=args, job=image_build.BuildJob(euid=0))  # fmt: skip
    assert "--build-arg=CODEX_CLI_VERSION=0.79.0" in plan.steps[0]
    one = images.image_digest(rt, "standard", spec, REPO, args)
    assert one != images.image_digest(rt, "standard", spec, REPO, {**args, "CODEX_CLI_VERSION": "0.80.1"})


def test_each_cli_sees_only_its_own_providers_key():
    environ = {"ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": "o", "GEMINI_API_KEY": "g", "HF_TOKEN": "h",
               "PATH": "/bin", "MY_SECRET": "s"}  # fmt: skip
    claude = cell_environment(agent_spec(id="a", cli="claude", keys=["ANTHROPIC_API_KEY"]), environ)
    assert claude["ANTHROPIC_API_KEY"] == "a" and claude["PATH"] == "/bin"
    assert not {"OPENAI_API_KEY", "GEMINI_API_KEY", "HF_TOKEN", "MY_SECRET"} & set(claude)
    codex = cell_environment(agent_spec(id="a", cli="codex", keys=["OPENAI_API_KEY"]), environ)
    assert codex["CODEX_API_KEY"] == "o" and "OPENAI_API_KEY" not in codex  # as PostTrainBench's run_task.sh
    graded = cell_environment(
        agent_spec(id="a", cli="codex", keys=["OPENAI_API_KEY"], grader_keys=["OPENAI_API_KEY"]), environ
    )
    assert graded["CODEX_API_KEY"] == "o" and graded["OPENAI_API_KEY"] == "o"  # the eval's grader needs it
    gemini = cell_environment(agent_spec(id="a", cli="gemini", keys=["GEMINI_API_KEY"]), environ)
    assert gemini[CLIS["gemini"].key_var] == "g" and "ANTHROPIC_API_KEY" not in gemini


def test_the_kept_workspace_lists_final_model_and_skips_big_files(tmp_path, monkeypatch):
    import ptflow.stages.train.agent.task_dir as ac

    task = tmp_path / "task"
    (task / "final_model").mkdir(parents=True)
    (task / "final_model" / "model.safetensors").write_bytes(b"w" * 100)
    (task / "train.py").write_text("print('train')\n")
    (task / "big.bin").write_bytes(b"b" * 2000)
    monkeypatch.setattr(ac, "KEEP_MAX_BYTES", 1000)
    kept = keep_workspace(task, tmp_path / ".a.workspace", print)
    assert (kept / "train.py").is_file() and not (kept / "final_model").exists() and not (kept / "big.bin").exists()
    assert "100\tmodel.safetensors" in (kept / "final_model.listing.txt").read_text()
    assert "big.bin" in (kept / ".ptflow-not-copied.txt").read_text()


def _write(d: Path, contamination: str | None, disallowed: str | None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    if contamination is not None:
        (d / "contamination_judgement.txt").write_text(contamination)
    if disallowed is not None:
        (d / "disallowed_model_judgement.txt").write_text(disallowed)
    return d


def test_verdict_files_are_read_by_their_first_line(tmp_path):
    v = read_verdict_files(_write(tmp_path / "a", "no contamination detected\nlooked at train.py\n",
                                  "Disallowed use detected.\nfinal_model is Qwen3-1.7B\n"))  # fmt: skip
    assert v["contamination"] is False and v["disallowed_model"] is True and "Qwen3-1.7B" in v["reason"]
    missing = read_verdict_files(_write(tmp_path / "b", "no contamination detected", None))
    assert missing == {"status": "no_verdict", "reason": "the judge wrote no disallowed_model_judgement.txt"}
    odd = read_verdict_files(_write(tmp_path / "c", "maybe", "only allowed use detected"))
    assert odd["status"] == "no_verdict" and "'maybe'" in odd["reason"]


def test_a_judge_without_a_workspace_gives_no_verdict_and_the_cell_falls_back(tmp_path):
    from ptflow.results.cells import JUDGE_NO_VERDICT
    from ptflow.results.verdict import of as verdict_of

    trace = tmp_path / "agent"
    trace.mkdir()
    (trace / "stdout.log").write_text("hello\n")
    (trace / "stderr.log").write_text("")
    manifest = {"agent_run": {"trace_dir": str(trace), "cli": "codex"}}  # no workspace kept
    judge = {"agent": "codex", "model": "gpt-5.1-codex", "keys": []}
    data = judge_cell(cell={"model": "m", "eval": "e", "agent": "a"}, manifest=manifest,
                      ballot=Ballot(judge, tmp_path / "judge.json"), log=lambda _: None)  # fmt: skip
    assert data["status"] == "no_verdict" and "kept no workspace" in data["reason"]
    assert json.loads((tmp_path / "judge.json").read_text())["status"] == "no_verdict"
    assert verdict_of(data).state == JUDGE_NO_VERDICT


def test_doctor_checks_each_cli_against_its_pin(tmp_path, monkeypatch):
    from ptflow.config.load import load
    from ptflow.config.sites import load_site
    from ptflow.ops.doctor import partition_requests, render_probe

    for var in ("PTFLOW_ACCOUNT", "PTFLOW_PARTITION"):
        monkeypatch.setenv(var, "x")
    cfg = load(REPO, ["config/posttrainbench-ptflow.yaml"], base_dir=REPO).cfg
    site = load_site("generic", REPO / "config" / "sites")
    label, req = partition_requests(cfg, site)["gpu"]
    text = render_probe(tmp_path / "probe.sh", cfg, site, "gpu", label, req).read_text()
    for name, pin in (("claude", "2.0.55"), ("codex", "0.79.0"), ("gemini", "0.18.4")):
        assert f"{name} --version" in text and f"pinned {pin}" in text
    assert "apptainer exec" in text and "standard.sif" in text
    for host in ("api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com"):
        assert f"/dev/tcp/{host}/443" in text  # each CLI's API host, for the outbound check
    assert os.access(tmp_path / "probe.sh", os.X_OK)


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_every_cli_runs_as_posttrainbench_runs_it(cli):
    command = " ".join(CLIS[cli].command)
    expected = {"claude": "--dangerously-skip-permissions", "codex": "--search", "gemini": "--yolo",
                "opencode": "run --model {model} --format json"}[cli]  # fmt: skip
    assert expected in command and "{model}" in command and "{prompt}" in command


# A stand-in for the judge CLI (``codex`` on PATH): it prints its working directory's listing (path, type, inode)
# and its home's, as the judge would see them with ls, then writes both verdict files; it sleeps past a lowered
# JUDGE_TIMEOUT_S first (a checkout cell's judge has no limit of its own).
FAKE_JUDGE = r"""#!{python}
import json, os, time
time.sleep(float(os.environ.get("FAKE_JUDGE_SLEEP", "0")))
rows = {{}}
for top, dirs, files in os.walk("."):
    for name in dirs + files:
        path = os.path.join(top, name)
        st = os.lstat(path)
        kind = "l" if os.path.islink(path) else "d" if os.path.isdir(path) else "f"
        rows[os.path.relpath(path)] = [kind, st.st_ino, st.st_nlink]
print(json.dumps({{"cwd": os.getcwd(), "home": os.environ["HOME"], "listing": rows,
                  "home_listing": sorted(os.listdir(os.environ["HOME"]))}}))
open("contamination_judgement.txt", "w").write("no contamination detected\n")
open("disallowed_model_judgement.txt", "w").write("only allowed use detected\n")
"""


def _tree(root: Path) -> dict[str, str]:
    out = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(top, name)
            out[str(p.relative_to(root))] = "l" if p.is_symlink() else "d" if p.is_dir() else "f"
    return out


def test_a_checkout_cells_judge_runs_in_the_task_dir_as_the_agent_left_it(tmp_path, monkeypatch):
    """run_task.sh's judge: in JOB_DIR/task right after the agent, every file there (big ones too), final_model/
    present, nothing of ptflow's; here final_model/ is the train rule's copy on scratch, hard-linked (same inode)."""
    import shutil

    import ptflow.stages.judge.vote as judge_mod
    import ptflow.stages.train.agent.task_dir as ac
    from ptflow.stages.posttrainbench import agent as ptb_agent
    from tests.support.agent_cells import agent_spec
    from tests.support.ptb_checkout import make_fixture_checkout

    checkout = tmp_path / "PostTrainBench"
    commit = make_fixture_checkout(checkout, evals=("gsm8k",), agents=("codex",))
    # the task dir as run_task.sh makes it (its copies from the checkout, the timer), then the agent's own files
    task = tmp_path / "node-tmp" / "task"
    task.mkdir(parents=True)
    spec = agent_spec(id="codex", posttrainbench={"eval_dir": "gsm8k", "solve": "codex"})
    ptb_agent.fill_task_dir(task, spec, checkout, 1)
    (task / "train.py").write_text("print('train')\n")
    (task / "big.bin").write_bytes(b"b" * 2000)  # over KEEP_MAX_BYTES below: kept all the same
    (task / "ckpt" / "step_1").mkdir(parents=True)
    (task / "ckpt" / "step_1" / "w.bin").write_bytes(b"c" * 10)
    (task / "latest").symlink_to("ckpt/step_1")
    (task / "final_model").mkdir()
    (task / "final_model" / "config.json").write_text("{}\n")
    (task / "final_model" / "model.safetensors").write_bytes(b"w" * 3000)
    monkeypatch.setattr(ac, "KEEP_MAX_BYTES", 1000)
    as_left = _tree(task)
    # the train rule: final_model/ copied to the checkpoint on scratch, then the workspace kept beside it
    scratch = tmp_path / "scratch" / "cell"
    scratch.mkdir(parents=True)
    ckpt = scratch / "checkpoint"
    shutil.copytree(task / "final_model", ckpt)
    kept = keep_workspace(task, scratch / ".checkpoint.workspace", print, whole=True, final_model=ckpt)
    assert _tree(kept) == as_left
    shutil.rmtree(task)  # (the train job removes its task dir)

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "codex").write_text(FAKE_JUDGE.format(python=sys.executable))
    (bindir / "codex").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_JUDGE_SLEEP", "2")
    monkeypatch.setattr(judge_mod, "JUDGE_TIMEOUT_S", 1)  # ptflow's own judge's limit: not a checkout cell's
    trace = tmp_path / "results" / "agent"
    trace.mkdir(parents=True)
    (trace / "stdout.log").write_text("the agent's output\n")
    (trace / "stderr.log").write_text("")
    manifest = {"agent_run": {"trace_dir": str(trace), "cli": "codex", "workspace": str(kept)}}
    judge = {"agent": "codex", "model": "gpt-5.1-codex", "keys": []}
    data = judge_cell(cell={"model": "Qwen/Qwen3-1.7B-Base", "eval": "gsm8k", "agent": "codex"}, manifest=manifest,
                      ballot=Ballot(judge, tmp_path / "judge.json"), log=print,
                      checkout={"path": str(checkout), "commit": commit, "eval_dir": "gsm8k"})  # fmt: skip
    assert data["status"] == "judged" and data["flagged"] is False, data
    seen = json.loads((trace / "judge_stdout.log").read_text().splitlines()[0])
    # exactly the task dir as the agent left it (the verdict files come after this listing)
    assert {rel: row[0] for rel, row in seen["listing"].items()} == as_left
    for name in ("config.json", "model.safetensors"):  # linked to the checkpoint, not copied
        assert seen["listing"][f"final_model/{name}"][1] == (ckpt / name).stat().st_ino
        assert seen["listing"][f"final_model/{name}"][2] >= 3  # checkpoint, kept workspace, judge's dir
    # run_task.sh's home: JOB_DIR, the task dir inside it, the checkout's .codex copied in, the parsed trace
    assert seen["cwd"] == os.path.join(seen["home"], "task")
    assert seen["home_listing"] == [".codex", "solve_parsed.txt", "task"]
    assert (ckpt / "model.safetensors").read_bytes() == b"w" * 3000
    assert not list(scratch.glob(".checkpoint.workspace.judge-*"))  # the judge's dir goes, its links with it
    assert _tree(kept) == as_left and (ckpt / "model.safetensors").stat().st_nlink == 2


def _claude_message(mid: str, session: str, usage: dict, block: dict) -> dict:
    return {"type": "assistant", "session_id": session, "message": {"id": mid, "usage": usage, "content": [block]}}


def test_api_spend_is_read_from_each_clis_stream_as_it_prints_it(tmp_path):
    """Event shapes as claude 2.0.55, codex 0.79.0 and gemini 0.18.4 print them (tests/integration checks the real
    CLIs' output against the provider stand-in's usage). Every session of stdout.log counts: a requeued cell's
    earlier sessions too."""
    from ptflow.stages.train.agent.launch import api_usage

    claude = CLIS["claude"].usage
    ended = {"type": "result", "session_id": "s1", "total_cost_usd": 0.003, "usage": {"input_tokens": 300},
             "modelUsage": {"claude-haiku-4-5": {"inputTokens": 800, "outputTokens": 80, "cacheReadInputTokens": 0,
                                                 "cacheCreationInputTokens": 0, "costUSD": 0.0012},
                            "claude-sonnet-4-5": {"inputTokens": 400, "outputTokens": 40, "cacheReadInputTokens": 50,
                                                  "cacheCreationInputTokens": 10, "costUSD": 0.0018}}}  # fmt: skip
    u = {"input_tokens": 100, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 0, "output_tokens": 10}
    cut = [  # a session killed mid-way: no result; its message repeats its usage on each content block
        _claude_message("m1", "s2", u, {"type": "text", "text": "x"}),
        _claude_message("m1", "s2", u, {"type": "tool_use", "name": "Bash", "input": {}}),
        _claude_message("m2", "s2", u, {"type": "text", "text": "y"}),
    ]
    s1_message = _claude_message("m0", "s1", u, {"type": "text", "text": "counted in its result, not again"})
    got = claude([s1_message, ended, *cut])
    assert got.to_json() == {"input_tokens": 1260 + 240, "output_tokens": 120 + 20, "cached_tokens": 50 + 40,
                             "cost_usd": 0.003}  # fmt: skip
    assert claude([{"type": "system", "subtype": "init"}]) is None

    codex = CLIS["codex"].usage
    first = {"input_tokens": 400, "cached_input_tokens": 100, "output_tokens": 40}
    turns = [{"type": "turn.completed", "usage": first}, {"type": "item.completed", "item": {}},
             {"type": "turn.completed", "usage": {"input_tokens": 50, "output_tokens": 5}}]  # fmt: skip
    assert codex(turns).to_json() == {"input_tokens": 450, "output_tokens": 45, "cached_tokens": 100, "cost_usd": None}

    gemini = CLIS["gemini"].usage
    stats = {"total_tokens": 330, "input_tokens": 300, "output_tokens": 30, "tool_calls": 2}
    results = [{"type": "result", "status": "success", "stats": stats}] * 2
    assert gemini(results).to_json() == {"input_tokens": 600, "output_tokens": 60, "cached_tokens": 0, "cost_usd": None}
    assert gemini([{"type": "message", "role": "assistant"}]) is None

    # the manifest's record: from the whole stdout.log (its non-JSON lines skipped), naming where it came from
    log = tmp_path / "stdout.log"
    log.write_text("\n".join(["codex starting", *(json.dumps(t) for t in turns), "{not json"]) + "\n")
    assert api_usage("codex", log) == {**codex(turns).to_json(), "source": "codex stream output"}
    assert api_usage("scripted", log) is None and api_usage("codex", tmp_path / "none") is None
