"""codex (@openai/codex), as PostTrainBench's agents/codex/solve.sh runs it.

What 0.79.0 (a Rust binary behind a Node wrapper) needs to run unattended, as seen running it against the provider
stand-in (tests/integration/test_real_cli_codex.py) and in its ``--help``:

- the key: ``codex exec`` takes ``CODEX_API_KEY`` from the environment (sent as ``Authorization: Bearer``) and
  stores nothing (no auth.json); the built-in ``openai`` provider needs no login.
- the base URL: the built-in provider reads ``OPENAI_BASE_URL`` and appends ``/responses`` to it as given, so a
  gateway's URL must carry the ``/v1`` that ``https://api.openai.com/v1`` does.
- ``--yolo`` (``--dangerously-bypass-approvals-and-sandbox``) gives approval ``never`` and sandbox
  ``danger-full-access``; config.toml says the same for a command without it, trusts the task dir (as
  PostTrainBench's ``[projects."/home/"]``) and inherits the whole environment into commands
  (``shell_environment_policy``, as PostTrainBench) but the CLI's own key: without ``exclude`` every command the agent
  runs sees ``CODEX_API_KEY`` (0.79 applies no default excludes). ``exec`` asks nothing: no trust prompt, no login.
- no other traffic: ``exec`` makes no update check, no model-list request (feature ``remote_models`` off) and no
  WebSocket attempt (not in 0.79); its only connections are the POSTs to ``<base>/responses`` (strace).
  ``check_for_update_on_startup = false`` is there for the interactive CLI.
- retries: a failed turn (401, 404, 429, 5xx, a dropped stream) is retried ``stream_max_retries`` times (5) with
  backoff 0.2 s doubling, hints (``retry-after``, "try again in") unread for an HTTP error: a refused key ends
  the CLI (exit 1) after about 6 s. The built-in defaults are kept (PostTrainBench's).
- ``--search`` is the interactive CLI's flag: ``exec`` ignores it (no ``web_search`` tool is offered; ``-c
  features.web_search_request=true`` after ``exec`` would). It stays, as in PostTrainBench, and so does its effect.
- ``-a`` / ``--ask-for-approval`` is a top-level option only: ``codex exec -a never`` is a usage error (exit 2).
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib

from ptflow.config.agent_clis import CLI_PACKAGES
from ptflow.files import write_text_atomic
from ptflow.stages.train.agent.clis.base import (
    AUTH_STATUSES,
    AgentCli,
    ApiUsage,
    CellHome,
    clip,
    count,
    http_status,
    total,
)

BASE_URL_VAR = "OPENAI_BASE_URL"
KEY_VAR = "CODEX_API_KEY"
CONFIG_DIR = ".codex"  # CODEX_HOME, under the cell's home
PTB_JUDGE_MODEL = "gpt-5.1-codex"  # PostTrainBench's judge


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string (JSON's escapes are TOML's)


def config_toml(model: str, task_dir: str) -> str:
    """``$CODEX_HOME/config.toml``."""
    tables: dict[str, dict] = {
        "": {
            "model": model,
            "model_reasoning_summary": "detailed",
            "approval_policy": "never",
            "sandbox_mode": "danger-full-access",
            "check_for_update_on_startup": False,
        },
        f"projects.{json.dumps(task_dir)}": {"trust_level": "trusted"},
        "shell_environment_policy": {"inherit": "all", "exclude": [KEY_VAR]},
        "analytics": {"enabled": False},
        "notice": {"hide_full_access_warning": True},
    }
    lines = ["# written by ptflow for this cell: codex runs unattended (see ptflow/stages/train/agent/clis/codex.py)"]
    for name, values in tables.items():
        if name:
            lines += ["", f"[{name}]"]
        lines += [f"{key} = {_toml(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def _bare(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _dump(data: dict, prefix: str = "") -> list[str]:
    """TOML of ``data``: its plain values, then each nested dict as a ``[table]`` (recursively)."""
    lines = [f"{_bare(k)} = {_toml(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for k, v in data.items():
        if isinstance(v, dict):
            name = f"{prefix}.{_bare(k)}" if prefix else _bare(k)
            if any(not isinstance(x, dict) for x in v.values()) or not v:
                lines += ["", f"[{name}]"]
            lines += _dump(v, name)
    return lines


def merged_config_toml(checkout: dict, model: str, task_dir: str, host_values: dict | None = None) -> str:
    """A PostTrainBench checkout's ``.codex/config.toml`` (run_task.sh copies it into the home) with ptflow's
    settings joined to it: the checkout's values stay; ptflow adds what it lacks (the task dir's trust, the key kept
    out of the agent's commands). ``host_values``: where the home is a host dir, the real values of the variables its
    ``shell_environment_policy.set`` gives container paths (None: left out)."""
    ours = tomllib.loads(config_toml(model, task_dir))
    for key in ("model", "model_reasoning_summary"):  # solve.sh's command line says these, or leaves them out
        ours.pop(key)
    data = {k: v for k, v in checkout.items()}
    for key, value in ours.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**value, **data[key]} if key != "projects" else {**data[key], **value}
        else:
            data.setdefault(key, value)
    policy = data.get("shell_environment_policy")
    if isinstance(policy, dict):
        policy["exclude"] = sorted({*policy.get("exclude", []), KEY_VAR})
        if host_values and isinstance(policy.get("set"), dict):
            for name, value in host_values.items():
                if name in policy["set"]:
                    policy["set"].pop(name) if value is None else policy["set"].__setitem__(name, value)
    head = "# PostTrainBench's containers/other_home_data/.codex/config.toml, with ptflow's settings joined (codex.py)"
    return "\n".join([head, *_dump(data)]) + "\n"


def write_home(home: CellHome, ctx: dict) -> dict[str, str]:
    path = home.host_home / CONFIG_DIR / "config.toml"
    model, task_dir = str(ctx["model"]), str(ctx.get("task_dir") or home.task_dir)
    if path.is_file():  # the checkout's, copied into the home first (a checkout cell)
        text = merged_config_toml(tomllib.loads(path.read_text()), model, task_dir, ctx.get("host_values"))
    else:
        text = config_toml(model, task_dir)
    write_text_atomic(path, text)
    # CODEX_HOME: the job's own (a user's ~/.codex or CODEX_HOME) never applies
    env = {"CODEX_HOME": f"{home.home.rstrip('/')}/{CONFIG_DIR}"}
    if ctx.get("base_url"):
        env[BASE_URL_VAR] = str(ctx["base_url"])
    return env


def judge_command(model: str) -> list[str]:
    """PostTrainBench's judge argv (``{prompt}`` left to fill); ``-a never`` must come before ``exec``."""
    return ["codex", "--search", "-a", "never", "exec", "--json", "-c", "model_reasoning_summary=detailed",
            "--skip-git-repo-check", "--yolo", "--model", model, "{prompt}"]  # fmt: skip


