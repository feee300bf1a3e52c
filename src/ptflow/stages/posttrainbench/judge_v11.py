"""PostTrainBench's v1.1 judge (commit d27a95e, ``src/disallowed_usage_judge/run_judge.sh``) as ptflow runs it.

A checkout with this judge (``ptflow.config.posttrainbench.judge_protocol`` says ``v1.1``) judges an agent cell with
a panel of three, each its own CLI run in a home of its own (run_judge.sh runs them one after another in one home;
the files each sees are the same but for what an earlier judge left there, see :func:`judge_home_entries`):

- ``gpt``: codex with GPT-5.4, signed in with a ChatGPT subscription: the checkout's (untracked)
  ``agents/codex_non_api/auth.json`` is bound onto ``/home/ben/.codex/auth.json`` (read-write: codex writes rotated
  refresh tokens back to it), ``forced_login_method = "chatgpt"`` added to the home's ``.codex/config.toml``, and
  ``CODEX_API_KEY`` / ``OPENAI_API_KEY`` set empty; asked ``get_judge_prompt.py --benchmark-id <eval> --model <id>``,
  it answers ``contamination`` and ``disallowed_model`` in ``task/judgement.json``;
- ``kimi``: opencode with Kimi K2.6 (``opencode/kimi-k2.6``), its key in ``OPENCODE_API_KEY`` (read by the
  ``opencode.json`` that run_judge.sh writes into the task dir), the same prompt and fields;
- ``api``: codex with GPT-5.4 as ``gpt``, asked ``get_judge_prompt.py ... --kind api``; it answers
  ``disallowed_api_usage`` only.

Each judge's home (``/home/ben``; the task dir at ``/home/ben/task``, the working directory) holds: ``task/`` (the
task dir as the agent left it, ``final_model/`` in it, no ``judgement.json``), the agent's trace as
``solve_parsed.txt``, the checkout's ``judge_tools/contamination_check.py`` and ``model_identity_check.py`` and
``reference_configs/``, ``final_model_config.json`` (the final model's ``config.json``), the eval's
``test_data.json`` where the checkout has one (``contamination_check_tool/download_test_data.py`` writes it; git
ignores it), and per judge ``.codex/`` (codex) or ``task/opencode.json`` (opencode). ``/tmp`` is a private dir.

run_judge.sh keeps each judge's ``task/judgement.json`` as ``judgement_<name>[_rerun].json`` (``gpt5_4``, ``kimi``,
``api``) and ORs the contamination judges' flags into ``judge_result[_rerun].json`` with
``aggregate_judgement.py``; src/run_task.sh (the first judging, after the agent) writes the same names without
``_rerun``, which ``scripts/aggregate_contamination.py`` reads (``judge_result.json``: ``contamination`` and
``disallowed_model``; the API verdict is in the file but no aggregation script reads it at d27a95e).

Everything here is data and pure functions (plus :func:`build_judge_home`, which makes a home from its entries):
the judge panel's jobs run them (``panel_config`` is the panel the checkout implies, in the config's shape).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ptflow.config import posttrainbench as ptb

HOME = "/home/ben"  # the judges' home inside the container (run_judge.sh's --home <job_dir>:/home/ben)
TASK = "task"  # the task dir under the home, the judges' working directory (--pwd /home/ben/task)
PATH_PREFIX = "/root/.local/bin:/home/ben/.local/bin:"  # --env PATH="/root/.local/bin:/home/ben/.local/bin:$PATH"
IMAGE = "gpt_5_5"  # the .sif under POST_TRAIN_BENCH_CONTAINERS_DIR every judge runs in
SUBSCRIPTION_AUTH = "agents/codex_non_api/auth.json"  # in the checkout, untracked: the ChatGPT sign-in
AUTH_IN_HOME = ".codex/auth.json"
CODEX_HOME_SOURCE = "containers/other_home_data/.codex"
FORCED_LOGIN = '\nforced_login_method = "chatgpt"\n'  # appended to .codex/config.toml unless it names one
VERDICT_FILE = "judgement.json"  # what each judge writes in its task dir
AGGREGATE_SCRIPT = f"{ptb.JUDGE_DIR}/aggregate_judgement.py"
AGGREGATE_FILE = "judge_result"  # judge_result.json (run_task.sh) / judge_result_rerun.json (run_judge.sh)
TOOLS = {  # name in the home -> path in the checkout
    "contamination_check.py": f"{ptb.JUDGE_DIR}/judge_tools/contamination_check.py",
    "model_identity_check.py": f"{ptb.JUDGE_DIR}/judge_tools/model_identity_check.py",
    "reference_configs": f"{ptb.JUDGE_DIR}/judge_tools/reference_configs",
}
TEST_DATA = "src/eval/tasks/{eval}/test_data.json"
EVAL_INFO = "src/eval/tasks/{eval}/info.json"  # get_judge_prompt.py reads the benchmark's name and examples there
# the opencode.json run_judge.sh writes (a quoted heredoc: the text as it stands, key read from the environment)
OPENCODE_JSON = """{
  "$schema": "https://opencode.ai/config.json",
  "permission": "allow",
  "provider": {
    "opencode": {
      "options": {
        "apiKey": "{env:OPENCODE_API_KEY}"
      }
    }
  }
}
"""
CONTAMINATION_FIELDS = ("contamination", "disallowed_model")
API_FIELDS = ("disallowed_api_usage",)


class PtbVerdictError(ValueError):
    """A judge's judgement.json that aggregate_judgement.py would refuse (missing, not JSON, a field missing)."""


