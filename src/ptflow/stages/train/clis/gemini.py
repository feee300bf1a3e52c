"""gemini (@google/gemini-cli), as PostTrainBench's agents/gemini/solve.sh runs it."""

from __future__ import annotations

from ptflow.stages.train.clis.base import AgentCli, CellHome


def write_home(home: CellHome, ctx: dict) -> dict[str, str]:
    return {}  # TODO(helper)


def trace_lines(ev: dict) -> list[str] | None:
    return None  # TODO(helper)


GEMINI = AgentCli(
    name="gemini",
    npm_package="@google/gemini-cli",
    pinned="0.18.4",
    binary="gemini",
    key_var="GEMINI_API_KEY",
    accepted_keys=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    base_url_var="GOOGLE_GEMINI_BASE_URL",
    command=("gemini", "--yolo", "--output-format", "stream-json", "--model", "{model}", "--prompt", "{prompt}"),
    write_home=write_home,
    trace_lines=trace_lines,
    env={"GEMINI_SANDBOX": "false"},
)
