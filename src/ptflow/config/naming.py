"""Path-safe names for models, evals and agents.

A Hugging Face repo id ``org/name`` becomes ``org--name``, the same convention the hub cache uses for its
``models--org--name`` folders. The hub forbids ``--`` and ``..`` inside repo ids, so the mapping is reversible.
"""

from __future__ import annotations

import re

# Hub repo ids: optional namespace, then a name; letters, digits, '-', '_', '.'; max 96 chars per part.
_REPO_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
REPO_ID_RE = re.compile(rf"^(?:{_REPO_PART}/)?{_REPO_PART}$")
# Eval and agent ids are used as path components and Snakemake wildcards as they are.
SAFE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
SAFE_ID_PATTERN = SAFE_ID_RE.pattern.strip("^$")
MODEL_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*(?:--[A-Za-z0-9][A-Za-z0-9._-]*)?"


class NameError_(ValueError):
    """A model, eval or agent id that cannot be used as a path component."""


def check_repo_id(repo_id: str) -> None:
    if not REPO_ID_RE.match(repo_id) or "--" in repo_id or ".." in repo_id or repo_id.endswith(".git"):
        raise NameError_(
            f"model id {repo_id!r} is not a Hugging Face repo id: use 'org/name' with letters, digits, '-', '_', "
            "'.' and no '--' or '..'"
        )


def model_to_path(repo_id: str) -> str:
    """``Qwen/Qwen3-1.7B-Base`` -> ``Qwen--Qwen3-1.7B-Base``."""
    check_repo_id(repo_id)
    return repo_id.replace("/", "--")


def path_to_model(name: str) -> str:
    """Inverse of :func:`model_to_path`."""
    repo_id = name.replace("--", "/", 1)
    if model_to_path(repo_id) != name:
        raise NameError_(f"{name!r} is not a path name made by model_to_path")
    return repo_id


def check_safe_id(kind: str, value: str) -> None:
    if not SAFE_ID_RE.match(value):
        raise NameError_(
            f"{kind} id {value!r} is not path-safe: start with a letter or digit, then letters, digits, "
            "'_', '.', '+', '-' (at most 64 characters)"
        )
