"""The provider stand-in's core: an HTTP server that replays a scripted agent trajectory over whichever of the four
wire protocols a request speaks, and records every request.

- Anthropic Messages (``POST /v1/messages``, SSE)                       -> ``anthropic.py`` (claude)
- OpenAI Responses (``POST /v1/responses``, SSE)                        -> ``openai_responses.py`` (codex)
- Gemini ``:streamGenerateContent`` (``POST /v1beta/models/…``, SSE)    -> ``gemini.py`` (gemini)
- OpenAI Chat Completions (``POST …/chat/completions``, SSE)            -> ``openai_chat.py`` (opencode)

The trajectory is stateless per request: the step a request gets is the number of tool results already in its
conversation, so a retried request (after a 429) gets the same step again and a restarted CLI starts over (or, when
its prompt says an earlier session worked there, follows ``continue_trajectory``). Requests that offer no shell tool
are the CLIs' side requests (titles, routing, next-speaker checks): the protocol answers them briefly.

Faults (``Faults``): ``unauthorized`` answers 401 to everything; ``errors`` answers the listed statuses (429, 529 …)
to the first main-loop requests, then behaves; ``stall_at`` holds the request for that step of the main trajectory
open without a byte.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

EARLIER_SESSION_MARK = "earlier session"  # in ptflow's prompt when a cell continues a synced workspace


@dataclass(frozen=True)
class Step:
    shell: str | None = None  # a shell tool call with this command
    text: str | None = None  # the final answer (ends the agent's turn)


# What every CLI is made to do (commands run in the task dir, the CLI's working directory).
def default_trajectory(train_steps: int = 300) -> list[Step]:
    """Read the prompt, train and measure the result with the task dir's ``evaluate.py`` (the scripted agent runs it
    from the CLI's shell, and exits non-zero without ``final_model/`` when it fails), show the model and the
    measurement, end. No separate evaluate.py of the base model: a second evaluate.py run (~13 CPU-s of imports per
    cell) that proved nothing the measurement does not."""
    return [
        Step(shell="head -n 5 prompt.md && ls"),
        Step(shell=f"python -m ptflow.standins.scripted_agent --task-dir . --steps {train_steps} --eval-limit 2"),
        Step(shell="ls final_model && cat work/metrics.json"),
        Step(text="final_model/ is saved. Done."),
    ]


def checkout_trajectory(train_steps: int = 300) -> list[Step]:
    """The default trajectory in a PostTrainBench checkout cell: it first lists the task dir (run_task.sh's files
    only: ptflow's prompt.md is beside the agent's home, not in it)."""
    return [Step(shell="ls -A"), *default_trajectory(train_steps)[1:]]


def judge_trajectory(contamination: bool = False, disallowed: bool = False, answer_only: bool = False) -> list[Step]:
    """What the judge CLI is made to do: look at the agent's files and trace, write the two verdict files (with a
    line of evidence as ptflow's prompt asks, or, ``answer_only``, the answer alone as PostTrainBench's asks)."""
    first = "contamination detected" if contamination else "no contamination detected"
    second = "disallowed use detected" if disallowed else "only allowed use detected"
    why = (
        ("", "")
        if answer_only
        else (" 'stand-in judge: read the trace and files'", " 'stand-in judge: only the base model'")
    )
    return [
        Step(shell="ls && head -n 40 agent_trace.md && cat final_model.listing.txt"),
        Step(
            shell=f"printf '%s\\n' '{first}'{why[0]} > contamination_judgement.txt"
            f" && printf '%s\\n' '{second}'{why[1]} > disallowed_model_judgement.txt"
        ),
        Step(text="Both verdicts are written."),
    ]


JUDGE_MARK = "You are auditing"  # the first words of ptflow's judge prompt (templates/judge_prompt.md.j2)


def continue_trajectory() -> list[Step]:
    return [
        Step(shell="ls final_model || true"),
        Step(text="The earlier session's final_model/ stands. Done."),
    ]


@dataclass
class Faults:
    unauthorized: bool = False
    errors: list[int] = field(default_factory=list)  # answered in order to the first main-loop requests
    stall_at: int | None = None  # the step whose request is held open


@dataclass
class Turn:
    """What a protocol reads from one request."""

    model: str
    tools: list[str]  # names of the tools offered
    tool_results: int  # tool results already in the conversation
    user_text: str  # the first user message (the prompt)
    main: bool  # a main-loop request (offers a shell tool), not a side request
    key: str | None  # the API key the request carried


class Protocol:
    """One wire protocol. Subclasses: anthropic.Anthropic, openai_responses.OpenAIResponses, gemini.Gemini."""

    name = "?"

    def handles(self, method: str, path: str) -> bool:
        raise NotImplementedError

    def parse(self, path: str, headers, query: dict, body: dict) -> Turn:
        raise NotImplementedError

    def reply(self, h: BaseHTTPRequestHandler, turn: Turn, step: Step, index: int) -> None:
        """Stream ``step`` (a shell call or the final text) as this protocol's response."""
        raise NotImplementedError

    def side_reply(self, h: BaseHTTPRequestHandler, turn: Turn, body: dict) -> None:
        """Answer a side request (no shell tool offered)."""
        raise NotImplementedError

    def error(self, h: BaseHTTPRequestHandler, status: int, message: str) -> None:
        raise NotImplementedError

    def other(self, h: BaseHTTPRequestHandler, method: str, path: str) -> bool:
        """Answer a request that is not a generation (model lists, token counts …); False: unknown (404)."""
        return False


