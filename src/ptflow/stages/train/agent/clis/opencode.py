"""opencode (opencode-ai, sst/opencode), as PostTrainBench's agents/opencode/solve.sh runs it and as its v1.1 judge
(branch new_judge_v2, src/disallowed_usage_judge/run_judge.sh) runs the Kimi K2.6 judge:
``opencode run --model opencode/kimi-k2.6 --format json "<prompt>"``.

What the pin (a Bun-compiled binary behind a Node wrapper) needs to run unattended, read from the code bundled in
its binary and seen running it against the provider stand-in (tests/integration/test_real_cli_opencode.py):

- the model is ``<provider>/<model>``; PostTrainBench's are OpenCode Zen's (provider ``opencode``), which its
  model list serves through ``@ai-sdk/openai-compatible``: ``POST <baseURL>/chat/completions`` (SSE) with
  ``Authorization: Bearer $OPENCODE_API_KEY``. The provider's small model (``gpt-5-nano`` on Zen, the session title)
  goes to ``<baseURL>/responses`` under the same key.
- the key: the ``opencode`` provider reads ``OPENCODE_API_KEY`` from the environment (its model list's ``env``), as
  solve.sh's ``"apiKey": "{env:OPENCODE_API_KEY}"`` says again; ptflow writes no key and no ``{env:}`` reference:
  the settings hold none. ``opencode run`` writes no auth.json.
- the settings: ``$XDG_CONFIG_HOME/opencode/opencode.json`` (the global config), then the task dir's
  ``opencode.json`` (solve.sh writes one) merged over it key by key, so the base URL ptflow sets in
  ``provider.<id>.options.baseURL`` survives solve.sh's ``options.apiKey``. ``permission: allow`` is PostTrainBench's
  (every tool runs without asking; ``opencode run`` rejects what would ask). The XDG directories are pinned to the
  private home and the variables that would bring other settings in (``OPENCODE_CONFIG``, ``_CONFIG_DIR``,
  ``_CONFIG_CONTENT``, ``_PERMISSION``) emptied: a user's own config or auth.json (it can hold keys) never applies.
- the model list: the pin's bundled models.dev snapshot. Fetching models.dev at start races the first lookup (the
  fetch is not awaited), so it is off (``OPENCODE_DISABLE_MODELS_FETCH``) and the configured model is declared in the
  settings: a model newer than the pin (``kimi-k2.6`` on 1.1.58) runs, and opencode prices it at 0 (no price known).
- no other traffic: the default plugins (OAuth helpers, installed from npm at start) are off, LSP servers are not
  downloaded, no auto-update or share; the config dir gets the ``@opencode-ai/plugin`` manifest opencode would
  otherwise ``bun install`` 3 s after start (``needsInstall``: package.json at the running version, node_modules).
- stdin: ``opencode run`` appends stdin to the prompt whenever it is not a TTY, so it must get /dev/null.
- the end: a refused key (401) is not retried and ends the run with exit 0 and an ``error`` event holding the
  HTTP status; 429 and 5xx are retried with backoff (``retry-after`` read).
"""

from __future__ import annotations

import json

from ptflow.config.agent_clis import CLI_PACKAGES
from ptflow.stages.train.agent.clis.base import (
    AUTH_STATUSES,
    AgentCli,
    ApiUsage,
    CellHome,
    clip,
    count,
    total,
    write_json,
)

KEY_VAR = "OPENCODE_API_KEY"
PTB_JUDGE_MODEL = "opencode/kimi-k2.6"  # run_judge.sh's Kimi K2.6 judge (new_judge_v2)
CONFIG_FILE = "opencode.json"
# The XDG directories opencode keeps its config, sessions, logs and caches in: the private home's own defaults,
# pinned so a job's XDG_* cannot point opencode at the user's settings or auth.json.
XDG_DIRS = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share",
    "XDG_CACHE_HOME": ".cache",
    "XDG_STATE_HOME": ".local/state",
}
QUIET_ENV = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    # emptied (opencode reads an empty value as unset): no settings but the home's and the task dir's
    "OPENCODE_CONFIG": "",
    "OPENCODE_CONFIG_DIR": "",
    "OPENCODE_CONFIG_CONTENT": "",
    "OPENCODE_PERMISSION": "",
}


def split_model(model: str) -> tuple[str, str]:
    """``opencode/kimi-k2.6`` -> (``opencode``, ``kimi-k2.6``); a bare id is Zen's (provider ``opencode``)."""
    provider, _, name = model.partition("/")
    return (provider, name) if name else ("opencode", provider)


def settings(model: str, base_url: str | None) -> dict:
    """``$XDG_CONFIG_HOME/opencode/opencode.json``: PostTrainBench's permission, quiet, the model declared in its
    provider (with the base URL where one is configured)."""
    provider, name = split_model(model)
    entry: dict = {"models": {name: {}}}
    if base_url:
        entry["options"] = {"baseURL": base_url}
    return {
        "$schema": "https://opencode.ai/config.json",
        "permission": "allow",
        "autoupdate": False,
        "share": "disabled",
        "model": f"{provider}/{name}",
        "provider": {provider: entry},
    }


def write_home(home: CellHome, ctx: dict) -> dict[str, str]:
    config = home.host_home / XDG_DIRS["XDG_CONFIG_HOME"] / "opencode"
    write_json(config / CONFIG_FILE, settings(str(ctx["model"]), ctx.get("base_url")))
    # the plugin manifest at the pinned version, so opencode finds nothing to install (a later version: it tries)
    write_json(config / "package.json", {"dependencies": {"@opencode-ai/plugin": CLI_PACKAGES["opencode"].pinned}})
    (config / "node_modules").mkdir(exist_ok=True)
    base = home.home.rstrip("/")
    return {**{var: f"{base}/{sub}" for var, sub in XDG_DIRS.items()}, **QUIET_ENV}


