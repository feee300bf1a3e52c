"""An agent cell of a PostTrainBench eval: task dir, home and prompt as the checkout's ``src/run_task.sh`` makes them.

Layout of a checkout cell (``ptflow.stages.train.agent.task_dir.make_task_dir``), under node-local tmp::

    ptflow-agent-<id>-XXXX/          ptflow's own files: prompt.md, task.json, deadline (data/ when a split is given)
        home/                        the agent's home: run_task.sh's ${JOB_DIR}, /home/ben in a container
            .codex/  agent_solve.sh  [oauth_token]  (+ ptflow's CLI settings, tmp/)
            task/                    the agent's task dir and working directory (/home/ben/task in a container)

Into the task dir, nothing but run_task.sh's copies: the eval's ``evaluate.py``, its ``evaluation_code/``, the
checkout's ``templates/``, the files of its ``task_context/``, and ``timer.sh`` from ``src/utils/create_timer.sh``
(for a whole number of hours, as PostTrainBench's budgets are; a resumed cell's fractional remainder gets a timer of
ours with the same output and deadline). Into the home: the checkout's ``containers/other_home_data/.codex``,
``agents/<agent>/solve.sh`` as ``agent_solve.sh``, and that agent dir's ``auth.json`` (into ``.codex/``) and
``oauth_token`` where present; from a checkout with main's judges, ``contamination_check.py`` and the eval's
``test_data.json`` (main's run_task.sh). The prompt is the output of ``src/eval/general/get_prompt.py`` run in the
checkout with the cell's model id, eval dir, hours, GPUs and agent name, as ``PROMPT=$(...)`` leaves it (no trailing
newline).
The real CLIs run ``agent_solve.sh`` with the variables run_task.sh gives it (``PROMPT``, ``AGENT_CONFIG``,
``NUM_GPUS``, ``VLLM_API_KEY``, ``PYTHONNOUSERSITE``, ``HF_HOME``, its ``PATH``); ptflow keeps its own timeout,
runtime, HF view, workspace sync, resume, key scoping and CLI settings around it.

``CheckoutTask`` is this task as the generic cell calls it (``ptflow.stages.agent_task.AgentTask``; ptflow's own
task is ``ptflow.stages.train.agent.own_task.OwnTask``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from ptflow.cluster.runtime import home_problem, writes_under_home  # noqa: F401 (the cell's check; tests ask here)
from ptflow.config import posttrainbench as ptb
from ptflow.config import ptb_keys
from ptflow.config.agent_clis import CONTAINER_HOME
from ptflow.keys import NOT_SECRETS, PUBLIC_VALUES, looks_like_secret
from ptflow.specs import AgentCliSpec
from ptflow.stages.agent_task import TaskSetup

PROMPT_TIMEOUT_S = 120
SOLVE_NAME = "agent_solve.sh"  # where run_task.sh puts agents/<agent>/solve.sh (beside the task dir, in the home)
HOME_NAME = "home"  # the agent's home (run_task.sh's ${JOB_DIR}) in the cell dir, beside ptflow's own files
TASK_NAME = "task"  # the agent's task dir in its home (${JOB_DIR}/task)
AGENT_FILES = ("auth.json", "oauth_token")  # agents/<agent>/ files run_task.sh copies into the home when present


class CheckoutAgentError(RuntimeError):
    """The checkout's task dir or prompt could not be made (one line)."""


def checkout_of(marker: str | None) -> Path | None:
    """The checkout's place, from the rule's marker input (``ptflow.stages.posttrainbench.checkout``); None without."""
    return Path(json.loads(Path(marker).read_text())["path"]) if marker else None


