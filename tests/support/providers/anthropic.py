"""The Anthropic Messages API as claude (@anthropic-ai/claude-code 2.0.55, its bundled @anthropic-ai/sdk 0.70) calls
it with an API key (``x-api-key``) and ``ANTHROPIC_BASE_URL``. What a ``--print`` run calls, read from the records:

- ``POST /v1/messages?beta=true``, all streamed (``stream: true``): the main loop with the ``--model`` model and 17
  tools (``Bash`` among them); at start-up one "Warmup" each for the Explore (haiku) and Plan (sonnet) sub-agents;
  around each Bash call haiku side requests (command-prefix detection, the file paths its output shows). SSE is
  ``event:`` + ``data:`` pairs: ``message_start``, ``content_block_start`` / ``_delta`` (``text_delta``,
  ``input_json_delta``) / ``_stop``, ``message_delta`` (stop reason, usage), ``message_stop``.
- after a failed stream (any error status) claude asks again WITHOUT ``stream`` and wants one ``message`` JSON: its
  non-streaming fallback, which is where its retry loop runs. So ``reply`` answers as the request asked.
- ``POST /v1/messages/count_tokens`` (``{"input_tokens": n}``) once at start-up, unless non-essential traffic is off;
  ``GET /v1/models``: an empty page (not called by 2.0.55).

Errors are Anthropic's JSON (``{"type": "error", "error": {"type", "message"}, "request_id"}``). claude's retry
loop (``CLAUDE_CODE_MAX_RETRIES``, default 10) retries 401, 408, 409, 429 and 5xx/529, waiting the ``retry-after``
header's whole seconds when there is one (``parseInt(h) * 1000``: ``0`` retries at once), else 0.5 s doubling to
32 s. The API sends ``retry-after`` with its 429s; the stand-in sends ``0`` with its 429/5xx/529 so the fault tests
stay quick, and nothing special with its 401 (no ``x-should-retry: false``, which would stop the retries).
"""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler

from tests.support.providers.server import Protocol, Step, Turn, send_json, sse, sse_start

SHELL_TOOL = "Bash"
MESSAGES = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
# claude's side requests (small model, no tools), recognised by their system prompts
BASH_PREFIX_MARK = "process Bash commands that an AI coding agent wants to run"  # before each Bash call
FILE_PATHS_MARK = "Extract any file paths that this command reads or modifies"  # after each Bash call
RETRY_AFTER = "0"  # seconds, for the stand-in's 429/529 (claude reads whole seconds)
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}
_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_standin{next(_ids):08d}"


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        block.get("text", "") for block in content or [] if isinstance(block, dict) and block.get("type") == "text"
    )


def _usage(out: int = 10) -> dict:
    return {"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": out}


