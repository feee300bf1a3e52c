"""The Gemini API (``generativelanguage.googleapis.com/v1beta``) as gemini-cli 0.18.4 calls it through @google/genai
1.30 with an API key (``x-goog-api-key``) and ``GOOGLE_GEMINI_BASE_URL``:

- ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse``: the main loop (``GeminiChat``); SSE ``data:``
  lines, each a ``GenerateContentResponse`` (``candidates[0].content.parts``: text or ``functionCall``; the last one
  with ``finishReason`` and ``usageMetadata``; a stream without a finish reason is an InvalidStreamError to the CLI).
- ``POST /v1beta/models/<model>:generateContent``: side requests through ``BaseLlmClient.generateJson`` (loop
  detection after 30 turns, next-speaker check if ``model.skipNextSpeakerCheck`` is off, the router's classifier
  when the model is ``auto``) and chat compression; they offer no tools and ask for JSON by
  ``generationConfig.responseJsonSchema``: answered with an object that fits the schema (``next_speaker: user``,
  confidence 0 …).
- ``POST /v1beta/models/<model>:countTokens``: ``{"totalTokens": n}``.

Errors are Google's JSON (``{"error": {"code", "message", "status", "details"}}``). The CLI's retryWithBackoff
(3 attempts) waits ``RetryInfo.retryDelay`` for a 429 (googleQuotaErrors.classifyGoogleError) and, for any other
status, the delay in a message "Please retry in <n>s" (else 5 s doubling), so both hints here are short.
"""

from __future__ import annotations

import json
import re
import time
from http.server import BaseHTTPRequestHandler

from tests.support.providers.server import Protocol, Step, Turn, send_json, sse, sse_start

SHELL_TOOL = "run_shell_command"
PATH_RE = re.compile(r"^/v1(?:beta|alpha)?/(?:models|tunedModels)/([^/:]+):(streamGenerateContent|generateContent)$")
COUNT_RE = re.compile(r"^/v1(?:beta|alpha)?/models/[^/:]+:countTokens$")
RETRY_DELAY = "0.2s"  # what the stand-in's 429/5xx tell the CLI to wait
# gemini-cli 0.18.4 loads its bash parser (tree-sitter wasm) in the background when the shell tool is made and
# rejects every command it cannot parse ("Command rejected because it could not be parsed safely"); a first answer
# within ~50 ms of start-up, which no real API gives, beats that load. The first turn waits this long.
FIRST_REPLY_DELAY = 0.5
CONTEXT_PREAMBLE = "This is the Gemini CLI. We are setting up the context"  # utils/environmentContext.js

STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _usage(prompt: int = 100, out: int = 10) -> dict:
    return {"promptTokenCount": prompt, "candidatesTokenCount": out, "totalTokenCount": prompt + out}


def _chunk(parts: list[dict], finish: str | None = None, model: str = "") -> dict:
    cand: dict = {"content": {"role": "model", "parts": parts}, "index": 0}
    out: dict = {"candidates": [cand], "modelVersion": model, "responseId": "standin"}
    if finish:
        cand["finishReason"] = finish
        out["usageMetadata"] = _usage()
    return out


def fit_schema(schema: dict | None) -> object:
    """A value that satisfies a (simple) JSON schema, leaning to the answer that lets the CLI go on: the user speaks
    next, no loop (confidence 0), the cheaper route."""
    schema = schema or {}
    if "enum" in schema:
        values = schema["enum"]
        return "user" if "user" in values else values[0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = (kind or "object").lower()
    if kind == "object" or "properties" in schema:
        return {name: fit_schema(sub) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return 0
    if kind == "boolean":
        return False
    return "stand-in"


class Gemini(Protocol):
    name = "gemini"

    def handles(self, method: str, path: str) -> bool:
        return method == "POST" and PATH_RE.match(path) is not None

    def parse(self, path: str, headers, query: dict, body: dict) -> Turn:
        match = PATH_RE.match(path)
        model = match.group(1) if match else "?"
        tools = [
            decl.get("name", "?")
            for tool in body.get("tools") or []
            for decl in tool.get("functionDeclarations") or tool.get("function_declarations") or []
        ]
        contents = body.get("contents") or []
        results = sum(
            1
            for content in contents
            for part in content.get("parts") or []
            if "functionResponse" in part or "function_response" in part
        )
        # gemini-cli opens every chat with its own environment-context user message (date, OS, the folder's
        # listing), then the prompt: the first user text that is not that preamble
        texts = [
            part["text"]
            for content in contents
            if content.get("role", "user") == "user"
            for part in content.get("parts") or []
            if isinstance(part.get("text"), str)
        ]
        prompt = next((t for t in texts if not t.lstrip().startswith(CONTEXT_PREAMBLE)), texts[0] if texts else "")
        key = headers.get("x-goog-api-key") or (query.get("key") or [None])[0]
        return Turn(
            model=model,
            tools=tools,
            tool_results=results,
            user_text=prompt,
            main=SHELL_TOOL in tools and match is not None and match.group(2) == "streamGenerateContent",
            key=key,
        )

    def reply(self, h: BaseHTTPRequestHandler, turn: Turn, step: Step, index: int) -> None:
        if turn.tool_results == 0:
            time.sleep(FIRST_REPLY_DELAY)
        sse_start(h)
        if step.shell is not None:
            call = {
                "functionCall": {
                    "name": SHELL_TOOL,
                    "args": {"command": step.shell, "description": f"stand-in step {index}"},
                }
            }
            sse(h, _chunk([{"text": f"Step {index}: running a command."}], model=turn.model))
            sse(h, _chunk([call], finish="STOP", model=turn.model))
        else:
            text = step.text or ""
            half = len(text) // 2
            sse(h, _chunk([{"text": text[:half]}], model=turn.model))
            sse(h, _chunk([{"text": text[half:]}], finish="STOP", model=turn.model))

    def side_reply(self, h: BaseHTTPRequestHandler, turn: Turn, body: dict) -> None:
        gen = body.get("generationConfig") or {}
        schema = gen.get("responseJsonSchema") or gen.get("responseSchema")
        if schema is not None or gen.get("responseMimeType") == "application/json":
            text = json.dumps(fit_schema(schema))
        else:
            text = "stand-in summary: nothing to add."
        data = _chunk([{"text": text}], finish="STOP", model=turn.model)
        if h.path.split("?", 1)[0].endswith(":streamGenerateContent"):
            sse_start(h)
            sse(h, data)
        else:
            send_json(h, 200, data)

    def error(self, h: BaseHTTPRequestHandler, status: int, message: str) -> None:
        err: dict = {"code": status, "message": message, "status": STATUS.get(status, "UNKNOWN")}
        headers = {}
        if status == 429:
            err["details"] = [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": RETRY_DELAY},
            ]
            headers["Retry-After"] = "1"
        elif status >= 500:
            # classifyGoogleError reads this sentence from any non-429 error's message
            err["message"] = f"{message}. Please retry in {RETRY_DELAY}."
            headers["Retry-After"] = "1"
        elif status == 401:
            err["message"] = f"{message}. API key not valid. Please pass a valid API key."
            err["details"] = [
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                 "domain": "googleapis.com"},
            ]  # fmt: skip
        send_json(h, status, {"error": err}, headers)

    def other(self, h: BaseHTTPRequestHandler, method: str, path: str) -> bool:
        if method == "POST" and COUNT_RE.match(path):
            send_json(h, 200, {"totalTokens": 100})
            return True
        if method == "GET" and re.match(r"^/v1(?:beta|alpha)?/models/?$", path):
            send_json(h, 200, {"models": []})
            return True
        return False