def _copy(src: Path, dest: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copyfile(src, dest)


def task_script(eval_dir: str, checkout: Path, environ: dict) -> str:
    """run_task.sh's EVAL_SCRIPT, which it copies as the task's ``evaluate.py``: ``evaluate.py``, or with main's
    allowlist (run_task.sh at 06b716e) ``evaluate_openrouter.py`` under the OpenRouter judge backend (the sandbox then
    holds OPENROUTER_API_KEY: ``ptflow.config.ptb_keys``). CheckoutAgentError (one line) where the checkout lacks it."""
    if not (ptb_keys.allowlist_checkout(checkout) and ptb_keys.openrouter_backend(eval_dir, environ)):
        return "evaluate.py"
    problem = ptb_keys.task_script_problem(ptb_keys.tree_reader(checkout), eval_dir, environ)
    if problem:
        raise CheckoutAgentError(problem)
    return ptb_keys.OPENROUTER_EVAL_SCRIPT


def fill_task_dir(
    task_dir: Path,
    agent: AgentCliSpec,
    checkout: Path,
    hours: float,
    deadline: float | None = None,
    env: dict | None = None,
):
    """run_task.sh's copies from ``checkout`` into ``task_dir`` (over a restored workspace: its own files come back
    fresh), and its timer: ``create_timer.sh`` for whole hours, else (a resumed cell's remainder) ours, ending at
    ``deadline``. ``env``: where the keys come from (the judge backend picks the task's evaluate.py; None: this
    process's)."""
    spec = agent.posttrainbench
    source = checkout / ptb.EVAL_DIR.format(eval=spec.eval_dir)
    script = task_script(spec.eval_dir, checkout, os.environ if env is None else env)
    _copy(source / script, task_dir / "evaluate.py")
    if (source / "evaluation_code").is_dir():
        _copy(source / "evaluation_code", task_dir / "evaluation_code")
    _copy(checkout / ptb.TEMPLATES_DIR, task_dir / "templates")
    if (source / "task_context").is_dir():
        for item in sorted((source / "task_context").iterdir()):
            _copy(item, task_dir / item.name)
    timer = task_dir / "timer.sh"
    if float(hours) != int(hours) or hours < 1:
        # create_timer.sh takes whole hours (bash arithmetic): the remainder's timer prints what its timer prints
        end = int(deadline if deadline is not None else time.time() + hours * 3600)
        timer.write_text(TIMER_SH.replace("@DEADLINE@", str(end)))
        timer.chmod(0o755)
        return
    proc = subprocess.run(
        ["bash", str(checkout / ptb.TIMER_SCRIPT), str(int(hours)), str(timer)],
        capture_output=True, text=True, timeout=PROMPT_TIMEOUT_S,
    )  # fmt: skip
    if proc.returncode != 0:
        raise CheckoutAgentError(f"{ptb.TIMER_SCRIPT} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")


# A resumed cell's timer (ours): the output of create_timer.sh's timer, which the reprompting solve.sh variants parse
# (an "expired" line, else "H:MM" on the line after the heading).
TIMER_SH = """#!/bin/bash
# written by ptflow: the time left of this agent cell's budget (a resumed cell's remainder), as timer.sh prints it
LEFT=$(( @DEADLINE@ - $(date +%s) ))
if [ "$LEFT" -le 0 ]; then
    echo "Timer expired!"
else
    echo "Remaining time (hours:minutes):"
    printf "%d:%02d\\n" $(( LEFT / 3600 )) $(( (LEFT % 3600) / 60 ))
fi
"""


def prompt(agent: AgentCliSpec, checkout: Path, model_id: str, hours: float, env: dict | None = None) -> str:
    """``get_prompt.py`` of the checkout, run there (it reads its files relative to the checkout's root), as bash's
    ``$(...)`` passes it on."""
    spec = agent.posttrainbench
    argv = [
        sys.executable, ptb.PROMPT_SCRIPT, "--model-to-train", model_id, "--benchmark-id", spec.eval_dir,
        "--num-hours", f"{hours:g}", "--num-gpus", str(spec.num_gpus),
        "--agent", spec.solve or agent.cli,
    ]  # fmt: skip
    environ = {k: v for k, v in (env or os.environ).items() if k in ("PATH", "LANG", "LC_ALL", "TZ", "HOME")}
    if (env or os.environ).get("POST_TRAIN_BENCH_PROMPT"):  # PostTrainBench's own switch of prompt text
        environ["POST_TRAIN_BENCH_PROMPT"] = (env or os.environ)["POST_TRAIN_BENCH_PROMPT"]
    proc = subprocess.run(argv, cwd=checkout, env=environ, capture_output=True, text=True, timeout=PROMPT_TIMEOUT_S)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise CheckoutAgentError(
            f"{ptb.PROMPT_SCRIPT} of the checkout exited {proc.returncode} with "
            f"{'no prompt' if not proc.stdout.strip() else 'output'}: {proc.stderr.strip()[-300:]}"
        )
    return proc.stdout.rstrip("\n")  # run_task.sh's PROMPT=$(...): command substitution drops trailing newlines


def install_home(agent: AgentCliSpec, checkout: Path, home: Path) -> None:
    """run_task.sh's copies into the job dir, which is the agent's home: the checkout's ``.codex`` from
    ``containers/other_home_data`` (ptflow's codex settings are merged into its config.toml afterwards), and for
    an agent running a solve.sh: it as ``agent_solve.sh``, ``auth.json`` into ``.codex/``, ``oauth_token``."""
    codex = checkout / ptb.HOME_DATA_DIR / ".codex"
    if codex.is_dir():
        _copy(codex, home / ".codex")
    install_decontamination(agent, checkout, home)
    solve = agent.posttrainbench.solve
    if not solve or agent.command:
        return
    install_solve(agent, checkout, home)
    source = checkout / ptb.AGENT_DIR.format(agent=solve)
    for name in AGENT_FILES:
        if (source / name).is_file():
            dest = home / ".codex" / name if name == "auth.json" else home / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, dest)