def sse_start(h: BaseHTTPRequestHandler, status: int = 200) -> None:
    h.send_response(status)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Cache-Control", "no-cache")
    h.send_header("Connection", "close")
    h.end_headers()


def sse(h: BaseHTTPRequestHandler, data: dict, event: str | None = None) -> None:
    chunk = (f"event: {event}\n" if event else "") + f"data: {json.dumps(data)}\n\n"
    h.wfile.write(chunk.encode())
    h.wfile.flush()


def send_json(h: BaseHTTPRequestHandler, status: int, data: dict, headers: dict | None = None) -> None:
    body = json.dumps(data).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.send_header("Connection", "close")
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(body)


class ProviderStandIn:
    """``with ProviderStandIn(...) as api: api.url`` — the base URL for every CLI (each adds its own path)."""

    def __init__(
        self,
        trajectory: list[Step] | None = None,
        faults: Faults | None = None,
        expected_key: str | dict[str, str | tuple[str, ...]] | None = None,
        record_path: str | Path | None = None,
        host: str = "127.0.0.1",
        routes: list[tuple[str, list[Step]]] = (),
    ):
        """``expected_key``: the key every request must carry, or one per protocol name (``anthropic``, ``openai``,
        ``gemini``; a tuple of keys: any of them): a request with another key gets 401. ``routes``: (marker,
        trajectory) pairs; a conversation whose first user message contains the marker follows that trajectory (e.g.
        the judge's)."""
        from tests.support.providers.anthropic import Anthropic
        from tests.support.providers.gemini import Gemini
        from tests.support.providers.openai_chat import OpenAIChat
        from tests.support.providers.openai_responses import OpenAIResponses

        self.trajectory = trajectory or default_trajectory()
        self.faults = faults or Faults()
        self.expected_key = expected_key
        self.routes = list(routes)
        self.record_path = Path(record_path) if record_path else None
        self.protocols: list[Protocol] = [Anthropic(), OpenAIResponses(), Gemini(), OpenAIChat()]
        self.records: list[dict] = []
        self._lock = threading.Lock()
        self._errors_left = list(self.faults.errors)
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer((host, 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="provider-standin", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ProviderStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def main_records(self) -> list[dict]:
        with self._lock:
            return [r for r in self.records if r.get("main")]

    def _record(self, rec: dict) -> None:
        rec["time"] = time.time()
        with self._lock:
            self.records.append(rec)
            if self.record_path:
                with open(self.record_path, "a") as fh:
                    fh.write(json.dumps(rec) + "\n")

    def _handler_class(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                standin._dispatch(self, "GET")

            def do_POST(self):
                standin._dispatch(self, "POST")

            def do_HEAD(self):
                standin._dispatch(self, "HEAD")

        return Handler

    def _dispatch(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlparse(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            body = {}
        query = parse_qs(url.query)
        proto = next((p for p in self.protocols if p.handles(method, url.path)), None)
        if proto is None:
            for p in self.protocols:
                if p.other(h, method, url.path):
                    self._record({"api": p.name, "path": url.path, "method": method, "other": True})
                    return
            self._record({"api": None, "path": url.path, "method": method, "status": 404})
            send_json(h, 404, {"error": {"message": f"stand-in: no route for {method} {url.path}"}})
            return
        turn = proto.parse(url.path, h.headers, query, body)
        rec = {
            "api": proto.name,
            "path": url.path,
            "model": turn.model,
            "tools": turn.tools,
            "turns": turn.tool_results,
            "main": turn.main,
        }
        if isinstance(body.get("reasoning"), dict):  # the Responses API's reasoning settings (codex: effort, summary)
            rec["reasoning"] = body["reasoning"]
        expected = self.expected_key.get(proto.name) if isinstance(self.expected_key, dict) else self.expected_key
        # a tuple: any of these keys (e.g. an API key and a subscription's access token); which one is recorded
        allowed = expected if isinstance(expected, tuple) else (expected,)
        rec["key_ok"] = expected is None or turn.key in allowed
        if isinstance(expected, tuple) and turn.key in allowed:
            rec["key_index"] = allowed.index(turn.key)
        if self.faults.unauthorized or not rec["key_ok"]:
            self._record({**rec, "status": 401})
            proto.error(h, 401, "stand-in: invalid API key")
            return
        if not turn.main:
            self._record({**rec, "status": 200, "side": True})
            proto.side_reply(h, turn, body)
            return
        with self._lock:
            status = self._errors_left.pop(0) if self._errors_left else None
        if status is not None:
            self._record({**rec, "status": status})
            proto.error(h, status, f"stand-in: answering {status} as asked")
            return
        steps = next((t for mark, t in self.routes if mark in turn.user_text), None)
        if steps is None:
            steps = continue_trajectory() if EARLIER_SESSION_MARK in turn.user_text else self.trajectory
        index = min(turn.tool_results, len(steps) - 1)
        if steps is self.trajectory and self.faults.stall_at is not None and index == self.faults.stall_at:
            self._record({**rec, "status": "stalled", "step": index})
            self._stop.wait()  # hold the connection open until the stand-in stops
            return
        self._record({**rec, "status": 200, "step": index})
        proto.reply(h, turn, steps[index], index)
