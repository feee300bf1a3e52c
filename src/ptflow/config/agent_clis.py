"""The facts about the agent CLIs that configuration, the image build and the cluster need: which CLIs there are, the
npm package and pinned version of each, its binary, where it sends its requests, the agent image's Node.js, the name
of the scripted stand-in agent and where the cell's home appears inside a container.

Only facts live here, each once. What acts on them (writing a CLI's settings into the cell's home, its environment,
reading its stream output, its judge command) is ``ptflow.stages.train.agent.clis``, which takes these facts from here:
config sits below stages, so the config's checks (``agent_clis`` pins, an agent's ``cli``) and the image recipes'
build arguments need no code that runs a CLI.
"""

from __future__ import annotations

from dataclasses import dataclass

NODE_MAJOR = 22  # the agent image's Node.js: satisfies the engines of every pinned CLI (gemini-cli's deps: >= 22)
SCRIPTED = "scripted"  # ptflow's scripted agent (ptflow.standins.scripted_agent), run like a CLI

# Where the agent cell's private home appears inside a container (apptainer ``--home <home>:/home/ben``, pyxis
# ``--container-mounts=<home>:/home/ben``): the path PostTrainBench's run_task.sh binds, which its solve.sh variants
# write under (codexhigh's ``/home/ben/.codex/config.toml``, claude_non_api's ``/home/ben/oauth_token``). The one
# place this path is written; ``ptflow.cluster.runtime.AGENT_HOME`` is this.
CONTAINER_HOME = "/home/ben"


@dataclass(frozen=True)
class CliPackage:
    """One agent CLI as installed: its npm package at PostTrainBench's pin, the binary it puts on PATH, and the host
    its requests go to by default (ptflow doctor's outbound check)."""

    name: str
    npm_package: str
    pinned: str  # PostTrainBench's pin (containers/standard.def at 9082063); config key agent_clis.<name>.version
    binary: str
    api_host: str


CLI_PACKAGES: dict[str, CliPackage] = {
    p.name: p
    for p in (
        CliPackage("claude", "@anthropic-ai/claude-code", "2.0.55", "claude", "api.anthropic.com"),
        CliPackage("codex", "@openai/codex", "0.79.0", "codex", "api.openai.com"),
        CliPackage("gemini", "@google/gemini-cli", "0.18.4", "gemini", "generativelanguage.googleapis.com"),
        # PostTrainBench pins opencode-ai@1.1.59 (containers/standard.def); the npm registry serves no 1.1.59
        # (404 for its metadata and tarball, 2026-11-29), so the pin is the release before it
        CliPackage("opencode", "opencode-ai", "1.1.58", "opencode", "opencode.ai"),
    )
}

# Where a CLI signed in with a subscription instead of an API key reads its credentials file, relative to its home
# (config key judge's sign_in.credentials): codex's ChatGPT sign-in, ``$CODEX_HOME/auth.json`` as ``codex login``
# writes it (a cell's CODEX_HOME is its home's .codex). The other CLIs' sign-ins are not known to ptflow.
SIGN_IN_FILES: dict[str, str] = {"codex": ".codex/auth.json"}


def build_arg(name: str) -> str:
    """The image recipes' build argument holding CLI ``name``'s version (envs/standard.def: CLAUDE_CLI_VERSION)."""
    return f"{name.upper()}_CLI_VERSION"