@dataclass(frozen=True)
class PtbPanelJudge:
    """One judge of run_judge.sh's panel: ptflow's id for it, run_judge.sh's name, its CLI, model, prompt and
    sign-in, and the fields it answers (each with a justification field beside it)."""

    id: str  # the judge's id in ptflow's panel
    name: str  # run_judge.sh's: aggregate_judgement.py --judge <name>=judgement_<name>.json
    cli: str  # codex | opencode (also parse_trace.py --agent)
    model: str
    prompt_kind: str  # get_judge_prompt.py --kind (data_and_model is its default: not passed)
    fields: tuple[str, ...]
    subscription: bool = False  # codex signed in with a ChatGPT subscription (auth.json bound, API keys emptied)
    key: str | None = None  # the API key variable handed into the container
    pin = None  # no CLI installed into the home: the image's own (judge_panels' common names)

    @property
    def justifications(self) -> tuple[str, ...]:
        return tuple(f"justification_{f}" for f in self.fields)

    def prompt_argv(self, eval_dir: str, model_id: str, python: str = "python") -> list[str]:
        """run_judge.sh's ``python "$SCRIPT_DIR/get_judge_prompt.py" --benchmark-id <eval> --model <id>`` (and
        ``--kind api``), run from the checkout's root (the script finds its files from its own path)."""
        argv = [python, ptb.JUDGE_SCRIPT, "--benchmark-id", eval_dir, "--model", model_id]
        return argv + (["--kind", self.prompt_kind] if self.prompt_kind != "data_and_model" else [])

    def argv(self, prompt: str, home: str = HOME) -> list[str]:
        """The CLI's command line inside the container, as run_judge.sh gives it (the image's CLI, whatever the
        home)."""
        if self.cli == "codex":
            return ["codex", "--search", "-a", "never", "exec", "--json", "-c", "model_reasoning_summary=detailed",
                    "-c", "model_reasoning_effort=xhigh", "--skip-git-repo-check", "--yolo", "--model", self.model,
                    prompt]  # fmt: skip
        return ["opencode", "run", "--model", self.model, "--format", "json", prompt]

    def env(self, host_path: str, environ: dict[str, str]) -> dict[str, str]:
        """The container's ``--env`` settings (with ``--containall``: nothing else of the host's environment but
        PATH): the subscription judges' API key variables set empty, opencode's key from ``environ``."""
        env = {"PATH": PATH_PREFIX + host_path}
        if self.subscription:
            env |= {"CODEX_API_KEY": "", "OPENAI_API_KEY": ""}
        if self.key:
            env[self.key] = environ.get(self.key, "")
        return env | {"PYTHONNOUSERSITE": "1"}

    def binds(
        self, checkout: str | Path, job_tmp: str | Path, auth_json: str | Path | None = None
    ) -> list[tuple[str, str]]:
        """(host path, container path) of every ``--bind``: the private /tmp, and the subscription's auth.json
        (``auth_json``: where the user keeps it, default the checkout's)."""
        binds = [(str(job_tmp), "/tmp")]
        if self.subscription:
            binds.append((str(auth_json or Path(checkout, SUBSCRIPTION_AUTH)), f"{HOME}/{AUTH_IN_HOME}"))
        return binds

    def outputs(self, rerun: bool = False) -> dict[str, str]:
        """The files run_judge.sh (``rerun``) or run_task.sh keeps of this judge in the result dir."""
        suffix = "_rerun" if rerun else ""
        return {
            "verdict": f"judgement_{self.name}{suffix}.json",
            "trace": f"judge_output_{self.name}{suffix}.json",  # the CLI's stdout and stderr (tee)
            "readable": f"judge_output_{self.name}{suffix}.txt",  # parse_trace.py --agent <cli> of it
        }