EVENT_TYPES = ("thread.started", "turn.started", "turn.completed", "turn.failed", "item.started", "item.updated",
               "item.completed", "error")  # fmt: skip


def _script(command: str) -> str:
    """The script of ``/bin/bash -lc '<script>'`` (how codex shows every command), else the command."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    if len(argv) == 3 and argv[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and argv[1] in ("-lc", "-c"):
        return argv[2]
    return command


def usage(events: list[dict]) -> ApiUsage | None:
    """What codex reported spending: the sum of its ``turn.completed`` events' usage (OpenAI's input tokens include
    the cached ones). codex prices nothing: no USD."""
    turns = [ev["usage"] for ev in events if ev.get("type") == "turn.completed" and isinstance(ev.get("usage"), dict)]
    return total([ApiUsage(count(u.get("input_tokens")), count(u.get("output_tokens")),
                           count(u.get("cached_input_tokens"))) for u in turns])  # fmt: skip


def _usage(usage: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in usage.items() if isinstance(v, int | float))


def _item_lines(kind: str, item: dict) -> list[str]:
    started = kind == "item.started"
    itype = item.get("type")
    if itype == "command_execution":
        if started:
            return ["**command**:", "```bash", clip(_script(str(item.get("command", "")))), "```"]
        code = item.get("exit_code")
        status = item.get("status", "?")
        head = f"**command output** (exit {code})" if code is not None else f"**command output** ({status})"
        if code is not None and status not in ("completed", "failed"):
            head = f"**command output** (exit {code}, {status})"
        output = str(item.get("aggregated_output") or "").rstrip("\n")
        return [head + ":", "```", clip(output), "```"] if output else [head + ": no output"]
    if started:  # the rest are shown once done
        if itype == "mcp_tool_call":
            return [f"**tool call** `{item.get('server', '?')}.{item.get('tool', '?')}`"]
        return []
    if itype == "agent_message":
        return [f"**assistant**: {clip(str(item.get('text', '')))}"]
    if itype == "reasoning":
        text = str(item.get("text", "")).strip()
        return [f"*reasoning*: {clip(text)}"] if text else []
    if itype == "file_change":
        changes = item.get("changes") or []
        lines = [f"**file change** ({item.get('status', '?')}):"]
        return lines + [f"- {c.get('kind', '?')} `{c.get('path', '?')}`" for c in changes if isinstance(c, dict)]
    if itype == "mcp_tool_call":
        line = f"**tool call** `{item.get('server', '?')}.{item.get('tool', '?')}` ({item.get('status', '?')})"
        err = item.get("error")
        return [
            line + (f": {clip(str(err.get('message', err)) if isinstance(err, dict) else str(err))}" if err else "")
        ]
    if itype == "web_search":
        return [f"**web search**: {clip(str(item.get('query', '')))}"]
    if itype == "todo_list":
        todo = item.get("items") or []
        return ["**plan**:"] + [f"- [{'x' if t.get('completed') else ' '}] {t.get('text', '')}" for t in todo
                                if isinstance(t, dict)]  # fmt: skip
    if itype == "error":
        return [f"**error**: {clip(str(item.get('message', '')))}"]
    if itype:
        return [f"**{itype}**:", "```json", clip(json.dumps(item, indent=1, default=str)), "```"]
    return []


def trace_lines(ev: dict) -> list[str] | None:
    """One event of ``codex exec --json`` (exec/src/exec_events.rs: ``thread.*``, ``turn.*``, ``item.*``,
    ``error``; no timestamps) as markdown; None for any other shape."""
    kind = ev.get("type")
    if kind not in EVENT_TYPES or "timestamp" in ev:
        return None
    if kind.startswith("item."):
        item = ev.get("item")
        if not isinstance(item, dict):
            return None
        return [] if kind == "item.updated" else _item_lines(kind, item)
    if kind == "thread.started":
        return [f"**codex** thread `{ev.get('thread_id', '?')}`"]
    if kind == "turn.started":
        return []
    if kind == "turn.completed":
        usage = ev.get("usage")
        return ["**turn completed**" + (f" ({_usage(usage)})" if isinstance(usage, dict) and usage else "")]
    if kind == "turn.failed":
        err = ev.get("error")
        msg = err.get("message", "") if isinstance(err, dict) else str(err or "")
        return [f"**turn failed**: {clip(str(msg))}"]
    return [f"**error**: {clip(str(ev.get('message', '')))}"]  # codex's own notices too ("Reconnecting... 1/5")


def auth_failed(rc: int, events: list[dict]) -> bool:
    """codex ends a refused key with ``turn.failed`` whose error states the HTTP status (after its 5 retries)."""
    for ev in events:
        if ev.get("type") == "turn.failed":
            err = ev.get("error")
            message = err.get("message", "") if isinstance(err, dict) else str(err or "")
            if http_status(message) in AUTH_STATUSES:
                return True
    return False


def api_error(rc: int, events: list[dict]) -> dict | None:
    """The error that ended a run: 0.79.0 ends a turn it gave up on with ``turn.failed`` whose error message states
    the last HTTP status (``exceeded retry limit, last status: 429 Too Many Requests``, after its 5 retries)."""
    for ev in reversed(events):
        if ev.get("type") == "turn.failed":
            err = ev.get("error")
            message = err.get("message", "") if isinstance(err, dict) else str(err or "")
            code = err.get("code") if isinstance(err, dict) else None
            return {"http_status": http_status(message), "type": code if isinstance(code, str) else None}
    return None


CODEX = AgentCli(
    package=CLI_PACKAGES["codex"],
    key_var=KEY_VAR,
    accepted_keys=(KEY_VAR, "OPENAI_API_KEY"),
    base_url_var=BASE_URL_VAR,
    command=(
        "codex",
        "--search",
        "exec",
        "--json",
        "-c",
        "model_reasoning_summary=detailed",
        "--skip-git-repo-check",
        "--yolo",
        "--model",
        "{model}",
        "{prompt}",
    ),  # fmt: skip
    write_home=write_home,
    trace_lines=trace_lines,
    judge_command=tuple(judge_command("{model}")),
    auth_failed=auth_failed,
    usage=usage,
    api_error=api_error,
)