def install_decontamination(agent: AgentCliSpec, checkout: Path, home: Path) -> None:
    """PostTrainBench main's run_task.sh (a checkout with main's judges, src/judges/): the agent's self-decontamination
    tooling, the contamination judge's n-gram checker and the eval's test_data.json, into the home at the paths the
    judge gets them (``ptflow.stages.posttrainbench.judge_main``); the eval without a test_data.json is refused, as
    run_task.sh refuses it before its agent."""
    from ptflow.stages.posttrainbench import judge_main

    checker = checkout / judge_main.CHECKER
    if not checker.is_file():
        return
    test_data = checkout / judge_main.TEST_DATA.format(eval=agent.posttrainbench.eval_dir)
    if not test_data.is_file():
        raise CheckoutAgentError(f"{test_data.relative_to(checkout)} not found — required for the agent's "
                                 "decontamination tooling (PostTrainBench main's run_task.sh)")  # fmt: skip
    shutil.copyfile(checker, home / "contamination_check.py")
    shutil.copyfile(test_data, home / "test_data.json")


def install_solve(agent: AgentCliSpec, checkout: Path, home: Path) -> Path:
    """The checkout's ``agents/<agent>/solve.sh`` as ``agent_solve.sh`` in the cell's home (run_task.sh's place)."""
    src = checkout / ptb.AGENT_DIR.format(agent=agent.posttrainbench.solve) / "solve.sh"
    if not src.is_file():
        raise CheckoutAgentError(f"the PostTrainBench checkout has no {src.relative_to(checkout)}")
    dest = home / SOLVE_NAME
    shutil.copyfile(src, dest)
    return dest


def check_home(agent: AgentCliSpec, checkout: Path, runtime_kind: str) -> None:
    """The cell's own check before the agent starts (the checkout may have been cloned by the rule after
    preflight): the line of :func:`home_problem` as a :class:`CheckoutAgentError`."""
    solve = agent.posttrainbench.solve
    if not solve or agent.command:
        return
    src = checkout / ptb.AGENT_DIR.format(agent=solve) / "solve.sh"
    problem = home_problem(agent.id, solve, src.read_text() if src.is_file() else "", runtime_kind)
    if problem:
        raise CheckoutAgentError(problem)


def solve_environment(agent: AgentCliSpec, prompt_text: str, home: str, path: str) -> dict[str, str]:
    """The variables run_task.sh passes solve.sh (besides the keys, which ptflow scopes, and HF_HOME, the cell's
    HF view): its PATH puts ``/root/.local/bin`` and the home's ``.local/bin`` first. No HF_HUB_OFFLINE: the prompt
    tells the agent it may use the internet, and agents download data."""
    return {
        "PATH": f"/root/.local/bin:{home}/.local/bin:{path}",
        "PROMPT": prompt_text,
        "AGENT_CONFIG": str(agent.model),
        "NUM_GPUS": str(agent.posttrainbench.num_gpus),
        "VLLM_API_KEY": "inspectai",
        "PYTHONNOUSERSITE": "1",
    }


def sandbox_keys(agent: AgentCliSpec, checkout: Path, environ: dict[str, str]) -> ptb_keys.SandboxKeys | None:
    """The keys the agent's sandbox holds where the checkout's are main's allowlist (``ptflow.config.ptb_keys``:
    its ``agents/<agent>/api_keys.json``, ``<agent>`` being the solve dir, else the CLI's name as the prompt's
    ``--agent``), checked; None for a fixed-list checkout. CheckoutAgentError (one line) where a file is missing or
    a key the task requires is not set."""
    if checkout is None or not ptb_keys.allowlist_checkout(checkout):
        return None
    spec = agent.posttrainbench
    try:
        keys = ptb_keys.sandbox_keys(ptb_keys.tree_reader(checkout), spec.solve or agent.cli, spec.eval_dir, environ)
    except ptb_keys.SandboxKeysError as exc:
        raise CheckoutAgentError(str(exc)) from None
    problem = keys.problem(environ)
    if problem:
        raise CheckoutAgentError(problem)
    return keys


