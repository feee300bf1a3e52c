"""An agent's stream made readable: its stdout (the CLI's JSONL events, or plain text) and stderr as markdown, the
keys' values masked. A cli-agent cell's ``trace.md`` (what its judges read) and a judge's own ``judge_trace.md`` are
written with it; each CLI's events are shown by that CLI's parser (``ptflow.stages.train.agent.clis``), other
shapes (the scripted agent's) generically."""

from __future__ import annotations

import json

from ptflow.keys import Masker

MAX_FIELD = 2000  # characters of one tool input/output kept in trace.md


def _clip(text: str, n: int = MAX_FIELD) -> str:
    return text if len(text) <= n else text[:n] + f"… [{len(text) - n} more characters]"


def _event_lines(ev: dict) -> list[str]:
    """One stream-json event (claude/gemini/codex style) as markdown lines; unknown shapes as compact JSON."""
    kind = ev.get("type", "event")
    msg = ev.get("message") if isinstance(ev.get("message"), dict) else None
    content = msg.get("content") if msg else ev.get("content")
    out = []
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text":
                out.append(f"**{kind}**: {_clip(str(part.get('text', '')))}")
            elif part.get("type") == "tool_use":
                out.append(f"**tool call `{part.get('name')}`**: `{_clip(json.dumps(part.get('input'), default=str))}`")
            elif part.get("type") == "tool_result":
                body = part.get("content")
                body = body if isinstance(body, str) else json.dumps(body, default=str)
                out.append(f"**tool result**:\n```\n{_clip(body)}\n```")
    elif isinstance(content, str):
        out.append(f"**{kind}**: {_clip(content)}")
    elif "text" in ev:
        out.append(f"**{kind}**: {_clip(str(ev['text']))}")
    if not out:
        out.append(f"`{_clip(json.dumps(ev, default=str), 500)}`")
    return out


def readable_trace(stdout: str, stderr: str = "", redact: Masker | tuple[str, ...] = (), cli: str | None = None) -> str:
    """The agent's stdout (JSONL events or plain text) and stderr as markdown; ``redact`` (a :class:`Masker`, or
    values) masks the keys' values as ***.
    ``cli``: the agent CLI whose stream format the events are in (``ptflow.stages.train.agent.clis``); other shapes (the
    scripted agent's) are read generically."""
    from ptflow.stages.train.agent.clis import CLIS

    parser = CLIS[cli].trace_lines if cli in CLIS else None
    lines = ["# Agent trace", ""]
    text_block: list[str] = []

    def flush():
        if text_block:
            lines.extend(["```", *text_block, "```", ""])
            text_block.clear()

    for raw in stdout.splitlines():
        s = raw.strip()
        ev = None
        if s.startswith("{"):
            try:
                ev = json.loads(s)
            except json.JSONDecodeError:
                ev = None
        if isinstance(ev, dict):
            flush()
            shown = parser(ev) if parser else None
            if shown == []:  # an event the CLI's parser shows as nothing (turn markers)
                continue
            lines.extend(_event_lines(ev) if shown is None else shown)
            lines.append("")
        else:
            text_block.append(raw)
    flush()
    if stderr.strip():
        lines += ["## stderr", "", "```", _clip(stderr, 20000), "```", ""]
    masker = redact if isinstance(redact, Masker) else Masker(redact)
    return masker.mask("\n".join(lines))
