"""claude (@anthropic-ai/claude-code), as PostTrainBench's agents/claude/solve.sh runs it.

What 2.0.55 needs to run unattended (read from its cli.js, see tests/integration/test_real_cli_claude.py):

- ``--dangerously-skip-permissions`` as uid 0 exits at once ("cannot be used with root/sudo privileges") unless
  ``IS_SANDBOX`` is set: the CLI's own switch, set only where the cell runs as root.
- the config: ``CLAUDE_CONFIG_DIR`` is pinned to the private home's ``.claude`` (it holds ``settings.json``, the
  global ``.claude.json``, transcripts), so a ``CLAUDE_CONFIG_DIR`` in the job's environment cannot bring the user's
  own settings, hooks or MCP servers in. ``settings.json``: ``permissions.defaultMode = bypassPermissions`` (the
  flag's mode, also for anything that reads the settings), no hooks, no co-author trailer; ``.claude.json``:
  onboarding done, bypass mode accepted, the task dir trusted.
- quiet: ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` turns off, in one switch, the auto-updater, Statsig/GrowthBook
  telemetry, Sentry error reports, the changelog fetch and the connectivity probe; ``DISABLE_AUTOUPDATER``,
  ``DISABLE_TELEMETRY`` and ``DISABLE_ERROR_REPORTING`` say the same one by one. Requests to the API itself (the
  main loop, the small model's side calls) are not touched.
- the key is read from ``ANTHROPIC_API_KEY`` and never written to the home by ``--print`` runs; the base URL from
  ``ANTHROPIC_BASE_URL``.
- retries: claude retries 401 as it retries 429, 5xx and 529 (its retry loop, after a failed stream falls back to
  a non-streaming request), ``CLAUDE_CODE_MAX_RETRIES`` times (default 10), waiting a ``retry-after`` header's
  seconds, else 0.5 s doubling to 32 s (+ up to 25 %): with the default a refused key ends the run only after
  ~3 minutes (183 s measured). ptflow sets 5: a refused key ends the cell within a minute (~20 s; 6 retries took
  43 s under the suite's load, too close), a 429 is still waited out as long as the API's ``retry-after`` says, five
  times, and a 5xx/529 burst without ``retry-after`` is ridden out for ~16-19 s (the default: ~2.5 minutes) before
  the ``--print`` run ends with that error. The trade-off is this one constant.
"""

from __future__ import annotations

import json
import re

from ptflow.config.agent_clis import CLI_PACKAGES
from ptflow.stages.train.agent.clis.base import AgentCli, ApiUsage, CellHome, clip, count, total, write_json

CONFIG_DIR = ".claude"  # under the cell's home; CLAUDE_CONFIG_DIR
# retries of a failed API request (claude's default: 10); see above for the trade-off
MAX_RETRIES = "5"
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
}


def settings() -> dict:
    """``$CLAUDE_CONFIG_DIR/settings.json`` (the user settings)."""
    return {
        "permissions": {"defaultMode": "bypassPermissions"},
        "disableAllHooks": True,
        "includeCoAuthoredBy": False,
    }


def global_config(task_dir: str) -> dict:
    """``$CLAUDE_CONFIG_DIR/.claude.json`` (the CLI's own state file)."""
    return {
        "hasCompletedOnboarding": True,
        "bypassPermissionsModeAccepted": True,
        "projects": {task_dir: {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}},
    }


def write_home(home: CellHome, ctx: dict) -> dict[str, str]:
    config = home.host_home / CONFIG_DIR
    write_json(config / "settings.json", settings())
    write_json(config / ".claude.json", global_config(str(ctx.get("task_dir") or home.task_dir)))
    env = {
        "CLAUDE_CONFIG_DIR": f"{home.home.rstrip('/')}/{CONFIG_DIR}",
        "CLAUDE_CODE_MAX_RETRIES": MAX_RETRIES,
        **QUIET_ENV,
    }
    if ctx.get("root"):
        env["IS_SANDBOX"] = "1"
    if ctx.get("base_url"):
        env["ANTHROPIC_BASE_URL"] = str(ctx["base_url"])
    return env