@dataclass(frozen=True)
class CheckoutTask:
    """A PostTrainBench checkout's task (``ptflow.stages.agent_task.AgentTask``), from ``checkout``: the task dir is
    run_task.sh's, in the agent's home (``home/task`` in the cell's dir), with ptflow's own files beside that home;
    the home is the cell's for every attempt (removed with the cell's dir) and holds run_task.sh's copies; an agent
    running the checkout's solve.sh gets it as its command, with run_task.sh's variables; the hub is online (the
    prompt: internet unrestricted)."""

    checkout: Path | None

    task_files = ()  # (ptflow's own files are beside the home, not in the task dir)
    empty_data_dir = False  # data/ only with a train split
    keeps_whole = True  # the checkout's judge runs in the task dir as run_task.sh leaves it

    def task_dir(self, cell_dir: Path) -> Path:
        return cell_dir / HOME_NAME / TASK_NAME

    def own_dir(self, task_dir: Path) -> Path:
        return task_dir.parent.parent

    def fill(self, task_dir: Path, setup: TaskSetup) -> None:
        """run_task.sh's copies and timer."""
        fill_task_dir(task_dir, setup.agent, self.checkout, setup.hours, setup.deadline, setup.env)

    def prompt(self, task_dir: Path, setup: TaskSetup, train_data: Path | None) -> str:
        """The checkout's own (its get_prompt.py)."""
        text = prompt(setup.agent, self.checkout, setup.cell.model, setup.hours)
        if setup.earlier:  # (PostTrainBench restarts nothing: ptflow's note for a cell that continues a workspace)
            text += (
                f"\nNote: {setup.earlier} worked in this directory before; its files are here. "
                f"{setup.hours_text} remain.\n"
            )
        return text

    @contextmanager
    def home(self, task_dir: Path) -> Iterator[Path]:
        """run_task.sh's job dir, which holds the task dir (kept: removed with the cell's dir)."""
        yield task_dir.parent

    def task_seen(self, task_dir: Path, host_home: Path, home: str, bound: bool) -> str:
        """In its home: /home/ben/task in a container that binds the home."""
        return f"{home}/{task_dir.relative_to(host_home)}" if bound else str(task_dir)

    def task_binds(self, task_dir: Path, bound: bool) -> list[str]:
        return [] if bound else [str(task_dir)]

    def hf_mount(self, host_home: Path, bound: bool) -> str | None:
        """run_task.sh's HF_HOME_NEW in a bound home (its mount point made there)."""
        if not bound:
            return None
        (host_home / "hf_cache").mkdir(exist_ok=True)
        return f"{CONTAINER_HOME}/hf_cache"

    def install(self, agent: AgentCliSpec, host_home: Path, home: str, runtime_kind: str) -> AgentCliSpec:
        """run_task.sh's copies into its job dir (.codex, agent_solve.sh), checked first; an agent that runs the
        checkout's solve.sh gets it as its command (agents/<agent>/solve.sh, where run_task.sh puts it)."""
        check_home(agent, self.checkout, runtime_kind)
        install_home(agent, self.checkout, host_home)
        if agent.posttrainbench.solve and not agent.command:
            return replace(agent, command=["bash", f"{home}/{SOLVE_NAME}"])
        return agent

    def hub_env(self) -> dict[str, str]:
        return {}  # online: run_task.sh's prompt says the internet is unrestricted

    def agent_env(self, agent: AgentCliSpec, prompt: str, home: str, path: str) -> dict[str, str]:
        """run_task.sh's variables for solve.sh, where the agent runs it (no command of its own)."""
        if agent.posttrainbench.solve and not agent.command:
            return solve_environment(agent, prompt, home, path)
        return {}

    def sandbox_env(self, agent: AgentCliSpec, env: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
        """A checkout with main's key allowlist (:func:`sandbox_keys`): ``env``'s keys are exactly the union's that
        are set, with run_task.sh's values; every other secret-looking variable goes (ptflow's own names and
        run_task.sh's public VLLM_API_KEY stay). A fixed-list checkout (9082063, d27a95e): ptflow's key scoping as
        it is. CheckoutAgentError (one line) where a key the task requires is not set."""
        keys = sandbox_keys(agent, self.checkout, environ)
        if keys is None:
            return env
        kept = {k: v for k, v in env.items()
                if not looks_like_secret(k) or k in NOT_SECRETS or PUBLIC_VALUES.get(k) == v}  # fmt: skip
        return {**kept, **keys.values(environ)}
