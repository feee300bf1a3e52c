"""PostTrainBench main's judges (``src/judges/``, ``judge_lib.sh`` read at 241d5564) as ptflow runs them: a panel of
four votes, each one judge of ``ALL_JUDGES`` run as ``judge_lib.sh`` runs it.

The facts (aisa-group/PostTrainBench, read from the search index; the protocol part that recognises them is
``ptflow.config.posttrainbench.JUDGES_MAIN``):

- ``judge_lib.sh`` @ 241d5564: ``ALL_JUDGES=(data_contamination_judge api_usage_judge ptb_lookup_judge
  general_judge)`` in that order; defaults ``JUDGE_DEFAULT_MODEL="gpt-5.6-terra"``, ``JUDGE_DEFAULT_REASONING_EFFORT=
  "xhigh"``, ``JUDGE_DEFAULT_CODEX_VERSION="0.144.5"`` (a judge.conf may override each; an empty codex version runs
  the container's codex), ``JUDGE_CONTAINER="gpt_5_5.sif"``. Each judge is the codex CLI signed in with a ChatGPT
  subscription (``agents/codex_non_api/auth.json`` bound onto ``/home/ben/.codex/auth.json``, ``forced_login_method =
  "chatgpt"`` added to the home's ``.codex/config.toml``, ``CODEX_API_KEY``/``OPENAI_API_KEY`` set empty), run as
  ``<codex_bin> --search -a never exec --json -c model_reasoning_summary=detailed -c model_reasoning_effort=<effort>
  --skip-git-repo-check --yolo --model <model> <prompt>`` under ``apptainer exec --containall`` with the home at
  ``/home/ben`` and ``--pwd /home/ben/task``; ``<codex_bin>`` is ``/home/ben/.codex-cli-<version>/bin/codex``, which
  ``npm install -g --prefix /home/ben/.codex-cli-<version> --no-fund --no-audit @openai/codex@<version>`` put there
  (in the same image; its absence afterwards fails the judge). The prompt: ``get_judge_prompt.py --judge <name>
  --benchmark-id <eval> --model <model> [--agent <agent>] [--agent-config <agent_config>]``. The home
  (``prepare_judge_sandbox`` and ``setup_judge_codex_auth``): ``task/`` (the task dir as the agent left it, no
  ``judgement.json``), the trace as ``solve_parsed.txt``, ``judge_tools/contamination_check.py``,
  ``model_identity_check.py`` and ``reference_configs/``, ``final_model_config.json``, the eval's ``test_data.json``
  where the checkout has one, and the checkout's ``containers/other_home_data/.codex``. The judge's verdict is its
  ``task/judgement.json``, kept as ``judgement_<JUDGE_OUTPUT_ID>.json``.
- judge.conf: ``data_contamination_judge`` @ be6b830b (``JUDGE_OUTPUT_ID="gpt5_4"``), ``api_usage_judge`` and
  ``ptb_lookup_judge`` @ da4b2b22 (``api``, ``ptb_lookup``); ``general_judge``'s judge.conf and prompt are not in
  the index: its output id ``general`` and its schema (``general_anomaly`` + justification) are those of
  src/judges/README.md and run_judges.sh in the index (file ids 59748369811, 60119628763; commits not shown).
- Effects (scripts/collect.py @ 1fc55616 with scripts/utils.py, index file id 69054510072; judge.conf @ da4b2b22): a
  contamination or disallowed-model flag, or a disallowed API use, scores the cell as the baseline; a true
  ``disallowed_ptb_lookup`` makes collect.py raise (``PTB-lookup judge fired ... Investigate this run before
  aggregating``): here the field's effect is ``stop`` (rule aggregate fails naming the cell and the field); the
  general verdict is recorded only (collect.py never reads judgement_general.json at 1fc55616), and a general judge
  without a verdict leaves the cell judged.
- How main reads a verdict (scripts/utils.py): the judgement file is a JSON object holding the judge's fields, each a
  JSON boolean (else a TypeError there: here ``no_verdict``).

What ptflow does differently: each judge gets a home of its own, as ``run_judges.sh --judges <one>`` gives it (run_task
.sh's inline judges share the agent's job dir, one after another); the judge job is a CPU job (run_task.sh's inline
judges get its ``--nv`` and HF cache binds, which ``run_judges.sh`` does not give); the pinned codex is installed by
the vote (the same npm command in the judge's image), or linked from ``posttrainbench.judge.codex_cli`` (a prefix
where ``@openai/codex@<version>`` is installed already: a site whose judge jobs cannot reach npm). The data
contamination judge votes once (run_task.sh's inline slot; best-of-3 ``run_contamination_judge_slot`` slots are
main's rerun pipeline's).

Everything here is data and pure functions (and the prompt script's run); the judge's room runs a vote with it
(``ptflow.stages.judge.ptb_vote``, through ``ptflow.stages.posttrainbench.judge_panels``).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ptflow.config import posttrainbench as ptb
from ptflow.config.judges import Judge, JudgePanel
from ptflow.stages.posttrainbench import judge_v11 as v11

PROTOCOL = ptb.JUDGES_MAIN.version  # the judges part's version, as the checkout marker records it
LABEL = "main"  # in the log and preflight lines ("PostTrainBench main")
JUDGES_DIR = ptb.MAIN_JUDGES_DIR  # src/judges
LIB = f"{JUDGES_DIR}/judge_lib.sh"
PROMPT_SCRIPT = f"{JUDGES_DIR}/get_judge_prompt.py"
CONF = JUDGES_DIR + "/{name}/judge.conf"
TOOLS = {  # name in the home -> path in the checkout (prepare_judge_sandbox)
    "contamination_check.py": f"{JUDGES_DIR}/judge_tools/contamination_check.py",
    "model_identity_check.py": f"{JUDGES_DIR}/judge_tools/model_identity_check.py",
    "reference_configs": f"{JUDGES_DIR}/judge_tools/reference_configs",
}
CHECKER = TOOLS["contamination_check.py"]  # also copied into the agent's home (run_task.sh), with test_data.json
TEST_DATA = v11.TEST_DATA
EVAL_INFO = v11.EVAL_INFO
IMAGE = "gpt_5_5"  # JUDGE_CONTAINER="gpt_5_5.sif"
CODEX_PACKAGE = "@openai/codex"
# judge_lib.sh's JUDGE_DEFAULT_* (a judge.conf may set JUDGE_MODEL, JUDGE_REASONING_EFFORT, JUDGE_CODEX_VERSION)
DEFAULT_MODEL, DEFAULT_EFFORT, DEFAULT_CODEX_VERSION = "gpt-5.6-terra", "xhigh", "0.144.5"
# the facts of judge_lib.sh ptflow reproduces (ptflow.config.posttrainbench.JUDGES_MAIN checks the checkout has them)
ALL_JUDGES_LINE = "ALL_JUDGES=(data_contamination_judge api_usage_judge ptb_lookup_judge general_judge)"

HOME, TASK, VERDICT_FILE, AUTH_IN_HOME = v11.HOME, v11.TASK, v11.VERDICT_FILE, v11.AUTH_IN_HOME
SUBSCRIPTION_AUTH, CODEX_HOME_SOURCE, FORCED_LOGIN = v11.SUBSCRIPTION_AUTH, v11.CODEX_HOME_SOURCE, v11.FORCED_LOGIN
PtbVerdictError = v11.PtbVerdictError


@dataclass(frozen=True)
class MainJudge:
    """One judge of ``ALL_JUDGES``: ptflow's id for it, its folder under src/judges/, its JUDGE_OUTPUT_ID, the
    fields it answers (each with a justification), what a flag of each does, and the codex settings it runs with
    (judge_lib.sh's defaults, or its judge.conf's: :func:`panel_judge` with the checkout)."""

    id: str
    name: str  # the folder (ALL_JUDGES), get_judge_prompt.py --judge <name>
    output_id: str  # judgement_<output_id>.json
    fields: tuple[str, ...]
    effect: str  # fallback | stop | record (ptflow.config.judges.EFFECTS), of each of its fields
    required: bool = True  # False: without a verdict it leaves the cell judged (the general judge: never read)
    model: str = DEFAULT_MODEL
    effort: str = DEFAULT_EFFORT
    codex_version: str = DEFAULT_CODEX_VERSION  # "": the image's codex (judge_lib.sh's empty override)
    cli = "codex"
    subscription = True  # every judge: codex on the ChatGPT sign-in
    key = None

    @property
    def justifications(self) -> tuple[str, ...]:
        return tuple(f"justification_{f}" for f in self.fields)

    @property
    def pin(self) -> str | None:
        """The pinned codex's prefix in the home (``.codex-cli-<version>``), or None: the image's codex."""
        return f".codex-cli-{self.codex_version}" if self.codex_version else None

    def prompt_argv(self, eval_dir: str, model_id: str, agent: str = "", agent_config: str = "",
                    python: str = "python") -> list[str]:  # fmt: skip
        """build_judge_prompt's ``python get_judge_prompt.py --judge <name> --benchmark-id <eval> --model <id>``,
        ``--agent``/``--agent-config`` where given (run from the checkout's root)."""
        argv = [python, PROMPT_SCRIPT, "--judge", self.name, "--benchmark-id", eval_dir, "--model", model_id]
        return argv + (["--agent", agent] if agent else []) + (["--agent-config", agent_config] if agent_config else [])

    def codex_bin(self, home: str) -> str:
        """run_judge_exec's ``$codex_bin``: the pinned install in the home (``home``: the home as the CLI sees it),
        else the image's ``codex``."""
        return f"{home}/{self.pin}/bin/codex" if self.pin else "codex"

    def argv(self, prompt: str, home: str = HOME) -> list[str]:
        """The CLI's command line inside the container, as run_judge_exec gives it."""
        return [self.codex_bin(home), "--search", "-a", "never", "exec", "--json", "-c",
                "model_reasoning_summary=detailed", "-c", f"model_reasoning_effort={self.effort}",
                "--skip-git-repo-check", "--yolo", "--model", self.model, prompt]  # fmt: skip

    def install_argv(self, home: str = HOME) -> list[str]:
        """run_judge_exec's install of the pinned codex into the home (in the judge's image)."""
        return ["npm", "install", "-g", "--prefix", f"{home}/{self.pin}", "--no-fund", "--no-audit",
                f"{CODEX_PACKAGE}@{self.codex_version}"]  # fmt: skip

    def env(self, host_path: str, environ: dict[str, str]) -> dict[str, str]:
        """run_judge_exec's ``--env`` settings (``--containall``): PATH, the API key variables emptied."""
        return {"PATH": v11.PATH_PREFIX + host_path, "CODEX_API_KEY": "", "OPENAI_API_KEY": "",
                "PYTHONNOUSERSITE": "1"}  # fmt: skip

    def install_env(self, host_path: str) -> dict[str, str]:
        """The install's ``--env`` (its PATH only)."""
        return {"PATH": v11.PATH_PREFIX + host_path}

    def binds(self, checkout, job_tmp, auth_json=None) -> list[tuple[str, str]]:
        """(host path, container path) of every ``--bind``: the private /tmp and the sign-in's auth.json."""
        return [(str(job_tmp), "/tmp"), (str(auth_json or Path(checkout, SUBSCRIPTION_AUTH)), f"{HOME}/{AUTH_IN_HOME}")]

    def outputs(self, rerun: bool = False) -> dict[str, str]:
        """The files run_task.sh (``run_judges.sh``: ``rerun``) keeps of this judge in the result dir."""
        suffix = "_rerun" if rerun else ""
        return {
            "verdict": f"judgement_{self.output_id}{suffix}.json",
            "trace": f"judge_output_{self.output_id}{suffix}.json",
            "readable": f"judge_output_{self.output_id}{suffix}.txt",
        }


PANEL = (
    MainJudge("data-contamination", "data_contamination_judge", "gpt5_4", ("contamination", "disallowed_model"),
              "fallback"),
    MainJudge("api-usage", "api_usage_judge", "api", ("disallowed_api_usage",), "fallback"),
    MainJudge("ptb-lookup", "ptb_lookup_judge", "ptb_lookup", ("disallowed_ptb_lookup",), "stop"),
    MainJudge("general", "general_judge", "general", ("general_anomaly",), "record", required=False),
)  # fmt: skip


def judge_conf(checkout: str | Path, name: str) -> dict[str, str]:
    """A judge.conf's ``KEY="value"`` lines, as get_judge_prompt.py's read_judge_conf parses them ({} without one)."""
    path = Path(checkout, CONF.format(name=name))
    conf = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            conf[key.strip()] = value.strip().strip('"')
    return conf


def lib_defaults(text: str) -> dict[str, str]:
    """judge_lib.sh's ``JUDGE_DEFAULT_*`` and ``JUDGE_CONTAINER`` values (name -> value) from its text."""
    found = re.findall(r'^\s*(JUDGE_DEFAULT_\w+|JUDGE_CONTAINER)="([^"]*)"', text, re.MULTILINE)
    return dict(found)


def panel_judge(judge_id: str, checkout: str | Path | None = None) -> MainJudge:
    """The panel's judge ``judge_id``; with the checkout, its codex settings as load_judge_conf leaves them (its
    judge.conf's JUDGE_MODEL / JUDGE_REASONING_EFFORT / JUDGE_CODEX_VERSION over judge_lib.sh's defaults, which the
    protocol part pins)."""
    judge = next(j for j in PANEL if j.id == judge_id)
    if checkout is None:
        return judge
    conf = judge_conf(checkout, judge.name)
    return replace(
        judge,
        model=conf.get("JUDGE_MODEL", judge.model),
        effort=conf.get("JUDGE_REASONING_EFFORT", judge.effort),
        codex_version=conf.get("JUDGE_CODEX_VERSION", judge.codex_version),
    )


def checkout_paths(eval_dir: str) -> list[str]:
    """The checkout's paths a judge of ``eval_dir``'s cells reads (their object ids go into its vote's params): the
    judges' dir (judge_lib.sh, judge.conf, prompts, tools), the eval's info.json and benchmark.txt, the codex home."""
    return [JUDGES_DIR, EVAL_INFO.format(eval=eval_dir), f"{ptb.EVAL_DIR.format(eval=eval_dir)}/benchmark.txt",
            CODEX_HOME_SOURCE]  # fmt: skip


def judge_prompt(checkout: str | Path, judge: MainJudge, eval_dir: str, model_id: str, vote: dict, env=None) -> str:
    """The judge's prompt from the checkout's get_judge_prompt.py, as ``JUDGE_PROMPT=$(build_judge_prompt ...)``
    holds it; ``vote``'s ``agent`` and ``agent_config`` are run_task.sh's ``$AGENT`` and ``$AGENT_CONFIG``."""
    argv = judge.prompt_argv(eval_dir, model_id, vote.get("agent", ""), vote.get("agent_config", ""), sys.executable)
    return v11.run_prompt_script(argv, checkout, env, PROMPT_SCRIPT)


def judge_home_entries(
    judge: MainJudge, checkout: str | Path, eval_dir: str, task_dir: str | Path, trace: str | Path
) -> list[tuple[str, Path | str]]:
    """What the judge's home holds (:func:`judge_v11.build_judge_home` makes it): run_judges.sh's ``task/`` and
    trace, then prepare_judge_sandbox's and setup_judge_codex_auth's copies (the auth.json placeholder the bind
    lands on)."""
    checkout, task_dir = Path(checkout), Path(task_dir)
    entries: list[tuple[str, Path | str]] = [(TASK, task_dir), ("solve_parsed.txt", Path(trace))]
    entries += [(name, checkout / rel) for name, rel in TOOLS.items()]
    if (task_dir / "final_model" / "config.json").is_file():
        entries.append(("final_model_config.json", task_dir / "final_model" / "config.json"))
    test_data = checkout / TEST_DATA.format(eval=eval_dir)
    if test_data.is_file():
        entries.append(("test_data.json", test_data))
    source = checkout / CODEX_HOME_SOURCE
    entries.append((".codex", source))
    settings = source / "config.toml"
    text = settings.read_text() if settings.is_file() else ""
    if "forced_login_method" not in text:
        entries.append((".codex/config.toml", text + FORCED_LOGIN))
    entries.append((AUTH_IN_HOME, ""))
    return entries


build_judge_home = v11.build_judge_home


def subscription_auth(checkout: str | Path) -> Path:
    """setup_judge_codex_auth's ``JUDGE_CODEX_AUTH_SRC``: the checkout's ``agents/codex_non_api/auth.json``."""
    return Path(checkout, SUBSCRIPTION_AUTH)


# ---- the panel, the votes, and what the export writes ----


def panel(runs: int = 1) -> JudgePanel:
    """The panel a main checkout's cells get: ALL_JUDGES in order, each its fields with their effects; decided
    ``any`` (each field is one judge's)."""
    judges = tuple(
        Judge(j.id, {"agent": j.cli, "model": j.model, "keys": []}, runs, "majority", j.fields, j.required)
        for j in PANEL
    )
    return JudgePanel(judges, "any", {f: j.effect for j in PANEL for f in j.fields})


def auth_json(raw_posttrainbench: dict | None, checkout: str) -> str:
    """Where the sign-in is: ``posttrainbench.judge.auth_json`` (made absolute), else the checkout's."""
    given = ((raw_posttrainbench or {}).get("judge") or {}).get("auth_json")
    return str(Path(given).resolve()) if given else str(subscription_auth(checkout))


def vote_settings(raw_posttrainbench: dict | None, agent: str, agent_config: str) -> dict:
    """What a vote adds to its params: run_task.sh's ``$AGENT`` (the agent's dir) and ``$AGENT_CONFIG`` (its model)
    for the prompt, and ``posttrainbench.judge.codex_cli`` where set (a prefix holding the pinned codex)."""
    given = ((raw_posttrainbench or {}).get("judge") or {}).get("codex_cli")
    pinned = {"codex_cli": str(Path(given).resolve())} if given else {}
    return {"agent": agent, "agent_config": agent_config, **pinned}


def read_verdict(judge: MainJudge, text: str | None, where: str = VERDICT_FILE) -> dict:
    """A judge's judgement.json as scripts/utils.py reads it: a JSON object holding each of the judge's fields as a
    JSON boolean; PtbVerdictError in one line else."""
    if text is None:
        raise PtbVerdictError(f"judge {judge.id} wrote no {where}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PtbVerdictError(f"judge {judge.id}: {where} is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise PtbVerdictError(f"judge {judge.id}: {where} is not a JSON object")
    missing = [f for f in judge.fields if f not in data]
    if missing:
        raise PtbVerdictError(f"judge {judge.id}: {where} lacks {', '.join(missing)}")
    wrong = [f"{f} is {type(data[f]).__name__}" for f in judge.fields if not isinstance(data[f], bool)]
    if wrong:
        raise PtbVerdictError(f"judge {judge.id}: {where}: {', '.join(wrong)}, not a boolean")
    return data


def vote_outcome(judge: MainJudge, text: str | None, how: str = "", see: str = "") -> dict:
    """A vote's outcome from the judgement.json its judge wrote (None: none): its fields, or ``no_verdict`` where
    main's collect.py could not read it."""
    try:
        data = read_verdict(judge, text)
    except PtbVerdictError as exc:
        return {"status": "no_verdict", "reason": f"judge {judge.id} {how}: {exc}{see}".replace("  ", " ")}
    said = {f: str(data.get(f"justification_{f}", ""))[:300] for f in judge.fields}
    return {**{f: data[f] for f in judge.fields}, "reason": "; ".join(f"{f}: {data[f]} ({said[f]})" for f in said)}


def export_texts(verdict_texts: dict[str, str]) -> dict[str, str]:
    """The run dir's judge files (judge id -> its judgement.json text): ``judgement_<JUDGE_OUTPUT_ID>.json``
    verbatim, as collect_judge_output copies it."""
    return {panel_judge(j).outputs()["verdict"]: text for j, text in verdict_texts.items()}


def export_from_votes(vote_json, decided: dict[str, bool | str] | None = None, said: str = "") -> list[tuple[str, str]]:
    """(file name, text) of the run dir's judge files from a cell's votes (``vote_json(judge_id)``: the path of the
    judge's first run's vote file; its judgement.json lies in the dir of that name without ``.json``); [] for a cell
    without a vote of this panel. ``decided``: the cell's one verdict's decided fields (None: each file as its judge
    wrote it): a judge's file is kept byte for byte where it says what they say, else its judge's decided fields are
    written over it with ``ptflow: <said>`` justifications (:func:`judge_v11.decided_over`, d27a95e's rule for
    judge_result.json), also where the judge wrote none; a string value (a flag no field says) stays a string."""
    if not any(Path(vote_json(judge.id)).is_file() for judge in PANEL):
        return []
    verdicts = {}
    for judge in PANEL:
        kept = Path(vote_json(judge.id)).with_suffix("") / VERDICT_FILE
        text = kept.read_text() if kept.is_file() else None
        fields = {f: decided[f] for f in judge.fields if f in decided} if decided is not None else {}
        if fields:
            verdicts[judge.id] = v11.decided_over(text, fields, said)
        elif text is not None:
            verdicts[judge.id] = text
    return sorted(export_texts(verdicts).items())
