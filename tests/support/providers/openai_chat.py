"""The OpenAI Chat Completions API as opencode (opencode-ai at its pin) calls an OpenAI-compatible provider: its
``opencode`` provider (OpenCode Zen, ``https://opencode.ai/zen/v1``, PostTrainBench's ``opencode/kimi-k2.6``) is
``@ai-sdk/openai-compatible``, which posts to ``<baseURL>/chat/completions`` with ``Authorization: Bearer <key>``.

- the body holds ``model``, ``messages`` (``system``, ``user``, ``assistant`` with ``tool_calls``, ``tool`` results
  with ``tool_call_id``), ``tools`` (``{"type": "function", "function": {name, description, parameters}}``:
  opencode's ``bash``, ``read``, ``write`` … ) and ``stream: true`` with ``stream_options.include_usage``.
- the answer is SSE of ``chat.completion.chunk`` objects: a first delta with the role, text deltas, ``tool_calls``
  deltas (id, name, then the arguments), a last chunk with ``finish_reason`` (``stop`` / ``tool_calls``), a chunk
  with ``usage`` (``prompt_tokens``, ``completion_tokens``, ``prompt_tokens_details.cached_tokens``) and
  ``data: [DONE]``.
- opencode's side requests (the session title, with the same model when the provider has no small model) offer
  no tools: they get a short text.
- ``GET <base>/models``: an OpenAI model list (empty), for clients that ask.

Errors are OpenAI's JSON (``{"error": {"message", "type", "param", "code"}}``) with a short ``retry-after``.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from http.server import BaseHTTPRequestHandler

from tests.support.providers.server import Protocol, Step, Turn, send_json, sse_start

# <base>/chat/completions, the base being OpenAI's /v1, Zen's /zen/v1 or a bare host
PATH_RE = re.compile(r"^(?:/zen)?(?:/v1)?/chat/completions$")
MODELS_RE = re.compile(r"^(?:/zen)?(?:/v1)?/models/?$")
SHELL_TOOL = "bash"  # opencode's shell tool
RETRY_AFTER_S = "0"

ERRORS = {  # status -> (type, code), as OpenAI answers
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}

_ids = itertools.count(1)


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        part.get("text", "") for part in content or [] if isinstance(part, dict) and part.get("type") == "text"
    )


def _tool_names(body: dict) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            names.append(str(fn.get("name") or "?"))
    return names


def shell_arguments(command: str, index: int) -> dict:
    """opencode's bash tool: ``command`` and a short ``description`` (both required)."""
    return {"command": command, "description": f"stand-in step {index}"}


class OpenAIChat(Protocol):
    name = "openai_chat"

    def handles(self, method: str, path: str) -> bool:
        return method == "POST" and PATH_RE.match(path) is not None

    def parse(self, path: str, headers, query: dict, body: dict) -> Turn:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        tools = _tool_names(body)
        users = [_text_of(m.get("content")) for m in messages if m.get("role") == "user"]
        auth = headers.get("Authorization") or ""
        return Turn(
            model=str(body.get("model") or "?"),
            tools=tools,
            tool_results=sum(1 for m in messages if m.get("role") == "tool"),
            user_text=users[0] if users else "",
            main=SHELL_TOOL in tools,
            key=auth[len("Bearer ") :] if auth.startswith("Bearer ") else None,
        )

    def _stream(self, h: BaseHTTPRequestHandler, model: str, text: str, call: dict | None) -> None:
        cid = f"chatcmpl-standin{next(_ids)}"
        created = int(time.time())

        def chunk(delta: dict | None, finish: str | None = None, usage: dict | None = None) -> None:
            choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
            data = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
            data["choices"] = choices
            if usage is not None:
                data["usage"] = usage
            h.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            h.wfile.flush()

        sse_start(h)
        chunk({"role": "assistant", "content": ""})
        half = len(text) // 2
        for piece in (text[:half], text[half:]):
            if piece:
                chunk({"content": piece})
        if call is not None:
            function = {"name": call["name"], "arguments": ""}
            head = {"index": 0, "id": call["id"], "type": "function", "function": function}
            chunk({"tool_calls": [head]})
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": call["arguments"]}}]})
        chunk({}, "tool_calls" if call is not None else "stop")
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
                 "prompt_tokens_details": {"cached_tokens": 0}}  # fmt: skip
        chunk(None, usage=usage)
        h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()

    def reply(self, h: BaseHTTPRequestHandler, turn: Turn, step: Step, index: int) -> None:
        if step.shell is not None:
            call = {"id": f"call_standin{next(_ids)}", "name": SHELL_TOOL,
                    "arguments": json.dumps(shell_arguments(step.shell, index))}  # fmt: skip
            self._stream(h, turn.model, f"Step {index}: running a command.", call)
        else:
            self._stream(h, turn.model, step.text or "", None)

    def side_reply(self, h: BaseHTTPRequestHandler, turn: Turn, body: dict) -> None:
        self._stream(h, turn.model, "Stand-in session", None)

    def error(self, h: BaseHTTPRequestHandler, status: int, message: str) -> None:
        kind, code = ERRORS.get(status, ("server_error" if status >= 500 else "invalid_request_error", None))
        headers = {"retry-after": RETRY_AFTER_S} if status == 429 or status >= 500 else {}
        send_json(h, status, {"error": {"message": message, "type": kind, "param": None, "code": code}}, headers)

    def other(self, h: BaseHTTPRequestHandler, method: str, path: str) -> bool:
        if method == "GET" and MODELS_RE.match(path) and (h.headers.get("Authorization") or "").startswith("Bearer "):
            send_json(h, 200, {"object": "list", "data": []})
            return True
        return False