class Anthropic(Protocol):
    name = "anthropic"

    def __init__(self):
        # parse() and reply() of one request run on its handler thread: whether that request asked for a stream
        self._request = threading.local()

    def handles(self, method: str, path: str) -> bool:
        return method == "POST" and path.rstrip("/") == MESSAGES

    def parse(self, path: str, headers, query: dict, body: dict) -> Turn:
        tools = [t.get("name", "?") for t in body.get("tools") or [] if isinstance(t, dict)]
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        results = sum(
            1
            for m in messages
            if m.get("role") == "user" and isinstance(m.get("content"), list)
            for block in m["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        )
        self._request.stream = bool(body.get("stream"))
        first_user = next((m for m in messages if m.get("role") == "user"), {})
        key = headers.get("x-api-key")
        auth = headers.get("Authorization") or ""
        if key is None and auth.lower().startswith("bearer "):
            key = auth[7:].strip()
        return Turn(
            model=str(body.get("model", "?")),
            tools=tools,
            tool_results=results,
            user_text=_text_of(first_user.get("content")),
            main=SHELL_TOOL in tools,
            key=key,
        )

    def _stream(self, h: BaseHTTPRequestHandler, model: str, blocks: list[dict], stop_reason: str) -> None:
        """``blocks``: content blocks (text, tool_use) streamed as Anthropic streams them."""
        sse_start(h)
        message = {
            "id": _id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(out=1),
        }
        sse(h, {"type": "message_start", "message": message}, event="message_start")
        sse(h, {"type": "ping"}, event="ping")
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                text = block["text"]
                half = len(text) // 2
                deltas = [{"type": "text_delta", "text": part} for part in (text[:half], text[half:]) if part]
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                raw = json.dumps(block["input"])
                cut = len(raw) // 2
                deltas = [{"type": "input_json_delta", "partial_json": part} for part in ("", raw[:cut], raw[cut:])]
            sse(h, {"type": "content_block_start", "index": index, "content_block": start}, event="content_block_start")
            for delta in deltas:
                sse(h, {"type": "content_block_delta", "index": index, "delta": delta}, event="content_block_delta")
            sse(h, {"type": "content_block_stop", "index": index}, event="content_block_stop")
        sse(
            h,
            {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
             "usage": {"output_tokens": 10}},
            event="message_delta",
        )  # fmt: skip
        sse(h, {"type": "message_stop"}, event="message_stop")

    def _message(self, model: str, blocks: list[dict], stop_reason: str) -> dict:
        return {
            "id": _id("msg"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": _usage(),
        }

    def reply(self, h: BaseHTTPRequestHandler, turn: Turn, step: Step, index: int) -> None:
        if step.shell is not None:
            call = {
                "type": "tool_use",
                "id": _id("toolu"),
                "name": SHELL_TOOL,
                # a timeout, as a model gives for a long command: Bash's default is 2 minutes (BASH_MAX_TIMEOUT_MS
                # only raises the most a model may ask for)
                "input": {"command": step.shell, "description": f"stand-in step {index}", "timeout": 600000},
            }
            blocks, stop = [{"type": "text", "text": f"Step {index}: running a command."}, call], "tool_use"
        else:
            blocks, stop = [{"type": "text", "text": step.text or ""}], "end_turn"
        self._answer(h, turn.model, blocks, stop)

    def _answer(self, h: BaseHTTPRequestHandler, model: str, blocks: list[dict], stop: str) -> None:
        """As the request asked: a stream, or (claude's fallback after a failed stream) one message."""
        if getattr(self._request, "stream", True):
            self._stream(h, model, blocks, stop)
        else:
            send_json(h, 200, self._message(model, blocks, stop))

    def side_reply(self, h: BaseHTTPRequestHandler, turn: Turn, body: dict) -> None:
        system = _text_of(body.get("system"))
        if BASH_PREFIX_MARK in system:
            text = "none"  # no reusable prefix (a permission hint only; bypass mode asks nothing)
        elif FILE_PATHS_MARK in system:
            text = "<is_displaying_contents>\nfalse\n</is_displaying_contents>\n\n<filepaths>\n</filepaths>"
        else:
            text = "stand-in"  # the sub-agents' "Warmup" and anything else
        blocks = [{"type": "text", "text": text}]
        self._answer(h, turn.model, blocks, "end_turn")

    def error(self, h: BaseHTTPRequestHandler, status: int, message: str) -> None:
        kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        headers = {"request-id": _id("req")}
        if status in (429, 529) or status >= 500:
            headers["retry-after"] = RETRY_AFTER
        if status == 401:
            message = f"{message}: invalid x-api-key"
        body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": headers["request-id"]}
        send_json(h, status, body, headers)

    def other(self, h: BaseHTTPRequestHandler, method: str, path: str) -> bool:
        path = path.rstrip("/")
        if method == "POST" and path == COUNT_TOKENS:
            send_json(h, 200, {"input_tokens": 100})
            return True
        if method == "GET" and path == "/v1/models":
            send_json(h, 200, {"data": [], "has_more": False, "first_id": None, "last_id": None})
            return True
        return False