def _tool_call(block: dict) -> list[str]:
    name = block.get("name", "?")
    params = block.get("input") or {}
    head = f"**tool call** `{name}`"
    if isinstance(params, dict) and isinstance(params.get("command"), str):
        note = f" ({params['description']})" if isinstance(params.get("description"), str) else ""
        return [f"{head}{note}:", "```bash", clip(params["command"]), "```"]
    return [f"{head}:", "```json", clip(json.dumps(params, indent=1, default=str)), "```"]


def _result_text(content) -> str:
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) if part.get("type") == "text" else f"[{part.get('type', '?')}]"
            for part in content
            if isinstance(part, dict)
        )
    return str(content if content is not None else "")


def _message_lines(role: str, content) -> list[str]:
    if isinstance(content, str):
        return [f"**{role}**:", "", clip(content)] if content.strip() else []
    lines: list[str] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and str(block.get("text", "")).strip():
            lines.append(f"**{role}**: {clip(str(block['text']))}")
        elif kind == "thinking" and str(block.get("thinking", "")).strip():
            lines.append(f"*thinking*: {clip(str(block['thinking']), 1000)}")
        elif kind == "tool_use":
            lines.extend(_tool_call(block))
        elif kind == "tool_result":
            status = "error" if block.get("is_error") else "ok"
            lines.extend([f"**tool result** ({status}):", "```", clip(_result_text(block.get("content"))), "```"])
    return lines


def _result(ev: dict) -> list[str]:
    parts = [f"turns {ev['num_turns']}" if "num_turns" in ev else ""]
    if isinstance(ev.get("total_cost_usd"), int | float):
        parts.append(f"cost ${ev['total_cost_usd']:.4f}")
    if isinstance(ev.get("duration_ms"), int | float):
        parts.append(f"duration {ev['duration_ms'] / 1000:.1f} s")
    if isinstance(ev.get("duration_api_ms"), int | float):
        parts.append(f"API {ev['duration_api_ms'] / 1000:.1f} s")
    stats = ", ".join(p for p in parts if p)
    line = f"**result**: {ev.get('subtype', '?')}{' (error)' if ev.get('is_error') else ''}"
    lines = [f"{line} ({stats})" if stats else line]
    if ev.get("is_error") and ev.get("result"):
        lines.append(clip(str(ev["result"])))
    for err in ev.get("errors") or []:
        lines.append(f"- {clip(str(err), 1000)}")
    return lines


def usage(events: list[dict]) -> ApiUsage | None:
    """What claude reported spending. A session that ended (its ``result`` event) counts every model it used
    (``modelUsage``: the main loop and the sub-agents' warm-ups, each priced by claude; their ``costUSD`` sum to
    ``total_cost_usd``, which PostTrainBench's compute_claude_costs.py reads). A session cut short (killed, no
    result) counts the tokens of its messages (each message once; it repeats its usage on every content block) and
    no cost, which claude never printed. Anthropic's input tokens exclude the cached ones: added here."""
    ended = {ev.get("session_id") for ev in events if ev.get("type") == "result"}
    parts, messages = [], {}
    for ev in events:
        if ev.get("type") == "result":
            cost = ev.get("total_cost_usd")
            part = ApiUsage(cost_usd=float(cost) if isinstance(cost, int | float) else None)
            models = ev.get("modelUsage") if isinstance(ev.get("modelUsage"), dict) else {}
            for m in models.values():
                cached = count(m.get("cacheReadInputTokens"))
                prompt = count(m.get("inputTokens")) + cached + count(m.get("cacheCreationInputTokens"))
                part = part.add(ApiUsage(prompt, count(m.get("outputTokens")), cached))
            parts.append(part)
        elif ev.get("type") == "assistant" and ev.get("session_id") not in ended:
            msg = ev.get("message") if isinstance(ev.get("message"), dict) else {}
            if isinstance(msg.get("usage"), dict):
                messages[msg.get("id") or len(messages)] = msg["usage"]
    for u in messages.values():
        cached = count(u.get("cache_read_input_tokens"))
        prompt = count(u.get("input_tokens")) + cached + count(u.get("cache_creation_input_tokens"))
        parts.append(ApiUsage(prompt, count(u.get("output_tokens")), cached))
    return total(parts)


