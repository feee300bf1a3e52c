"""A CLI signed in with a subscription instead of an API key (config key judge's ``sign_in.credentials``; PostTrainBench
d27a95e's codex judges): its credentials file mounted where the CLI reads it, the API key variables emptied so the
CLI must use the subscription, and the token values the file holds, to be masked in everything kept.

The file itself is never copied: in a container it is bound onto an empty placeholder in the CLI's home (as
run_judge.sh binds ``auth.json`` onto ``/home/ben/.codex/auth.json``), on the host the home gets a symlink to it
(what the CLI refreshes goes to the user's file). Where a CLI reads it: ``ptflow.config.agent_clis.SIGN_IN_FILES``.
"""

from __future__ import annotations

import json
from pathlib import Path

from ptflow.config.agent_clis import SIGN_IN_FILES
from ptflow.keys import Masker


def subscription_secrets(credentials: str | Path) -> list[str]:
    """The values of a codex ``auth.json`` to mask in whatever the CLI leaves (its tokens, and an API key where it
    holds one): every string under ``tokens`` and ``OPENAI_API_KEY``. A missing or unreadable file has none."""
    try:
        data = json.loads(Path(credentials).read_text())
    except (OSError, ValueError):
        return []
    tokens = data.get("tokens") if isinstance(data, dict) else None
    values = [v for v in (tokens or {}).values() if isinstance(v, str)] if isinstance(tokens, dict) else []
    key = data.get("OPENAI_API_KEY") if isinstance(data, dict) else None
    return values + ([key] if isinstance(key, str) else [])


def masking(masker: Masker, credentials: str | Path | None) -> Masker:
    """``masker`` that also masks the sign-in's tokens (read when the CLI starts: what it rotates later is unknown,
    the earlier values are masked still); ``masker`` itself without a sign-in."""
    if not credentials:
        return masker
    return Masker([*masker.values, *subscription_secrets(credentials)], masker.unmasked)


def emptied_keys(cli: str) -> dict[str, str]:
    """The CLI's API key variables set empty (as run_judge.sh's ``--env CODEX_API_KEY= --env OPENAI_API_KEY=``):
    with a key set, codex would use it instead of the subscription."""
    from ptflow.stages.train.agent.clis import CLIS

    return dict.fromkeys(CLIS[cli].accepted_keys, "")


def mount(cli: str, credentials: str | Path, host_home: Path, home: str, container: bool) -> list[str]:
    """Put the sign-in where ``cli`` reads it in the home (``host_home`` here, ``home`` as the CLI sees it) and
    return the binds a runtime needs for it. ``container``: the home is bound at ``home`` (apptainer, pyxis): an
    empty placeholder that the bind ``file:<home>/<where>`` lands on. Else a symlink to the file (removing the home
    removes the link, never the file), and the file bound at its own path for a container that binds host paths
    as they are (enroot-edf; a venv site binds nothing)."""
    in_home, source = SIGN_IN_FILES[cli], Path(credentials).absolute()
    placeholder = host_home / in_home
    placeholder.parent.mkdir(parents=True, exist_ok=True)
    placeholder.unlink(missing_ok=True)
    if container:
        placeholder.write_bytes(b"")
        return [f"{source}:{home.rstrip('/')}/{in_home}"]
    placeholder.symlink_to(source)
    return [str(source)]
