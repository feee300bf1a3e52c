"""codex (@openai/codex), as PostTrainBench's agents/codex/solve.sh runs it."""

from __future__ import annotations

from ptflow.stages.train.clis.base import AgentCli, CellHome


def write_home(home: CellHome, ctx: dict) -> dict[str, str]:
    return {}  # TODO(helper)


def trace_lines(ev: dict) -> list[str] | None:
    return None  # TODO(helper)


CODEX = AgentCli(
    name="codex",
    npm_package="@openai/codex",
    pinned="0.79.0",
    binary="codex",
    key_var="CODEX_API_KEY",
    accepted_keys=("CODEX_API_KEY", "OPENAI_API_KEY"),
    base_url_var="OPENAI_BASE_URL",
    command=("codex", "--search", "exec", "--json", "--skip-git-repo-check", "--yolo", "--model", "{model}",
             "{prompt}"),  # fmt: skip
    write_home=write_home,
    trace_lines=trace_lines,
)
