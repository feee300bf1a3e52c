"""opencode as ptflow drives it (``ptflow.stages.train.agent.clis.opencode``): the settings it writes (no key, the model
declared, the base URL in the provider), the environment (only OPENCODE_API_KEY, the XDG dirs pinned to the home),
its spend and trace read from ``opencode run --format json`` events as the pin prints them, a refused key. The real
CLI against the provider stand-in: tests/integration/test_real_cli_opencode.py."""

from __future__ import annotations

import json

from ptflow.stages.train.agent.clis import CLIS, CellHome, JudgeCliUser, cell_environment, prepare_cli_home
from ptflow.stages.train.agent.clis.opencode import PTB_JUDGE_MODEL, auth_failed, split_model, trace_lines, usage
from tests.support.agent_cells import agent_spec

SESSION = {"timestamp": 1795957830252, "sessionID": "ses_x"}


def _step(tokens: dict, cost: float = 0, reason: str = "tool-calls") -> dict:
    part = {"type": "step-finish", "reason": reason, "cost": cost, "tokens": tokens}
    return {"type": "step_finish", **SESSION, "part": part}


def test_settings_hold_the_model_and_base_url_but_no_key(tmp_path):
    user = JudgeCliUser("opencode", PTB_JUDGE_MODEL, ["OPENCODE_API_KEY"], base_url="http://gw:8/v1")
    env = prepare_cli_home(user, tmp_path, "/home/ben", "/home/ben/task", root=False)
    config = json.loads((tmp_path / ".config" / "opencode" / "opencode.json").read_text())
    assert config["permission"] == "allow" and config["model"] == PTB_JUDGE_MODEL
    assert config["provider"] == {"opencode": {"models": {"kimi-k2.6": {}}, "options": {"baseURL": "http://gw:8/v1"}}}
    # the plugin manifest at the pin: opencode finds nothing to bun-install in its config dir
    manifest = json.loads((tmp_path / ".config" / "opencode" / "package.json").read_text())
    assert manifest == {"dependencies": {"@opencode-ai/plugin": CLIS["opencode"].package.pinned}}
    assert (tmp_path / ".config" / "opencode" / "node_modules").is_dir()
    assert env["XDG_CONFIG_HOME"] == "/home/ben/.config" and env["XDG_DATA_HOME"] == "/home/ben/.local/share"
    assert env["OPENCODE_DISABLE_MODELS_FETCH"] == "1" and env["OPENCODE_CONFIG_CONTENT"] == ""
    assert "key" not in json.dumps(config).lower().replace("keys", "")
    assert split_model("kimi-k2.6") == ("opencode", "kimi-k2.6")
    assert split_model("anthropic/claude-sonnet-4-5") == ("anthropic", "claude-sonnet-4-5")


def test_only_the_opencode_key_reaches_opencode():
    environ = {"OPENCODE_API_KEY": "oc", "OPENAI_API_KEY": "o", "ANTHROPIC_API_KEY": "a", "PATH": "/bin"}
    env = cell_environment(agent_spec(id="a", cli="opencode", keys=["OPENCODE_API_KEY"]), environ)
    assert env["OPENCODE_API_KEY"] == "oc" and env["PATH"] == "/bin"
    assert not {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"} & set(env)


def test_spend_counts_cached_prompt_tokens_and_prices_only_what_opencode_priced():
    steps = [
        _step({"input": 100, "output": 10, "reasoning": 0, "cache": {"read": 20, "write": 5}}, cost=0.0002),
        _step({"input": 50, "output": 5, "cache": {"read": 0, "write": 0}}, cost=0.0001, reason="stop"),
    ]
    assert usage(steps).to_json() == {"input_tokens": 175, "output_tokens": 15, "cached_tokens": 20, "cost_usd": 0.0003}
    unpriced = [_step({"input": 100, "output": 10, "cache": {"read": 0, "write": 0}})]
    assert usage(unpriced).to_json()["cost_usd"] is None  # a model the pin has no price for
    assert usage([{"type": "text", **SESSION, "part": {"text": "x"}}]) is None


def test_trace_lines_read_opencodes_events_and_no_other_clis():
    tool = {"type": "tool_use", **SESSION, "part": {"type": "tool", "tool": "bash", "state": {
        "status": "completed", "input": {"command": "ls", "description": "list"}, "output": "a.txt\n",
        "metadata": {"exit": 0}}}}  # fmt: skip
    assert trace_lines(tool) == ["**tool call** `bash`:", "```bash", "ls", "```",
                                 "**tool result** (completed, exit 0):", "```", "a.txt", "```"]  # fmt: skip
    assert trace_lines({"type": "step_start", **SESSION, "part": {}}) == []
    assert trace_lines({"type": "text", **SESSION, "part": {"text": " Done. "}}) == ["**assistant**: Done."]
    step = _step({"input": 100, "output": 10, "cache": {"read": 0, "write": 0}}, cost=0.00009)
    assert trace_lines(step) == ["**step finished**: tool-calls (input 100, output 10, $0.000090)"]
    err = {"type": "error", **SESSION, "error": {"name": "APIError", "data": {"message": "bad key", "statusCode": 401}}}
    assert trace_lines(err) == ["**error** APIError (HTTP 401): bad key"]
    # gemini's events share two type names, and carry no sessionID
    assert trace_lines({"type": "tool_use", "timestamp": "t", "tool_name": "run_shell_command"}) is None
    assert trace_lines({"type": "error", "timestamp": "t", "message": "x"}) is None
    assert trace_lines({"type": "item.completed", "item": {}}) is None  # codex


def test_a_refused_key_is_read_from_the_error_event_even_with_exit_0(tmp_path):
    from ptflow.stages.train.agent.launch import refused_key

    err = {"type": "error", **SESSION, "error": {"name": "APIError", "data": {"message": "no", "statusCode": 401}}}
    assert auth_failed(0, [err]) and not auth_failed(0, [{**err, "error": {"name": "APIError", "data": {
        "statusCode": 429}}}])  # fmt: skip
    stdout = tmp_path / "stdout.log"
    stdout.write_text(json.dumps(err) + "\n")
    msg = refused_key(agent_spec(id="oc", cli="opencode", keys=["OPENCODE_API_KEY"]), 0, stdout, 0)
    assert msg and "OPENCODE_API_KEY" in msg and "401" in msg and "\n" not in msg
    assert refused_key(agent_spec(id="oc", cli="opencode", keys=["OPENCODE_API_KEY"]), 0, tmp_path / "none", 0) is None


def test_write_home_for_a_host_home(tmp_path):
    env = CLIS["opencode"].write_home(CellHome(tmp_path, str(tmp_path), str(tmp_path / "task")),
                                      {"model": "opencode/kimi-k2.5", "base_url": None})  # fmt: skip
    config = json.loads((tmp_path / ".config" / "opencode" / "opencode.json").read_text())
    assert config["provider"] == {"opencode": {"models": {"kimi-k2.5": {}}}}  # no base URL: the provider's own
    assert env["XDG_CACHE_HOME"] == f"{tmp_path}/.cache"