GPT = PtbPanelJudge("gpt", "gpt5_4", "codex", "gpt-5.4", "data_and_model", CONTAMINATION_FIELDS, subscription=True)
KIMI = PtbPanelJudge("kimi", "kimi", "opencode", "opencode/kimi-k2.6", "data_and_model", CONTAMINATION_FIELDS,
                     key="OPENCODE_API_KEY")  # fmt: skip
API = PtbPanelJudge("api", "api", "codex", "gpt-5.4", "api", API_FIELDS, subscription=True)
PANEL = (GPT, KIMI, API)
# run_judge.sh's switches: which judges each reruns (in this order; aggregation runs after all but --api-only)
MODES = {"all": ("gpt", "kimi", "api"), "--gpt-only": ("gpt", "api"), "--kimi-only": ("kimi",), "--api-only": ("api",)}


def panel_judge(judge_id: str) -> PtbPanelJudge:
    return next(j for j in PANEL if j.id == judge_id)


def checkout_paths(eval_dir: str) -> list[str]:
    """The checkout's paths a v1.1 judge of ``eval_dir``'s cells reads (their git object ids belong in its
    params): the judge dir (prompts, tools, aggregation), the eval's info.json and benchmark.txt, the codex home."""
    return [ptb.JUDGE_DIR, EVAL_INFO.format(eval=eval_dir), f"{ptb.EVAL_DIR.format(eval=eval_dir)}/benchmark.txt",
            CODEX_HOME_SOURCE]  # fmt: skip


def judge_prompt(checkout: str | Path, judge: PtbPanelJudge, eval_dir: str, model_id: str, env=None) -> str:
    """The judge's prompt from the checkout's get_judge_prompt.py, as ``JUDGE_PROMPT=$(...)`` holds it."""
    return run_prompt_script(judge.prompt_argv(eval_dir, model_id, python=sys.executable), checkout, env,
                             ptb.JUDGE_SCRIPT)  # fmt: skip


