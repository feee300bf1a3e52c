"""gemini (@google/gemini-cli), as PostTrainBench's agents/gemini/solve.sh runs it.

What 0.18.4 needs to run unattended (read from its dist/, see tests/integration/test_real_cli_gemini.py):

- auth: ``security.auth.selectedType = "gemini-api-key"`` (AuthType.USE_GEMINI; any other stored value fails
  validateAuthMethod with "Invalid auth method selected"); the key itself comes from ``GEMINI_API_KEY`` only.
- ``--yolo`` holds only in a trusted folder (loadCliConfig: "Approval mode overridden to default" otherwise, and then
  run_shell_command / write_file / replace are left out of the tools in non-interactive mode): folder trust is off
  (``security.folderTrust.enabled``, 0.18.4's default) and the task dir is trusted in ``trustedFolders.json`` too, so
  a site that switches trust on in /etc/gemini-cli/settings.json changes nothing.
- the model: ``--model`` wins over routing (OverrideStrategy); ``experimental.useModelRouter`` off makes a run without
  ``--model`` use ``model.name`` (else the classifier picks flash/pro per turn); the Flash fallback
  (fallback/handler.ts) applies to Google-login auth only. The one other model the CLI calls by itself for work is
  the codebase_investigator sub-agent's (gemini-2.5-pro by default): pointed at the configured model here. Side calls
  (loop detection after 30 turns, compression) keep their own small models, as in PostTrainBench.
- the base URL: @google/genai reads ``GOOGLE_GEMINI_BASE_URL`` (getBaseUrl(..., getEnv('GOOGLE_GEMINI_BASE_URL'))).
- quiet: usage statistics (Clearcut) and telemetry off, update check/nag off, no IDE.

The model id: give the bare id (``gemini-3-pro-preview``). @google/genai sends ``models/<id>`` either way, so the
provider sees the same URL, but the CLI's per-model settings key on the bare id: with ``models/gemini-3-pro-preview``
it misses the ``gemini-3-pro-preview`` model config (thinkingLevel HIGH, temperature 1, includeThoughts) and sends
``thinkingBudget: 8192`` instead (geminiChat: ``modelToUse.startsWith('gemini-3')``).
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

AUTH_TYPE = "gemini-api-key"  # AuthType.USE_GEMINI in @google/gemini-cli-core
BASE_URL_VAR = "GOOGLE_GEMINI_BASE_URL"
# gemini-cli writes this as an "assistant" message when --prompt/-p is used; it is not the model's
PROMPT_FLAG_NOTICE = "The --prompt (-p) flag has been deprecated"


def settings(model: str) -> dict:
    """~/.gemini/settings.json (v2 layout: nested categories)."""
    return {
        "security": {
            "auth": {"selectedType": AUTH_TYPE},
            "folderTrust": {"enabled": False},
        },
        "model": {"name": model, "skipNextSpeakerCheck": True},
        "experimental": {
            "useModelRouter": False,
            "codebaseInvestigatorSettings": {"model": model},
        },
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False, "logPrompts": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True, "checkpointing": {"enabled": False}},
        "ide": {"enabled": False},
        "ui": {"hideBanner": True, "hideTips": True},
    }


def write_home(home: CellHome, ctx: dict) -> dict[str, str]:
    gemini_dir = home.host_home / ".gemini"
    write_json(gemini_dir / "settings.json", settings(str(ctx["model"])))
    write_json(gemini_dir / "trustedFolders.json", {str(ctx.get("task_dir") or home.task_dir): "TRUST_FOLDER"})
    env: dict[str, str] = {}
    if ctx.get("base_url"):
        env[BASE_URL_VAR] = str(ctx["base_url"])
    return env


EVENT_TYPES = ("init", "message", "tool_use", "tool_result", "error", "result")


def usage(events: list[dict]) -> ApiUsage | None:
    """What gemini reported spending: each session's ``result`` event's ``stats`` (its prompt tokens include the
    cached ones, ``cached`` where it reports them). A session cut short prints no stats; gemini prices nothing."""
    stats = [ev["stats"] for ev in events if ev.get("type") == "result" and isinstance(ev.get("stats"), dict)]
    return total([ApiUsage(count(st.get("input_tokens")), count(st.get("output_tokens")), count(st.get("cached")))
                  for st in stats])  # fmt: skip


def _stats(stats: dict) -> str:
    keys = ("input_tokens", "output_tokens", "total_tokens", "tool_calls", "duration_ms")
    return ", ".join(f"{k} {stats[k]}" for k in keys if k in stats)


def trace_lines(ev: dict) -> list[str] | None:
    """One event of ``gemini --output-format stream-json`` (nonInteractiveCli / StreamJsonFormatter: each has a
    ``type`` and a ``timestamp``) as markdown; None for any other shape."""
    kind = ev.get("type")
    if kind not in EVENT_TYPES or "timestamp" not in ev:
        return None
    if kind == "init":
        return [f"**gemini** session `{ev.get('session_id', '?')}`, model `{ev.get('model', '?')}`"]
    if kind == "message":
        content = str(ev.get("content") or "")
        if ev.get("role") == "user":
            return ["**user**:", "", clip(content)]
        if not content.strip() or content.startswith(PROMPT_FLAG_NOTICE):
            return []
        # streamed text arrives in pieces (delta: true), one event each
        return [clip(content)] if ev.get("delta") else [f"**assistant**: {clip(content)}"]
    if kind == "tool_use":
        name = ev.get("tool_name", "?")
        params = ev.get("parameters") or {}
        head = f"**tool call** `{name}`"
        if isinstance(params, dict) and isinstance(params.get("command"), str):
            extra = {k: v for k, v in params.items() if k != "command"}
            note = f" ({', '.join(f'{k}: {v}' for k, v in extra.items())})" if extra else ""
            return [f"{head}{note}:", "```bash", clip(params["command"]), "```"]
        return [f"{head}:", "```json", clip(json.dumps(params, indent=1, default=str)), "```"]
    if kind == "tool_result":
        status = ev.get("status", "?")
        err = ev.get("error") if isinstance(ev.get("error"), dict) else None
        body = ev.get("output")
        if body is None and err:
            body = err.get("message", "")
        lines = [f"**tool result** ({status}{', ' + str(err.get('type')) if err else ''}):"]
        return [*lines, "```", clip(str(body or "")), "```"]
    if kind == "error":
        return [f"**{ev.get('severity', 'error')}**: {clip(str(ev.get('message', '')))}"]
    # result
    status = ev.get("status", "?")
    line = f"**result**: {status}"
    if isinstance(ev.get("stats"), dict) and ev["stats"]:
        line += f" ({_stats(ev['stats'])})"
    err = ev.get("error")
    if isinstance(err, dict):
        line += f": {err.get('type', 'error')}: {clip(str(err.get('message', '')))}"
    return [line]


FATAL_AUTHENTICATION_EXIT = 41  # FatalAuthenticationError's exit code (no usable auth method or key)


def auth_failed(rc: int, events: list[dict]) -> bool:
    """0.18.4 exits with the HTTP status of an API error (modulo 256: 401 -> 145), and 41 when auth is unusable."""
    return rc in (FATAL_AUTHENTICATION_EXIT, *(s % 256 for s in AUTH_STATUSES))


# the API statuses 0.18.4 exits with (modulo 256); a 429 storm it gives up on ends with exit 1 and a result event
# whose error has no status (type "Error"): no status is read where the CLI states none
EXIT_STATUSES = {s % 256: s for s in (401, 403, 404, 429, 500, 502, 503, 529)}


def api_error(rc: int, events: list[dict]) -> dict | None:
    """The error that ended a run: the HTTP status gemini exits with, and its ``result`` event's error type."""
    result = next((ev for ev in reversed(events) if ev.get("type") == "result"), None)
    err = result.get("error") if result and isinstance(result.get("error"), dict) else None
    status = EXIT_STATUSES.get(rc)
    if rc == FATAL_AUTHENTICATION_EXIT:
        status = 401
    if status is None and err is None:
        return None
    return {"http_status": status, "type": str(err.get("type")) if err else None}


GEMINI = AgentCli(
    package=CLI_PACKAGES["gemini"],
    key_var="GEMINI_API_KEY",
    accepted_keys=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    base_url_var=BASE_URL_VAR,
    command=("gemini", "--yolo", "--output-format", "stream-json", "--model", "{model}", "--prompt", "{prompt}"),
    write_home=write_home,
    trace_lines=trace_lines,
    env={"GEMINI_SANDBOX": "false"},
    auth_failed=auth_failed,
    usage=usage,
    api_error=api_error,
)