EVENT_TYPES = ("step_start", "step_finish", "text", "reasoning", "tool_use", "error")


def usage(events: list[dict]) -> ApiUsage | None:
    """What opencode reported spending: its ``step_finish`` parts (one per model call of the session). Its
    ``tokens.input`` leaves out the cached prompt tokens (``cache.read``, ``cache.write``), which count here as
    prompt tokens too; its ``cost`` is USD from the model list's prices: None where every step cost 0 (a model the
    pin has no price for, or a free one)."""
    parts = [ev["part"] for ev in events if ev.get("type") == "step_finish" and isinstance(ev.get("part"), dict)]
    spent = []
    for part in parts:
        tokens = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
        cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
        read, written = count(cache.get("read")), count(cache.get("write"))
        cost = part.get("cost")
        priced = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) and cost > 0 else None
        spent.append(ApiUsage(count(tokens.get("input")) + read + written, count(tokens.get("output")), read, priced))
    return total(spent)


def _tool_lines(part: dict) -> list[str]:
    name = str(part.get("tool", "?"))
    state = part.get("state") if isinstance(part.get("state"), dict) else {}
    args = state.get("input") if isinstance(state.get("input"), dict) else {}
    if isinstance(args.get("command"), str):
        lines = [f"**tool call** `{name}`:", "```bash", clip(args["command"]), "```"]
    else:
        lines = [f"**tool call** `{name}`:", "```json", clip(json.dumps(args, indent=1, default=str)), "```"]
    status = state.get("status", "?")
    meta = state.get("metadata") if isinstance(state.get("metadata"), dict) else {}
    head = f"**tool result** ({status}" + (f", exit {meta['exit']}" if meta.get("exit") is not None else "") + ")"
    body = state.get("error") if status == "error" else state.get("output")
    body = str(body or "").rstrip("\n")
    return [*lines, head + ":", "```", clip(body), "```"] if body else [*lines, head + ": no output"]


def _step_lines(part: dict) -> list[str]:
    tokens = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    shown = [f"input {tokens['input']}" if "input" in tokens else "", f"output {tokens['output']}" if "output" in tokens
             else "", f"cache read {cache['read']}" if cache.get("read") else ""]  # fmt: skip
    cost = part.get("cost")
    if isinstance(cost, int | float) and cost:
        shown.append(f"${cost:.6f}")
    detail = ", ".join(s for s in shown if s)
    return [f"**step finished**: {part.get('reason', '?')}" + (f" ({detail})" if detail else "")]


def trace_lines(ev: dict) -> list[str] | None:
    """One event of ``opencode run --format json`` (each has ``type``, ``timestamp`` and ``sessionID``; a ``part`` of
    the session's message, or an ``error``) as markdown; None for any other shape."""
    kind = ev.get("type")
    if kind not in EVENT_TYPES or "sessionID" not in ev or "timestamp" not in ev:
        return None
    if kind == "error":
        err = ev.get("error") if isinstance(ev.get("error"), dict) else {}
        data = err.get("data") if isinstance(err.get("data"), dict) else {}
        status = f" (HTTP {data['statusCode']})" if data.get("statusCode") else ""
        return [f"**error** {err.get('name', '?')}{status}: {clip(str(data.get('message', '')))}"]
    part = ev.get("part")
    if not isinstance(part, dict):
        return None
    if kind == "step_start":
        return []
    if kind == "text":
        text = str(part.get("text") or "").strip()
        return [f"**assistant**: {clip(text)}"] if text else []
    if kind == "reasoning":
        text = str(part.get("text") or "").strip()
        return [f"*reasoning*: {clip(text)}"] if text else []
    if kind == "tool_use":
        return _tool_lines(part)
    return _step_lines(part)


def auth_failed(rc: int, events: list[dict]) -> bool:
    """opencode ends a refused key (not retried) with an ``error`` event whose data states the HTTP status, and
    exit 0."""
    for ev in events:
        err = ev.get("error") if ev.get("type") == "error" and isinstance(ev.get("error"), dict) else {}
        data = err.get("data") if isinstance(err.get("data"), dict) else {}
        if data.get("statusCode") in AUTH_STATUSES:
            return True
    return False


# solve.sh's line and run_judge.sh's (the same argv): the prompt is the message
COMMAND = ("opencode", "run", "--model", "{model}", "--format", "json", "{prompt}")


def api_error(rc: int, events: list[dict]) -> dict | None:
    """The error that ended a run: opencode's last ``error`` event, its ``name`` and the HTTP ``statusCode`` of its
    data (a refused key: 401, not retried; 429 and 5xx are retried before one is reported)."""
    for ev in reversed(events):
        if ev.get("type") == "error" and isinstance(ev.get("error"), dict):
            err = ev["error"]
            data = err.get("data") if isinstance(err.get("data"), dict) else {}
            status = data.get("statusCode")
            return {"http_status": status if isinstance(status, int) else None, "type": err.get("name")}
    return None


OPENCODE = AgentCli(
    package=CLI_PACKAGES["opencode"],
    key_var=KEY_VAR,
    accepted_keys=(KEY_VAR,),
    base_url_var=None,  # no variable: the base URL is the provider's options.baseURL in the settings (write_home)
    command=COMMAND,
    write_home=write_home,
    trace_lines=trace_lines,
    judge_command=COMMAND,
    auth_failed=auth_failed,
    usage=usage,
    api_error=api_error,
)
