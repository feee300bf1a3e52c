"""The API keys a PostTrainBench checkout's agent sandbox holds, where its sandbox keys part is the allowlist
(``ptflow.config.posttrainbench.KEYS_UNION``): the one place ptflow reads that union from the checkout's files.

PostTrainBench main's ``src/run_task.sh`` (read at 06b716ebcea458abd6f9b389cb84890d16255d0c) starts the agent's
apptainer sandbox with ``-c --cleanenv`` and ``--env K=${K}`` for exactly these names, in this order, each once:

1. ``agents/<agent>/api_keys.json``'s ``allowed_api_keys`` (the agent's; the file must exist: its python fails
   without it, and run_task.sh exits 1);
2. ``src/eval/tasks/<task>/info.json``'s ``required_api_keys`` (the task's graders'; default none);
3. ``OPENROUTER_API_KEY`` under the OpenRouter judge backend: the task is arenahardwriting or healthbench,
   ``OPENAI_API_KEY`` is unset and ``OPENROUTER_API_KEY`` is set (run_task.sh then copies
   ``evaluate_openrouter.py`` as the task's ``evaluate.py``).

The values are the host's after run_task.sh's own lines before it: ``export CODEX_API_KEY="${OPENAI_API_KEY}"`` and
``unset OPENAI_API_KEY``, ``OPENAI_API_KEY`` exported again only for arenahardwriting and healthbench. run_task.sh
passes an unset name as an empty value; ptflow passes only the names set (non-empty) in its environment, and refuses a
task's required key that is not set (except ``OPENAI_API_KEY`` under the OpenRouter backend, whose grader key is
``OPENROUTER_API_KEY``), in one line before the agent starts: at preflight where the checkout is on this filesystem,
else in the cell. An agent's allowed key that is not set is left out (run_task.sh's empty value), not refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ptflow.config.posttrainbench import KEYS_UNION, CheckoutError, git

API_KEYS_FILE = "agents/{agent}/api_keys.json"  # {"allowed_api_keys": [...]}
TASK_INFO_FILE = "src/eval/tasks/{eval}/info.json"  # {"required_api_keys": [...]} (absent: none)
GRADED_TASKS = ("arenahardwriting", "healthbench")  # OPENAI_API_KEY kept for them; their grader may be OpenRouter's
OPENAI_KEY, CODEX_KEY, OPENROUTER_KEY = "OPENAI_API_KEY", "CODEX_API_KEY", "OPENROUTER_API_KEY"
OPENROUTER_EVAL_SCRIPT = "evaluate_openrouter.py"  # run_task.sh's EVAL_SCRIPT under the OpenRouter backend

Reader = Callable[[str], "str | None"]  # a path in the checkout -> its text, None where it has no such file


class SandboxKeysError(ValueError):
    """The checkout's key files cannot give the union, or a key it requires is not set (one line)."""


def openrouter_backend(eval_dir: str, environ: Mapping[str, str]) -> bool:
    """run_task.sh's JUDGE_BACKEND=openrouter: a graded task, no OPENAI_API_KEY, an OPENROUTER_API_KEY."""
    return eval_dir in GRADED_TASKS and not environ.get(OPENAI_KEY) and bool(environ.get(OPENROUTER_KEY))


