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


# A repeated agent's cells: run 1 keeps the agent's id (so adding repeats reruns nothing that exists), run k >= 2 is
# ``<id>@run<k>``. The cell's "slot" is what its paths and the workflow's {agent} wildcard hold.
RUN_SEPARATOR = "@run"
SLOT_PATTERN = SAFE_ID_PATTERN + r"(?:@run[1-9][0-9]*)?"
_SLOT_RE = re.compile(rf"^(?P<agent>{SAFE_ID_PATTERN})(?:@run(?P<run>[1-9][0-9]*))?$")


def slot(agent_id: str, run: int = 1) -> str:
    return agent_id if run == 1 else f"{agent_id}{RUN_SEPARATOR}{run}"


def split_slot(value: str) -> tuple[str, int]:
    """``claude-opus-4-5@run2`` -> (``claude-opus-4-5``, 2); a plain agent id is run 1."""
    m = _SLOT_RE.match(value)
    if not m:
        raise NameError_(f"{value!r} is not an agent id or <agent>{RUN_SEPARATOR}<k> (k >= 2)")
    run = int(m.group("run") or 1)
    if run == 1 and m.group("run"):
        raise NameError_(f"{value!r}: run 1 of an agent is its plain id")
    return m.group("agent"), run
