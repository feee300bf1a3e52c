"""A local STAND-IN for the agents' LLM APIs (no provider is reachable from here): one HTTP server speaking the four
streaming wire protocols the real CLIs use, so the real ``claude``, ``codex``, ``gemini`` and ``opencode`` run
against it unchanged through their own base-URL settings. See ``server.py``."""

from tests.support.providers.server import Faults, ProviderStandIn, Step, default_trajectory

__all__ = ["Faults", "ProviderStandIn", "Step", "default_trajectory"]