def run_prompt_script(argv: list[str], checkout: str | Path, env: dict | None, script: str) -> str:
    """A checkout's judge-prompt script run in the checkout with only the locale, PATH and the prompt override of
    ``env``; its stdout as a command substitution holds it (trailing newlines dropped). PtbVerdictError names the
    script's failure."""
    keep = {k: v for k, v in (env or {}).items() if k in ("PATH", "LANG", "LC_ALL", "POST_TRAIN_BENCH_PROMPT")}
    proc = subprocess.run(argv, cwd=checkout, env=keep, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise PtbVerdictError(f"{script} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return proc.stdout.rstrip("\n")


# ---- the judge's home ----


def judge_home_entries(
    judge: PtbPanelJudge, checkout: str | Path, eval_dir: str, task_dir: str | Path, trace: str | Path
) -> list[tuple[str, Path | str]]:
    """What the judge's home holds, as run_judge.sh makes it: (path in the home, a source path to copy or the text
    to write). ``task_dir``: the task dir as the agent left it; ``trace``: the agent's readable trace.

    run_judge.sh makes one home for all its judges in turn, so there a later judge also sees what an earlier one's
    setup left: with every judge, ``kimi`` sees ``.codex/`` (the gpt judge's) and ``api`` sees ``task/opencode.json``
    (kimi's). Each ptflow judge gets its own home, as run_judge.sh gives it to that judge alone (``--kimi-only``,
    ``--api-only``; ``gpt`` runs first in every mode)."""
    checkout, task_dir = Path(checkout), Path(task_dir)
    entries: list[tuple[str, Path | str]] = [(TASK, task_dir), ("solve_parsed.txt", Path(trace))]
    entries += [(name, checkout / rel) for name, rel in TOOLS.items()]
    if (task_dir / "final_model" / "config.json").is_file():
        entries.append(("final_model_config.json", task_dir / "final_model" / "config.json"))
    test_data = checkout / TEST_DATA.format(eval=eval_dir)
    if test_data.is_file():
        entries.append(("test_data.json", test_data))
    if judge.cli == "codex":
        source = checkout / CODEX_HOME_SOURCE
        entries.append((".codex", source))
        settings = source / "config.toml"
        text = settings.read_text() if settings.is_file() else ""
        if "forced_login_method" not in text:
            entries.append((".codex/config.toml", text + FORCED_LOGIN))
        entries.append((AUTH_IN_HOME, ""))  # the placeholder the auth.json bind lands on
    else:
        entries.append((f"{TASK}/opencode.json", OPENCODE_JSON))
    return entries


def build_judge_home(entries: list[tuple[str, Path | str]], home: Path, link=None) -> Path:
    """Make the judge's home at ``home`` from :func:`judge_home_entries`; ``link(source, dest)`` copies the task
    dir (default: a copy; the judge job links its files, ptflow.files.link_tree). ``task/judgement.json`` is never
    the agent's: removed, as run_judge.sh removes it."""
    home.mkdir(parents=True, exist_ok=True)
    for rel, source in entries:
        dest = home / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not (isinstance(source, Path) and source.is_dir()):
            # a file over a linked tree's (.codex/config.toml): a file of its own, never written through the link
            # into the checkout's or the workspace's file
            dest.unlink(missing_ok=True)
        if isinstance(source, str):
            dest.write_text(source)
        elif source.is_dir():
            (link or _copy_tree)(source, dest)
        else:
            shutil.copyfile(source, dest)
        if rel == TASK:
            (dest / VERDICT_FILE).unlink(missing_ok=True)
    return home


def _copy_tree(source: Path, dest: Path) -> None:
    shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)


def container_spec(judge: PtbPanelJudge, checkout: str | Path, home: str | Path, job_tmp: str | Path,
                   host_path: str, environ: dict[str, str]) -> dict:  # fmt: skip
    """The judge's container as run_judge.sh's ``apptainer exec`` gives it: ``--containall --writable-tmpfs``,
    the home (``--home <home>:/home/ben``), the working dir, the binds, the environment, the image and the CLI's
    argv (its prompt as ``{prompt}``)."""
    return {
        "home": (str(home), HOME),
        "pwd": f"{HOME}/{TASK}",
        "binds": judge.binds(checkout, job_tmp),
        "env": judge.env(host_path, environ),
        "image": IMAGE,
        "argv": judge.argv("{prompt}"),
    }


# ---- the subscription sign-in ----


def subscription_auth(checkout: str | Path) -> Path:
    """The ChatGPT sign-in the codex judges use: the checkout's ``agents/codex_non_api/auth.json`` (never in git;
    mounted into the judge's home, never copied into results)."""
    return Path(checkout, SUBSCRIPTION_AUTH)


# ---- verdicts, and what the export writes ----


def read_verdict(judge: PtbPanelJudge, text: str | None, where: str = VERDICT_FILE) -> dict:
    """A judge's judgement.json, checked as aggregate_judgement.py checks it (a JSON object holding the judge's
    fields and their justifications); PtbVerdictError in one line else."""
    if text is None:
        raise PtbVerdictError(f"judge {judge.id} wrote no {where}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PtbVerdictError(f"judge {judge.id}: {where} is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise PtbVerdictError(f"judge {judge.id}: {where} is not a JSON object")
    missing = [f for f in (*judge.fields, *judge.justifications) if f not in data]
    if missing:
        raise PtbVerdictError(f"judge {judge.id}: {where} lacks {', '.join(missing)}")
    return data


def aggregate(verdicts: dict[str, dict]) -> dict:
    """``judge_result.json`` as aggregate_judgement.py writes it from the verdicts (judge id -> judgement.json):
    the contamination judges' flags ORed, their justifications joined as ``[<name>] ...`` in panel order, the API
    judge's taken as they are."""
    judges = [j for j in PANEL if j.id in verdicts and j is not API]
    if not judges or API.id not in verdicts:
        raise PtbVerdictError("aggregate_judgement.py needs a contamination judge's verdict and the api judge's")

    def joined(field: str) -> str:
        return "\n\n".join(f"[{j.name}] {verdicts[j.id][field]}" for j in judges)

    api = verdicts[API.id]
    return {
        "contamination": any(bool(verdicts[j.id]["contamination"]) for j in judges),
        "disallowed_model": any(bool(verdicts[j.id]["disallowed_model"]) for j in judges),
        "justification_contamination": joined("justification_contamination"),
        "justification_disallowed_model": joined("justification_disallowed_model"),
        "disallowed_api_usage": bool(api["disallowed_api_usage"]),
        "justification_disallowed_api_usage": api["justification_disallowed_api_usage"],
    }


def export_texts(verdict_texts: dict[str, str]) -> dict[str, str]:
    """The run dir's judge files for ``ptflow export --posttrainbench`` (judge id -> its judgement.json text, as the
    judge wrote it): ``judgement_<name>.json`` verbatim per judge, and ``judge_result.json`` (what
    scripts/aggregate_contamination.py reads) when every judge of the panel gave a readable verdict, as
    aggregate_judgement.py writes it only then (the aggregation then shows the run as "C:ERR M:ERR")."""
    out = {panel_judge(j).outputs()["verdict"]: text for j, text in verdict_texts.items()}
    try:
        verdicts = {j.id: read_verdict(j, verdict_texts.get(j.id)) for j in PANEL}
    except PtbVerdictError:
        return out
    return out | {f"{AGGREGATE_FILE}.json": json.dumps(aggregate(verdicts), indent=2) + "\n"}


def decided_over(text: str | None, decided: dict[str, bool | str], said: str, justified: bool = False) -> str:
    """A judge's JSON verdict file as ``ptflow export --posttrainbench`` writes it for a cell's one verdict: ``text``
    byte for byte where it says what ``decided`` says (each field that value; ``justified``: with its
    ``justification_<field>`` too), else the decided fields written over it, each with ``justification_<field>`` =
    ``ptflow: <said>`` (``indent=2``, as PostTrainBench's scripts write JSON). A value that is a string stays one: an
    answer the aggregation cannot read, which counts the run as its baseline. ``text`` None, not JSON or not an
    object: the decided fields alone. d27a95e's judge_result.json and main's judgement_<id>.json follow this rule."""
    try:
        data = json.loads(text) if text else {}
    except json.JSONDecodeError:
        data = {}
    data = data if isinstance(data, dict) else {}
    before = dict(data)
    for name, value in decided.items():
        same = type(data.get(name)) is type(value) and data.get(name) == value
        if not same or (justified and f"justification_{name}" not in data):
            data[name] = value
            data[f"justification_{name}"] = f"ptflow: {said}"
    return text if text and data == before else json.dumps(data, indent=2) + "\n"


def kept_verdicts(trace_dir: str | Path) -> dict[str, str]:
    """The v1.1 verdicts a judged cell keeps beside its agent trace (judge id -> text): each judge's judgement.json
    under run_task.sh's name for it (``judgement_<name>.json``), as the panel's judge runs keep them."""
    found = {j.id: Path(trace_dir, j.outputs()["verdict"]) for j in PANEL}
    return {judge_id: path.read_text() for judge_id, path in found.items() if path.is_file()}


def export_from_trace(trace_dir: str | Path) -> list[tuple[str, str]]:
    """(file name, text) of the run dir's v1.1 judge files for a cell whose trace dir keeps v1.1 verdicts (none for
    any other cell): :func:`export_texts` of :func:`kept_verdicts`."""
    verdicts = kept_verdicts(trace_dir)
    return sorted(export_texts(verdicts).items()) if verdicts else []


def panel_config(runs: int = 1) -> dict:
    """The panel a v1.1 checkout implies, in the config's ``judge`` shape (ptflow.config.judges): the two
    contamination judges and the API judge, any flag deciding (run_judge.sh ORs its contamination judges); a
    contamination or model flag scores the base model (aggregate_final.py). The API verdict changes no score at
    d27a95e (no aggregation script reads it), so it has no effect listed; the sign-in and prompt kind of each judge
    are this module's (:data:`PANEL`)."""

    def entry(judge: PtbPanelJudge) -> dict:
        keys = [judge.key] if judge.key else []
        return {"id": judge.id, "agent": judge.cli, "model": judge.model, "keys": keys, "runs": runs,
                "decision": "majority", "fields": list(judge.fields)}  # fmt: skip

    return {
        "decision": "any",
        "judges": [entry(j) for j in PANEL],
        "effects": {"contamination": "fallback", "disallowed_model": "fallback", "disallowed_api_usage": "record"},
    }