def trace_lines(ev: dict) -> list[str] | None:
    """One event of ``claude --print --verbose --output-format stream-json`` as markdown; None for any other shape.

    claude's events: ``system`` (``subtype`` init ...), ``assistant`` / ``user`` (an API ``message``: text,
    tool_use, tool_result blocks), ``result`` (``subtype`` success / error_*, turns, cost, durations),
    ``stream_event`` (only with --include-partial-messages)."""
    kind = ev.get("type")
    if kind in ("assistant", "user") and isinstance(ev.get("message"), dict):
        if kind == "assistant" and isinstance(ev.get("error"), str):  # claude's own message for a failed request
            text = _result_text(ev["message"].get("content"))
            return [f"**API error** ({ev['error']}): {clip(text)}"]
        lines = _message_lines(kind, ev["message"].get("content"))
        if ev.get("parent_tool_use_id") and lines:  # a sub-agent's (Task tool) message
            lines[0] = f"(sub-agent) {lines[0]}"
        return lines
    if kind == "system" and isinstance(ev.get("subtype"), str):
        if ev["subtype"] == "init":
            return [
                f"**claude** {ev.get('claude_code_version', '?')} session `{ev.get('session_id', '?')}`, model "
                f"`{ev.get('model', '?')}`, permission mode {ev.get('permissionMode', '?')}, cwd `{ev.get('cwd', '?')}`"
            ]
        return [f"**system** ({ev['subtype']})"]
    if kind == "result" and isinstance(ev.get("subtype"), str) and "timestamp" not in ev:
        return _result(ev)
    if kind == "stream_event" and isinstance(ev.get("event"), dict):
        return []  # partial deltas: the whole message follows as an `assistant` event
    return None


AUTH_FAILED = "authentication_failed"  # the `error` of claude's synthetic assistant message for a 401/403


def auth_failed(rc: int, events: list[dict]) -> bool:
    """claude ends a refused key (401, 403; after its retries) with a synthetic assistant message (model
    ``<synthetic>``) whose ``error`` is ``authentication_failed`` ("Invalid API key · Fix external API key" for the
    API's "invalid x-api-key", "API Error: 401 … · Please run /login" for any other 401/403), then a ``result`` with
    ``is_error``, and exits 1."""
    return rc != 0 and any(ev.get("type") == "assistant" and ev.get("error") == AUTH_FAILED for ev in events)


_API_ERROR_TEXT = re.compile(r"^API Error: ([1-5][0-9][0-9]) (\{.*\})", re.S)


def api_error(rc: int, events: list[dict]) -> dict | None:
    """The error that ended a run: claude's synthetic assistant message (model ``<synthetic>``) carries an ``error``
    (``authentication_failed``, ``billing_error``, ``rate_limit``, ``unknown`` ...) and, for an API error, the text
    ``API Error: <status> <the API's error body>`` (2.0.55 against a 429 storm: ``error`` "unknown", text ``API
    Error: 429 {"type":"error","error":{"type":"rate_limit_error",...}}``; a 529: ``overloaded_error``)."""
    for ev in reversed(events):
        message = ev.get("message") if isinstance(ev.get("message"), dict) else {}
        if ev.get("type") != "assistant" or not ev.get("error") or message.get("model") != "<synthetic>":
            continue
        out = {"http_status": None, "type": str(ev["error"])}
        for block in message.get("content") or []:
            m = _API_ERROR_TEXT.match(str(block.get("text", ""))) if isinstance(block, dict) else None
            if m:
                out["http_status"] = int(m.group(1))
                try:
                    body = json.loads(m.group(2))
                except ValueError:
                    body = {}
                err = body.get("error") if isinstance(body, dict) else None
                if isinstance(err, dict) and isinstance(err.get("type"), str):
                    out["type"] = err["type"]
        if out["type"] == AUTH_FAILED and out["http_status"] is None:
            out["http_status"] = 401
        return out
    return None


CLAUDE = AgentCli(
    package=CLI_PACKAGES["claude"],
    key_var="ANTHROPIC_API_KEY",
    accepted_keys=("ANTHROPIC_API_KEY",),
    base_url_var="ANTHROPIC_BASE_URL",
    command=(
        "claude",
        "--print",
        "--verbose",
        "--output-format",
        "stream-json",
        "--dangerously-skip-permissions",
        "--model",
        "{model}",
        "{prompt}",
    ),
    write_home=write_home,
    trace_lines=trace_lines,
    env={"BASH_MAX_TIMEOUT_MS": "36000000"},
    auth_failed=auth_failed,
    usage=usage,
    api_error=api_error,
)
