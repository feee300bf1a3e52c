"""A FIXTURE ChatGPT sign-in of the codex CLI in its real ``auth.json`` format (what ``codex login`` writes: no API
key, the tokens, the id token a JWT with the plan and account claims codex reads; refreshed just now, so codex asks
for no refresh). The tests that sign the REAL codex in with it (a judge's ``sign_in``, PostTrainBench d27a95e's gpt
and api judges on the Slurm test cluster) give it fresh token values each session and then look for them in every
file the run left."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path


def _jwt(claims: dict) -> str:
    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.fixture-signature"


def write_codex_sign_in(path: Path, access_token: str, refresh_token: str) -> Path:
    """The sign-in at ``path`` (its dirs made), holding ``access_token`` (what codex sends as its bearer token) and
    ``refresh_token``."""
    claims = {"email": "fixture@example.invalid", "https://api.openai.com/auth": {
        "chatgpt_plan_type": "pro", "chatgpt_account_id": "acct-fixture-0001"}}  # fmt: skip
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    auth = {"OPENAI_API_KEY": None, "tokens": {"id_token": _jwt(claims), "access_token": access_token,
            "refresh_token": refresh_token, "account_id": "acct-fixture-0001"}, "last_refresh": now}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(auth, indent=2))
    return path