def host_keys(eval_dir: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The key values as run_task.sh holds them when it builds the sandbox's ``--env`` list: CODEX_API_KEY is
    OPENAI_API_KEY's value (whatever CODEX_API_KEY was), OPENAI_API_KEY only for the graded tasks."""
    out = dict(environ)
    out[CODEX_KEY] = environ.get(OPENAI_KEY, "")
    if eval_dir not in GRADED_TASKS:
        out.pop(OPENAI_KEY, None)
    return out


@dataclass(frozen=True)
class SandboxKeys:
    """The union for one agent and task, as read from the checkout's files, and the backend the environment picks."""

    agent: str  # the checkout's agents/<agent> dir
    eval_dir: str
    allowed: tuple[str, ...]  # agents/<agent>/api_keys.json
    required: tuple[str, ...]  # the task's info.json
    openrouter: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        """run_task.sh's ALLOWED_API_KEYS: the agent's, then the task's, first occurrence kept (+ OpenRouter's)."""
        union = list(dict.fromkeys([*self.allowed, *self.required]))
        return tuple(union + [OPENROUTER_KEY] if self.openrouter else union)

    def values(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The sandbox's keys: each name of the union that is set, with run_task.sh's value."""
        held = host_keys(self.eval_dir, environ)
        return {name: held[name] for name in self.names if held.get(name)}

    def problem(self, environ: Mapping[str, str]) -> str | None:
        """The one line refusing a required key that is not set, or None."""
        held = self.values(environ)
        missing = [k for k in self.required if k not in held and not (self.openrouter and k == OPENAI_KEY)]
        if not missing:
            return None
        key, info = missing[0], TASK_INFO_FILE.format(eval=self.eval_dir)
        alt = f" (or {OPENROUTER_KEY} alone, for its OpenRouter grader)" if key == OPENAI_KEY and (
            self.eval_dir in GRADED_TASKS) else ""  # fmt: skip
        return (
            f"environment variable {', '.join(missing)} is not set but the PostTrainBench checkout's {info} requires "
            f"it in agent {self.agent}'s sandbox (required_api_keys; run_task.sh passes the union of "
            f"{API_KEYS_FILE.format(agent=self.agent)} and it); export {key}{alt} before running, or drop eval "
            f"{self.eval_dir} from matrix.evals"
        )


def _names(text: str, path: str, field: str, default: list | None) -> tuple[str, ...]:
    try:
        data = json.loads(text)
        names = data.get(field, default) if isinstance(data, dict) else None
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise SandboxKeysError(
            f"the PostTrainBench checkout's {path} has no list of key names under {field!r} (run_task.sh reads its "
            "sandbox's key allowlist there); fix the file or pin another commit"
        )
    return tuple(names)


def sandbox_keys(read: Reader, agent: str, eval_dir: str, environ: Mapping[str, str]) -> SandboxKeys:
    """The union for ``agent`` (its agents/ dir) and ``eval_dir`` from the checkout's files (``read``); the backend
    from ``environ`` (set or not, never the values). SandboxKeysError (one line) for a missing or bad file."""
    agent_file, info_file = API_KEYS_FILE.format(agent=agent), TASK_INFO_FILE.format(eval=eval_dir)
    agent_text = read(agent_file)
    if agent_text is None:
        raise SandboxKeysError(
            f"the PostTrainBench checkout has no {agent_file}: its agents' sandboxes get only the keys their "
            f"api_keys.json allows (run_task.sh's allowlist), and agent {agent} has none; add the file or run one of "
            "the checkout's agents"
        )
    info_text = read(info_file)
    if info_text is None:
        raise SandboxKeysError(
            f"the PostTrainBench checkout has no {info_file}: run_task.sh reads the task's required_api_keys there; "
            f"add the file or drop eval {eval_dir}"
        )
    allowed = _names(agent_text, agent_file, "allowed_api_keys", None)
    required = _names(info_text, info_file, "required_api_keys", [])
    return SandboxKeys(agent, eval_dir, allowed, required, openrouter_backend(eval_dir, environ))


def task_script_problem(read: Reader, eval_dir: str, environ: Mapping[str, str]) -> str | None:
    """Under the OpenRouter backend run_task.sh copies the task's ``evaluate_openrouter.py`` as its evaluate.py: the
    one line refusing a checkout without it, else None."""
    path = f"src/eval/tasks/{eval_dir}/{OPENROUTER_EVAL_SCRIPT}"
    if not openrouter_backend(eval_dir, environ) or read(path) is not None:
        return None
    return (
        f"the PostTrainBench checkout has no {path}, which its run_task.sh copies as the task's evaluate.py where only "
        f"{OPENROUTER_KEY} is set (its OpenRouter grader); export {OPENAI_KEY} before running"
    )


def allowlist_checkout(checkout: Path) -> bool:
    """The checkout on disk has the allowlist (KEYS_UNION's fact: an ``agents/*/api_keys.json``); without one, the
    fixed list (KEYS_FIXED). Planning and the checkout rule have refused a checkout whose part is neither."""
    return any(Path(checkout).glob(KEYS_UNION.present[0]))


def tree_reader(checkout: Path) -> Reader:
    """The checkout's files as they are on disk (the cell's checkout, at its commit)."""

    def read(path: str) -> str | None:
        file = Path(checkout, path)
        return file.read_text() if file.is_file() else None

    return read


def commit_reader(checkout: str | Path, commit: str) -> Reader:
    """The checkout's files at ``commit`` (read with git: planning's view)."""

    def read(path: str) -> str | None:
        try:
            return git(checkout, "show", f"{commit}:{path}")
        except CheckoutError:
            return None

    return read
