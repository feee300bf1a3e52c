"""API keys and tokens: ptflow handles their *names* only. Values stay in the environment, never in argv, files,
job scripts or logs; anything ptflow writes into a script is refused when its name looks like a secret."""

from __future__ import annotations

SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


def looks_like_secret(name: str) -> bool:
    """An environment variable name that probably holds a secret (HF_TOKEN, OPENAI_API_KEY, DB_PASSWORD ...)."""
    return any(word in name.upper() for word in SECRET_WORDS)


def refuse_secrets(env: dict, where: str) -> None:
    """Raise when ``env`` (about to be written into ``where``) names a variable that looks like a secret."""
    for key in env:
        if looks_like_secret(key):
            raise ValueError(
                f"env {key!r} looks like a secret and would be written into {where}; secrets reach jobs through "
                "the environment they inherit, never a rendered file — remove it from the site/launcher env"
            )
