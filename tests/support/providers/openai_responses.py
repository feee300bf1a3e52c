"""The OpenAI Responses API (``api.openai.com/v1``) as codex 0.79.0 calls it with an API key (``CODEX_API_KEY`` ->
``Authorization: Bearer``) and ``OPENAI_BASE_URL``:

- ``POST <base>/responses``: every model call (``stream: true``, ``store: false``); codex appends ``/responses`` to
  the base URL as given, so both ``/v1/responses`` (base URL ``…/v1``, as OpenAI's own) and ``/responses`` (a bare
  host) are answered. The body holds ``model``, ``instructions``, ``tools`` (``shell_command`` in 0.79; ``shell``,
  ``exec_command``, ``local_shell`` in other versions) and the whole conversation in ``input`` (codex keeps no
  server-side state): ``message`` items (codex's own AGENTS.md/skills and ``<environment_context>`` user messages
  first, then the prompt), the model's ``function_call`` items and their ``function_call_output`` items.
- the answer is SSE; codex reads each event's JSON ``type`` (``response.created``, ``response.output_item.added`` /
  ``.done`` with a ``function_call`` or ``message`` item, ``response.output_text.delta``, ``response.completed`` with
  ``usage``); a stream that ends without ``response.completed`` is an error to it ("stream closed before
  response.completed") and is retried.
- 0.79 makes no other request at start-up (no model list: the ``remote_models`` feature is off; no WebSocket: that
  transport came later). Later versions try ``GET <base>/responses`` with ``Upgrade: websocket`` first and fall back
  to HTTPS on a refusal; ``other`` answers it 426 at once, and ``GET <base>/models`` with an empty list.

Errors are OpenAI's JSON (``{"error": {"message", "type", "param", "code"}}``). codex 0.79 retries a failed turn
itself, whatever the status (401 and 404 too): ``stream_max_retries`` (5) more tries, 0.2 s doubling, then exit 1
(about 6 s for a refused key). For an HTTP error it reads no hint (a ``retry-after: 1`` and "Please try again in
1.5s" left its waits at 0.2 s and 0.4 s); the hints here (the message as OpenAI writes it, ``retry-after-ms``,
``retry-after``) are short anyway, for versions that read them.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.support.providers.server import Protocol, Step, Turn, send_json, sse, sse_start

PATH_RE = re.compile(r"^(?:/v1)?/responses$")
MODELS_RE = re.compile(r"^(?:/v1)?/models/?$")
SHELL_TOOLS = ("shell_command", "shell", "exec_command", "local_shell", "container.exec")
RETRY_AFTER_S = 0.2  # what the stand-in's 429/5xx tell the CLI to wait
# codex's own user messages, before the prompt (core/src/project_doc.rs, environment_context.rs)
HARNESS_PREFIXES = ("# AGENTS.md instructions", "<environment_context>", "<user_instructions>", "<INSTRUCTIONS>")

ERRORS = {  # status -> (type, code), as api.openai.com answers
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    502: ("server_error", None),
    503: ("server_error", None),
}

_ids = itertools.count(1)


@dataclass
class ResponsesTurn(Turn):
    shell_tool: dict | None = None  # the shell-like tool offered (its definition from ``tools``)
    tool_specs: list[dict] = field(default_factory=list)


def _tool_name(tool: dict) -> str:
    return tool.get("name") or tool.get("type") or "?"


def shell_arguments(tool: dict, command: str, index: int) -> dict:
    """Arguments for ``command`` in the offered shell tool's own schema: ``command`` as a string (shell_command),
    as an argv (shell: ``["bash", "-lc", …]``), or ``cmd`` (exec_command)."""
    props = (tool.get("parameters") or {}).get("properties") or {}
    if "cmd" in props and "command" not in props:
        return {"cmd": command}
    spec = props.get("command") or {}
    if spec.get("type") == "array":
        return {"command": ["bash", "-lc", command], "timeout_ms": 600_000}
    return {"command": command, "timeout_ms": 600_000}


def _usage(prompt: int = 100, out: int = 10) -> dict:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + out,
    }


def _response(rid: str, model: str, status: str, output: list[dict]) -> dict:
    out = {"id": rid, "object": "response", "model": model, "status": status, "output": output}
    if status == "completed":
        out["usage"] = _usage()
    return out


def _message(text: str, mid: str) -> dict:
    return {
        "type": "message",
        "id": mid,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


class OpenAIResponses(Protocol):
    name = "openai"

    def handles(self, method: str, path: str) -> bool:
        return method == "POST" and PATH_RE.match(path) is not None

    def parse(self, path: str, headers, query: dict, body: dict) -> Turn:
        tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
        names = [_tool_name(t) for t in tools]
        shell = next((t for name in SHELL_TOOLS for t in tools if _tool_name(t) == name), None)
        items = body.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        items = [i for i in items or [] if isinstance(i, dict)]
        results = sum(1 for i in items if i.get("type") in ("function_call_output", "custom_tool_call_output"))
        texts = []
        for item in items:
            if item.get("type", "message") != "message" or item.get("role") != "user":
                continue
            content = item.get("content")
            parts = [{"text": content}] if isinstance(content, str) else content or []
            texts += [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        prompt = next((t for t in texts if not t.lstrip().startswith(HARNESS_PREFIXES)), texts[0] if texts else "")
        auth = headers.get("Authorization") or ""
        key = auth[len("Bearer ") :] if auth.startswith("Bearer ") else (headers.get("api-key") or None)
        return ResponsesTurn(
            model=str(body.get("model") or "?"),
            tools=names,
            tool_results=results,
            user_text=prompt,
            main=shell is not None,
            key=key,
            shell_tool=shell,
            tool_specs=tools,
        )

    def _stream(self, h: BaseHTTPRequestHandler, turn: Turn, items: list[dict], preface: str | None = None) -> None:
        """One response: ``response.created``, each output item added/(text deltas)/done, ``response.completed``."""
        n = next(_ids)
        rid = f"resp_standin{n}"
        sse_start(h)
        seq = itertools.count()

        def emit(data: dict) -> None:
            data["sequence_number"] = next(seq)
            sse(h, data, event=data["type"])

        emit({"type": "response.created", "response": _response(rid, turn.model, "in_progress", [])})
        emit({"type": "response.in_progress", "response": _response(rid, turn.model, "in_progress", [])})
        done = []
        for i, item in enumerate(items):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                emit({"type": "response.output_item.added", "output_index": i,
                      "item": {**item, "status": "in_progress", "content": []}})  # fmt: skip
                part = {"type": "output_text", "text": "", "annotations": []}
                emit({"type": "response.content_part.added", "item_id": item["id"], "output_index": i,
                      "content_index": 0, "part": part})  # fmt: skip
                half = len(text) // 2
                for piece in (text[:half], text[half:]):
                    if piece:
                        emit({"type": "response.output_text.delta", "item_id": item["id"], "output_index": i,
                              "content_index": 0, "delta": piece})  # fmt: skip
                emit({"type": "response.output_text.done", "item_id": item["id"], "output_index": i,
                      "content_index": 0, "text": text})  # fmt: skip
                emit({"type": "response.content_part.done", "item_id": item["id"], "output_index": i,
                      "content_index": 0, "part": {**part, "text": text}})  # fmt: skip
            else:
                emit({"type": "response.output_item.added", "output_index": i,
                      "item": {**item, "status": "in_progress", "arguments": ""}})  # fmt: skip
                emit({"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": i,
                      "arguments": item["arguments"]})  # fmt: skip
            emit({"type": "response.output_item.done", "output_index": i, "item": item})
            done.append(item)
        emit({"type": "response.completed", "response": _response(rid, turn.model, "completed", done)})

    def reply(self, h: BaseHTTPRequestHandler, turn: Turn, step: Step, index: int) -> None:
        n = next(_ids)
        if step.shell is not None:
            tool = getattr(turn, "shell_tool", None) or {"name": "shell_command"}
            name = _tool_name(tool)
            if name == "local_shell":
                call = {"type": "local_shell_call", "id": f"lsh_standin{n}", "call_id": f"call_standin{n}",
                        "status": "completed",
                        "action": {"type": "exec", "command": ["bash", "-lc", step.shell]}}  # fmt: skip
            else:
                call = {
                    "type": "function_call",
                    "id": f"fc_standin{n}",
                    "call_id": f"call_standin{n}",
                    "name": name,
                    "arguments": json.dumps(shell_arguments(tool, step.shell, index)),
                    "status": "completed",
                }
            self._stream(h, turn, [_message(f"Step {index}: running a command.", f"msg_standin{n}"), call])
        else:
            self._stream(h, turn, [_message(step.text or "", f"msg_standin{n}")])

    def side_reply(self, h: BaseHTTPRequestHandler, turn: Turn, body: dict) -> None:
        fmt = ((body.get("text") or {}).get("format") or {}) if isinstance(body.get("text"), dict) else {}
        text = "{}" if fmt.get("type") == "json_schema" else "stand-in summary: nothing to add."
        self._stream(h, turn, [_message(text, f"msg_standin{next(_ids)}")])

    def error(self, h: BaseHTTPRequestHandler, status: int, message: str) -> None:
        kind, code = ERRORS.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
        headers = {}
        if status == 401:
            message = f"{message}. Incorrect API key provided: sk-****."
        elif status == 429 or status >= 500:
            message = f"{message}. Rate limit reached for requests. Please try again in {RETRY_AFTER_S:g}s."
            headers = {
                "retry-after": "1",
                "retry-after-ms": str(int(RETRY_AFTER_S * 1000)),
                "x-ratelimit-reset-requests": f"{int(RETRY_AFTER_S * 1000)}ms",
            }
        send_json(h, status, {"error": {"message": message, "type": kind, "param": None, "code": code}}, headers)

    def other(self, h: BaseHTTPRequestHandler, method: str, path: str) -> bool:
        if method == "GET" and PATH_RE.match(path) and (h.headers.get("Upgrade") or "").lower() == "websocket":
            # a WebSocket attempt (later codex versions): refuse it so the CLI falls back to HTTPS at once
            send_json(h, 426, {"error": {"message": "stand-in: no WebSocket transport", "type": "invalid_request_error",
                                         "param": None, "code": "websocket_not_supported"}})  # fmt: skip
            return True
        is_openai = (h.headers.get("Authorization") or "").startswith("Bearer ") and not h.headers.get("x-api-key")
        if method == "GET" and MODELS_RE.match(path) and is_openai and not h.headers.get("anthropic-version"):
            send_json(h, 200, {"object": "list", "data": [], "models": []})
            return True
        return False
