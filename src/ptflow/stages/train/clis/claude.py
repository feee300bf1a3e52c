"""claude (@anthropic-ai/claude-code), as PostTrainBench's agents/claude/solve.sh runs it."""

from __future__ import annotations

from ptflow.stages.train.clis.base import AgentCli, CellHome


def write_home(home: CellHome, ctx: dict) -> dict[str, str]:
    return {}  # TODO(helper)


def trace_lines(ev: dict) -> list[str] | None:
    return None  # TODO(helper)


CLAUDE = AgentCli(
    name="claude",
    npm_package="@anthropic-ai/claude-code",
    pinned="2.0.55",
    binary="claude",
    key_var="ANTHROPIC_API_KEY",
    accepted_keys=("ANTHROPIC_API_KEY",),
    base_url_var="ANTHROPIC_BASE_URL",
    command=("claude", "--print", "--verbose", "--output-format", "stream-json", "--dangerously-skip-permissions",
             "--model", "{model}", "{prompt}"),  # fmt: skip
    write_home=write_home,
    trace_lines=trace_lines,
    env={"BASH_MAX_TIMEOUT_MS": "36000000"},
)
