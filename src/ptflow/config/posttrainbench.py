"""PostTrainBench as an input: a checkout at a pinned commit, and where in it each piece a run uses lives.

ptflow contains none of PostTrainBench's code or prose. With ``posttrainbench: {commit, path | repo}`` in config, the
evals whose task is ``posttrainbench/<eval>`` run the checkout's ``evaluate.py``, agent cells get the checkout's
prompt and run its ``agents/<agent>/solve.sh``, and the judge gets its judge prompt (docs/posttrainbench.md).

The checkout is a file target (rule ``posttrainbench_checkout``, a checkpoint): its marker records the commit and
the git object id of every path the run uses. A cell's params carry the ids of exactly the paths *it* uses, so a new
commit reruns only the cells whose files changed (an unchanged ``src/eval/tasks/gsm8k`` keeps every gsm8k cell).

The paths below are facts about PostTrainBench's layout, read at commit 9082063 (``src/run_task.sh`` copies them).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ptflow.config import answer_sandbox

TASK_PREFIX = "posttrainbench/"  # an eval's task: posttrainbench/<dir under src/eval/tasks>

EVAL_DIR = "src/eval/tasks/{eval}"  # evaluate.py, benchmark.txt, evaluation_code/, task_context/
TEMPLATES_DIR = "src/eval/templates"  # its chat templates (evaluate.py --templates-dir)
PROMPT_DIR = "src/eval/general"  # get_prompt.py and its prompt texts
PROMPT_SCRIPT = "src/eval/general/get_prompt.py"
JUDGE_DIR = "src/disallowed_usage_judge"
JUDGE_SCRIPT = "src/disallowed_usage_judge/get_judge_prompt.py"
JUDGE_CODEX_HOME = "containers/other_home_data/.codex"  # copied into the home before the judge runs
AGENT_DIR = "agents/{agent}"  # solve.sh (and a trace parser)
TIMER_SCRIPT = "src/utils/create_timer.sh"
HOME_DATA_DIR = "containers/other_home_data"  # what run_task.sh copies into the agent's home (its .codex)
RECIPE_PREFIX = "posttrainbench:"  # a site image's recipe inside the checkout: posttrainbench:containers/standard.def
# What fills PostTrainBench's HF_HOME: resources.json (models, and datasets with their configs and splits) and the
# download script that loads each into the cache (download_hf_cache.sh runs download_resources.py in the image that
# POST_TRAIN_BENCH_CONTAINERS_DIR/POST_TRAIN_BENCH_CONTAINER_NAME name).
RESOURCES_DIR = "containers/download_hf_cache"
RESOURCES_FILE = f"{RESOURCES_DIR}/resources.json"
DOWNLOAD_SCRIPT = f"{RESOURCES_DIR}/download_hf_cache.sh"
DOWNLOAD_IMAGE = "standard"  # the image its download script runs in (the site's, built from containers/standard.def)


@dataclass(frozen=True)
class HubData:
    """A hub dataset an evaluation of the checkout loads at run time: ``load_dataset(repo, config, split=split)``."""

    repo: str
    config: str | None
    splits: tuple[str, ...]
    gated: bool = False

    def describe(self) -> str:
        return f"dataset {self.repo}" + (f" (config {self.config})" if self.config else "")


# What each evaluate.py at 9082063 loads from the hub (through inspect_evals at its pinned commit, or its own task
# for gpqamain), read from the checkout: gsm8k's few-shot examples come from its train split. arenahardwriting and
# healthbench load nothing from the hub: their questions are files in their evaluation_code/ (their LLM judges
# are API calls). None of these loads names a revision in resources.json, so the cache holds the default branch.
# This table is for planning (what resources.json must list, which datasets are gated): the exact form of each load
# (data_dir or config name, split, revision) is recorded from the evaluate.py itself by the cache job's data probe
# (ptflow.stages.posttrainbench.data_probe), with the inspect_evals that runs it.
# bfcl loads nothing from the hub with ptflow's inspect_evals (0.26): its task git-clones BFCL's data from GitHub
# (ShishirPatil/gorilla at inspect_evals' pinned commit, ptflow.config.tasks.BFCL_REPO/BFCL_COMMIT) into the
# inspect_evals cache (INSPECT_EVALS_CACHE_DIR/BFCL). The pinned checkout's own inspect_evals pin loads the hub
# dataset gorilla-llm/Berkeley-Function-Calling-Leaderboard instead (its resources.json lists it; it is fetched as
# listed). The probe records the clone from the evaluation, warms it with ptflow's git fetch and proves it there
# offline; a cache job that cannot reach GitHub fails in one line naming what the site must allow.
EVAL_HUB_DATA: dict[str, tuple[HubData, ...]] = {
    "gsm8k": (HubData("openai/gsm8k", "main", ("test", "train")),),
    "aime2025": (HubData("math-ai/aime25", None, ("test",)),),
    "humaneval": (HubData("openai/openai_humaneval", "openai_humaneval", ("test",)),),
    "gpqamain": (HubData("Idavidrein/gpqa", "gpqa_main", ("train",), gated=True),),
    "bfcl": (),  # git data (above), not the hub
    "arenahardwriting": (),
    "healthbench": (),
}

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_GIT_TIMEOUT_S = 60


class CheckoutError(RuntimeError):
    """The checkout is missing, elsewhere than its commit, dirty, or lacks a path the run uses (one line)."""


@dataclass(frozen=True)
class Checkout:
    commit: str
    path: str | None  # a checkout given on a shared filesystem (verified), or None: cloned by the rule
    repo: str | None  # the repository URL to clone from (None: path given)
    images: tuple[str, ...] = ()  # site images built from the checkout's containers/<name>.def

    @classmethod
    def from_config(cls, raw: dict | None, where: str = "posttrainbench") -> Checkout | None:
        """The config section, or None; ValueError (one line naming the key) for a bad one."""
        if not raw:
            return None
        commit = str(raw.get("commit", ""))
        if not _COMMIT.match(commit):
            raise ValueError(
                f"{where}.commit: {commit!r} is not a full commit id (40 lowercase hex digits); pin it with "
                "`git rev-parse <ref>` in the checkout"
            )
        if bool(raw.get("path")) == bool(raw.get("repo")):
            raise ValueError(
                f"{where}: give exactly one of path (a checkout on the cluster's shared filesystem) or repo "
                "(its URL, cloned at the commit by the rule posttrainbench_checkout)"
            )
        return cls(commit, str(raw["path"]) if raw.get("path") else None, raw.get("repo"), tuple(raw.get("images", ())))

    def recipe(self, image: str) -> str | None:
        """``posttrainbench:containers/<image>.def`` for an image the checkout builds, else None."""
        return f"{RECIPE_PREFIX}containers/{image}.def" if image in self.images else None

    def location(self, scratch: str) -> str:
        """Where the checkout is: the given path, or the rule's clone on scratch (one per commit)."""
        return str(Path(self.path).resolve()) if self.path else str(Path(scratch, "posttrainbench", self.commit))


def is_checkout_task(task: str) -> bool:
    return task.startswith(TASK_PREFIX)


def eval_dir_name(task: str) -> str:
    return task[len(TASK_PREFIX) :]


def eval_paths(eval_dir: str) -> list[str]:
    """What an evaluation from the checkout reads: the eval's directory and the templates."""
    return [EVAL_DIR.format(eval=eval_dir), TEMPLATES_DIR]


def agent_paths(agent_dir: str, eval_dir: str) -> list[str]:
    """What an agent cell reads: its task dir's sources (run_task.sh's copies), the prompt, the solve script, and
    what run_task.sh copies into the agent's home."""
    return [*eval_paths(eval_dir), PROMPT_DIR, AGENT_DIR.format(agent=agent_dir), TIMER_SCRIPT, HOME_DATA_DIR]


def hub_data(eval_dir: str) -> tuple[HubData, ...]:
    """The hub datasets the checkout's ``evaluate.py`` of ``eval_dir`` loads (none for an eval dir not listed)."""
    return EVAL_HUB_DATA.get(eval_dir, ())


def judge_paths(eval_dir: str) -> list[str]:
    return [JUDGE_DIR, f"{EVAL_DIR.format(eval=eval_dir)}/benchmark.txt"]


def git(checkout: str | Path, *args: str) -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=_GIT_TIMEOUT_S
        )
    except FileNotFoundError:
        raise CheckoutError("git is not installed here; PostTrainBench's checkout needs it") from None
    if proc.returncode != 0:
        raise CheckoutError(
            f"git -C {checkout} {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}"
        )
    return proc.stdout.strip()


def object_ids(checkout: str | Path, commit: str, paths: list[str]) -> dict[str, str]:
    """The git object id of each path at ``commit`` (a tree for a directory, a blob for a file)."""
    paths = sorted(set(paths))
    if not paths:
        return {}
    try:
        out = git(checkout, "rev-parse", *[f"{commit}:{p}" for p in paths])
    except CheckoutError:
        missing = [p for p in paths if _missing(checkout, commit, p)]
        if missing:
            raise CheckoutError(
                f"the PostTrainBench checkout at {commit[:12]} has no {', '.join(missing)}; check the eval ids "
                "(posttrainbench/<dir under src/eval/tasks>), agents' solve dirs and image recipes"
            ) from None
        raise
    return dict(zip(paths, out.splitlines(), strict=True))


# ---- the protocol of a checkout, part by part ----------------------------------------------------------------------
# A checkout's protocol is recognised part by part (PARTS) from facts in its own files, not from its commit id (a fork
# or a rebased branch keeps a protocol under another id): paths it has, paths it lacks, and texts its files hold (the
# command lines and query modes ptflow reproduces or that tell one variant from another). A fact ptflow does not
# reproduce may change freely; one it does may not, or ptflow would run as a protocol the checkout no longer has.
# Every variant ptflow runs was read at 9082063 and/or d27a95e (aisa-group/PostTrainBench), but main's key allowlist
# (06b716e); PostTrainBench's main line (read 2026-08..10, at the commits named) is recognised, and its other parts are
# refused by name: ptflow does not run them yet. No
# option lets one part run under an older part's protocol: the judge off skips the judges part, and nothing else.

PARTS = ("evaluation", "judges", "sandbox keys", "results")
_NOUNS = {"evaluation": "an evaluation", "judges": "a judge", "sandbox keys": "sandbox keys",
          "results": "a results layout"}  # fmt: skip
_V10, _V11 = "9082063a62e1", "d27a95e9ffd8"  # the two commits ptflow runs (12 hex digits)


@dataclass(frozen=True)
class ProtocolPart:
    """One variant of one part of PostTrainBench's protocol: the commits it was read at and the facts a checkout
    must show to have it. Paths are relative to the checkout and may be fnmatch patterns (``*``): ``present``, at
    least one file matches; ``absent``, none does; ``says``, every matching file holds the text (where there is one:
    the fixture checkouts carry no ``src/run_task.sh``, whose behaviour ptflow reproduces rather than runs)."""

    part: str  # one of PARTS
    version: str  # the name the marker records (judges: PostTrainBench's own, v1.0 and v1.1)
    name: str  # what it is, in a few words
    commits: tuple[str, ...]  # commits of aisa-group/PostTrainBench it was read at (12 hex digits)
    present: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    says: tuple[tuple[str, str], ...] = ()
    runs: bool = True  # ptflow runs it; False: recognised (PostTrainBench's main line) and refused by name

    @property
    def commit(self) -> str:
        return self.commits[0]

    @property
    def label(self) -> str:
        if not self.runs:
            return f"PostTrainBench main's {self.name}, read at {self.commit[:7]}"
        return f"{' and '.join(c[:7] + chr(39) + 's' for c in self.commits)} {self.name}"

    def unmet(self, listed: set[str], texts: dict[str, str]) -> list[tuple[str | None, str]]:
        """The facts the checkout does not show: (the file concerned or None, a few words). Empty: it has this."""
        out: list[tuple[str | None, str]] = [(None, f"no {p}") for p in self.present if not _matching(p, listed)]
        out += [(q, f"has {q}") for p in self.absent for q in _matching(p, listed)]
        out += [(q, f"{q} lacks {text!r}") for p, text in self.says for q in _matching(p, listed)
                if text not in texts.get(q, "")]  # fmt: skip
        return out

    def files(self, listed: set[str]) -> list[str]:
        """The files its ``present`` and ``says`` facts point at in the checkout."""
        return [q for p in (*self.present, *(p for p, _ in self.says)) for q in _matching(p, listed)]


def _matching(pattern: str, listed: set[str]) -> list[str]:
    if not any(c in pattern for c in "*?["):
        return [pattern] if pattern in listed else []
    return sorted(fnmatch.filter(listed, pattern))


_RUN_TASK = "src/run_task.sh"
EVAL_ONE_SHOT = ProtocolPart(
    "evaluation", "one-shot", "one-shot evaluate.py", (_V10, _V11),
    present=("src/eval/tasks/*/evaluate.py",),
    absent=("src/eval/run_final_eval.sh", "src/eval/tasks/*/evaluate_final_eval.py",
            "src/utils/aggregate_seed_metrics.py"),
    # run_task.sh runs the task's own evaluate.py once per try (4, then lower budgets), into the run dir's metrics.json
    says=((_RUN_TASK, 'python "evaluate.py"'), (_RUN_TASK, '--json-output-file "${EVAL_DIR}/metrics.json"'),
          (_RUN_TASK, 'run_evaluation_with_retry 4 ""')),
)  # fmt: skip
EVAL_FINAL = ProtocolPart(
    "evaluation", "seeded-final", "seeded final evaluation (src/eval/run_final_eval.sh)", ("13a49a02422f",),
    # the scripts ptflow runs: each task's final-eval script, and default_temperature.py for the greedy rule
    present=("src/eval/run_final_eval.sh", "src/eval/tasks/*/evaluate_final_eval.py",
             "src/utils/default_temperature.py"),
    # ptflow runs it seed by seed (rules evaluate_seed, seed_mean) with what the script says of each task
    # (final_eval below: --default-seeds, --check, STAGE_MAX_TOKENS_ARGS)
    says=(("src/eval/run_final_eval.sh", "--default-seeds"), ("src/eval/run_final_eval.sh", "--check"),
          ("src/eval/run_final_eval.sh", "STAGE_MAX_TOKENS_ARGS")),
)  # fmt: skip
_NOT_MAIN_JUDGES = ("src/judges/judge_lib.sh", "src/judges/run_judges.sh")
MAIN_JUDGES_DIR = "src/judges"  # PostTrainBench main's judges (judge_lib.sh @ 241d5564); below: JUDGE_OUTPUT_IDs
_MAIN_JUDGES = ("data_contamination_judge", "api_usage_judge", "ptb_lookup_judge", "general_judge")
_MAIN_OUTPUT_IDS = {"data_contamination_judge": "gpt5_4", "api_usage_judge": "api", "ptb_lookup_judge": "ptb_lookup"}
JUDGE_V10 = ProtocolPart(
    "judges", "v1.0", "judge v1.0", (_V10,),
    present=(JUDGE_SCRIPT, f"{JUDGE_DIR}/prompt.txt"),
    absent=(f"{JUDGE_DIR}/run_judge.sh", f"{JUDGE_DIR}/aggregate_judgement.py", f"{JUDGE_DIR}/prompt_api_judge.md",
            *_NOT_MAIN_JUDGES),
    says=(
        (JUDGE_SCRIPT, '"--benchmark"'),  # the benchmark's name (benchmark.txt), not its id
        (f"{JUDGE_DIR}/prompt.txt", "contamination_judgement.txt"),
        (f"{JUDGE_DIR}/prompt.txt", "disallowed_model_judgement.txt"),
    ),
)  # fmt: skip
_RUN_JUDGE = f"{JUDGE_DIR}/run_judge.sh"
JUDGE_V11 = ProtocolPart(
    "judges", "v1.1", "judge v1.1", (_V11,),
    present=tuple(f"{JUDGE_DIR}/{p}" for p in (
        "run_judge.sh", "get_judge_prompt.py", "prompt.txt", "prompt_api_judge.md", "aggregate_judgement.py",
        "judge_tools/contamination_check.py", "judge_tools/model_identity_check.py")),
    absent=_NOT_MAIN_JUDGES,
    says=(
        (JUDGE_SCRIPT, '"--benchmark-id"'),
        (JUDGE_SCRIPT, '"--kind"'),
        (JUDGE_SCRIPT, '"api"'),
        (f"{JUDGE_DIR}/prompt.txt", "judgement.json"),
        (f"{JUDGE_DIR}/prompt_api_judge.md", "disallowed_api_usage"),
        (f"{JUDGE_DIR}/aggregate_judgement.py", 'API_JUDGE_NAME = "api"'),
        # the command lines, sign-ins and file names ptflow.stages.posttrainbench.judge_v11 reproduces
        (_RUN_JUDGE, "codex --search -a never exec --json -c model_reasoning_summary=detailed -c "
                     'model_reasoning_effort=xhigh --skip-git-repo-check --yolo --model "gpt-5.4"'),
        (_RUN_JUDGE, 'opencode run --model "opencode/kimi-k2.6" --format json'),
        (_RUN_JUDGE, 'CODEX_AUTH_SRC="$REPO_ROOT/agents/codex_non_api/auth.json"'),
        (_RUN_JUDGE, '--bind "${CODEX_AUTH_SRC}:/home/ben/.codex/auth.json"'),
        (_RUN_JUDGE, 'forced_login_method = "chatgpt"'),
        (_RUN_JUDGE, '--env CODEX_API_KEY=""'),
        (_RUN_JUDGE, '--env OPENAI_API_KEY=""'),
        (_RUN_JUDGE, "OPENCODE_API_KEY"),
        (_RUN_JUDGE, "--kind api"),
        (_RUN_JUDGE, "judge_tools/reference_configs"),
        (_RUN_JUDGE, "judgement_gpt5_4_rerun.json"),
        (_RUN_JUDGE, "judgement_kimi_rerun.json"),
        (_RUN_JUDGE, "judgement_api_rerun.json"),
        (_RUN_JUDGE, "judge_result_rerun.json"),
    ),
)  # fmt: skip
_LIB = f"{MAIN_JUDGES_DIR}/judge_lib.sh"
_MAIN_PROMPT = f"{MAIN_JUDGES_DIR}/get_judge_prompt.py"
JUDGES_MAIN = ProtocolPart(
    "judges", "src/judges", "judges of src/judges/ (judge_lib.sh)", ("241d5564011d",),
    present=(_LIB, _MAIN_PROMPT, *(f"{MAIN_JUDGES_DIR}/{j}/judge.conf" for j in _MAIN_JUDGES),
             *(f"{MAIN_JUDGES_DIR}/judge_tools/{t}" for t in ("contamination_check.py", "model_identity_check.py"))),
    absent=(JUDGE_SCRIPT,),
    # the judge set, pins, command lines, sign-in and file names ptflow.stages.posttrainbench.judge_main reproduces
    says=(
        (_LIB, f"ALL_JUDGES=({' '.join(_MAIN_JUDGES)})"),
        (_LIB, 'JUDGE_DEFAULT_MODEL="gpt-5.6-terra"'), (_LIB, 'JUDGE_DEFAULT_REASONING_EFFORT="xhigh"'),
        (_LIB, 'JUDGE_DEFAULT_CODEX_VERSION="0.144.5"'), (_LIB, 'JUDGE_CONTAINER="gpt_5_5.sif"'),
        (_LIB, '"$codex_bin" --search -a never exec --json -c model_reasoning_summary=detailed -c model_reasoning_'
               'effort="${JUDGE_REASONING_EFFORT}" --skip-git-repo-check --yolo --model "${JUDGE_MODEL}"'),
        (_LIB, 'npm install -g --prefix "/home/ben/${'),
        (_LIB, '"@openai/codex@${JUDGE_CODEX_VERSION}"'),
        (_LIB, "agents/codex_non_api/auth.json"),
        (_LIB, ':/home/ben/.codex/auth.json"'),
        (_LIB, 'forced_login_method = "chatgpt"'),
        (_LIB, '--env CODEX_API_KEY=""'), (_LIB, '--env OPENAI_API_KEY=""'),
        (_LIB, '--pwd "/home/ben/task"'),
        (_LIB, '/test_data.json" "$'),  # the benchmark's test_data.json, into the sandbox
        (_LIB, "judgement_${JUDGE_OUTPUT_ID}"),
        (_MAIN_PROMPT, '"--judge"'), (_MAIN_PROMPT, '"--benchmark-id"'), (_MAIN_PROMPT, '"--agent-config"'),
        *((f"{MAIN_JUDGES_DIR}/{j}/judge.conf", f'JUDGE_OUTPUT_ID="{o}"') for j, o in _MAIN_OUTPUT_IDS.items()),
    ),
)  # fmt: skip
KEYS_FIXED = ProtocolPart(
    "sandbox keys", "fixed", "fixed key list of src/run_task.sh", (_V10, _V11),
    absent=("agents/*/api_keys.json",),
    # the agent's container gets the same provider keys whatever the agent or task; OPENAI_API_KEY goes in as
    # CODEX_API_KEY (and as itself for arenahardwriting and healthbench, their graders' key)
    says=((_RUN_TASK, 'export CODEX_API_KEY="${OPENAI_API_KEY}"'),
          (_RUN_TASK, '--env ANTHROPIC_API_KEY="${ANTHROPIC_API_KEY}"'),
          (_RUN_TASK, '--env GEMINI_API_KEY="${GEMINI_API_KEY}"'),
          (_RUN_TASK, '--env OPENCODE_API_KEY="${OPENCODE_API_KEY}"')),
)  # fmt: skip
KEYS_UNION = ProtocolPart(
    "sandbox keys", "allowlist", "key allowlist (agents/<agent>/api_keys.json with the task's required_api_keys)",
    ("06b716ebcea4",), present=("agents/*/api_keys.json",),
    # the --cleanenv sandbox gets only the union of the agent's allowed and the task's required keys, OpenRouter's
    # under its judge backend, with the values of run_task.sh's lines before it (ptflow.config.ptb_keys reproduces
    # them)
    says=((_RUN_TASK, "api_keys.json"), (_RUN_TASK, "required_api_keys"), (_RUN_TASK, "--cleanenv"),
          (_RUN_TASK, 'export CODEX_API_KEY="${OPENAI_API_KEY}"'), (_RUN_TASK, "unset OPENAI_API_KEY"),
          (_RUN_TASK, 'ALLOWED_API_KEYS+=("OPENROUTER_API_KEY")')),
)  # fmt: skip
RESULTS_AGGREGATE = ProtocolPart(
    "results", "aggregate", "run dirs read by scripts/aggregate_*.py", (_V10, _V11),
    present=("scripts/aggregate_methods.py", "scripts/aggregate_contamination.py", "scripts/aggregate_final.py"),
    absent=("scripts/collect.py",),
)  # fmt: skip
# main's results (scripts/collect.py @ 1fc55616, scripts/utils.py, scripts/aggregate.py @ 1691dfb6): ptflow writes the
# run dirs collect.py reads (ptflow.results.ptb_export) and runs collect.py with --data-dir/--output-dir on a probe
# (ptflow.results.ptb_protocol); aggregate.py reads only collect.py's tables, and scripts/baselines.json gives the
# fallback values
_COLLECT = "scripts/collect.py"
RESULTS_COLLECT = ProtocolPart(
    "results", "collect", "run dirs read by scripts/collect.py and aggregate.py", ("1fc55616942b",),
    present=(_COLLECT, "scripts/aggregate.py", "scripts/baselines.json"),
    says=((_COLLECT, "metrics.json"), (_COLLECT, "judgement_gpt5_4.json"), (_COLLECT, "--data-dir"),
          (_COLLECT, "--output-dir"), ("scripts/utils.py", "judgement_gpt5_4_manual.json"),
          ("scripts/utils.py", "time_taken.txt"), ("scripts/aggregate.py", "single_metrics.csv")),
)  # fmt: skip
VARIANTS = (EVAL_ONE_SHOT, EVAL_FINAL, JUDGE_V10, JUDGE_V11, JUDGES_MAIN, KEYS_FIXED, KEYS_UNION,
            RESULTS_AGGREGATE, RESULTS_COLLECT)  # fmt: skip
JUDGE_PROTOCOLS = (JUDGE_V10, JUDGE_V11, JUDGES_MAIN)


@dataclass(frozen=True)
class CheckoutProtocol:
    """A checkout's protocol: per part, the variant ptflow runs, or the one line that refuses the part."""

    commit: str
    parts: tuple[tuple[str, ProtocolPart], ...]  # the parts ptflow runs
    refusals: tuple[tuple[str, str], ...]  # (part, its one-line refusal)

    def part(self, name: str) -> ProtocolPart | None:
        return dict(self.parts).get(name)

    def versions(self) -> dict[str, str]:
        """What the checkout marker records: each part's version, for the parts ptflow runs."""
        return {name: variant.version for name, variant in self.parts}

    def check(self, judged: bool) -> None:
        """CheckoutError with the first refused part's line (in PARTS order); the judges part only where ``judged``."""
        for part, line in self.refusals:
            if judged or part != "judges":
                raise CheckoutError(line)


def _texts(checkout: str | Path, commit: str, paths: list[str]) -> dict[str, str]:
    """The text of each path at ``commit``, in one ``git cat-file --batch``."""
    request = "".join(f"{commit}:{p}\n" for p in paths).encode()
    proc = subprocess.run(
        ["git", "-C", str(checkout), "cat-file", "--batch"], input=request, capture_output=True,
        timeout=_GIT_TIMEOUT_S, check=True,
    )  # fmt: skip
    out, texts, data = {}, iter(paths), proc.stdout
    while data:
        header, _, data = data.partition(b"\n")
        path = next(texts)
        if header.endswith(b" missing"):
            continue
        size = int(header.split()[2])
        out[path], data = data[:size].decode(errors="replace"), data[size + 1 :]
    return out


def _refusal(checkout: str, commit: str, part: str, unmet: dict[ProtocolPart, list], listed: set[str]) -> str:
    """The one line refusing ``part``: what the checkout has instead (its files, with their object ids) and the
    variants ptflow runs."""
    variants = [v for v in VARIANTS if v.part == part]
    ours = [v for v in variants if v.runs]
    known = " and ".join(v.label for v in ours)
    nearest = min(ours, key=lambda v: len(unmet[v]))
    other = next((v for v in variants if not v.runs and not unmet[v]), None)
    files = [f for f, _ in unmet[nearest] if f] + (other.files(listed) if other else [])
    files = list(dict.fromkeys(files))
    ids = object_ids(checkout, commit, files[:4]) if files else {}
    found = ", ".join(f"{p} {ids[p][:12]}" for p in files[:4]) + (" …" if len(files) > 4 else "")
    head = f"the PostTrainBench checkout at {commit[:12]} has {_NOUNS[part]}"
    if other is not None:
        return f"{head} ptflow does not run ({found}: {other.label}); ptflow runs {known}: pin one of those commits"
    why = (f"{found}; " if found else "") + f"nearest {nearest.label}: "
    why += "; ".join(words for _, words in unmet[nearest][:2])
    return f"{head} ptflow does not know ({why}); ptflow knows {known}: pin one of those commits"


@functools.cache
def checkout_protocol(checkout: str, commit: str) -> CheckoutProtocol:
    """The protocol of the checkout at ``commit``, part by part (read with git, cached: a commit's files never
    change). A part with no variant ptflow runs gets its refusal line (:meth:`CheckoutProtocol.check` raises it)."""
    listed = set(git(checkout, "ls-tree", "-r", "--name-only", commit).splitlines())
    wanted = sorted({q for v in VARIANTS for p, _ in v.says for q in _matching(p, listed)})
    try:
        texts = _texts(checkout, commit, wanted)
    except (subprocess.SubprocessError, OSError) as exc:
        raise CheckoutError(f"git cat-file in {checkout} failed: {exc}") from None
    unmet = {v: v.unmet(listed, texts) for v in VARIANTS}
    parts, refused = [], []
    for part in PARTS:
        have = next((v for v in VARIANTS if v.part == part and v.runs and not unmet[v]), None)
        if have is not None:
            parts.append((part, have))
        else:
            refused.append((part, _refusal(checkout, commit, part, unmet, listed)))
    if refused and refused[0][0] == "judges" and len(refused) == 1:  # every other part runs as it is: a way out
        refused[0] = ("judges", refused[0][1] + ", or turn the judge off (judge: {enabled: false})")
    return CheckoutProtocol(commit, tuple(parts), tuple(refused))


def judge_protocol(checkout: str, commit: str) -> ProtocolPart:
    """The judges part of the checkout at ``commit`` (:func:`checkout_protocol`); CheckoutError (one line) where
    ptflow runs no judge of it."""
    protocol = checkout_protocol(checkout, commit)
    found = protocol.part("judges")
    if found is None:
        raise CheckoutError(dict(protocol.refusals)["judges"])
    return found


def _missing(checkout, commit: str, path: str) -> bool:
    proc = subprocess.run(
        ["git", "-C", str(checkout), "cat-file", "-e", f"{commit}:{path}"], capture_output=True, timeout=_GIT_TIMEOUT_S
    )
    return proc.returncode != 0


# ---- main's seeded final evaluation (the evaluation part EVAL_FINAL), as the checkout's own script says it -----------
# run_final_eval.sh (read at 13a49a0) answers two queries ptflow asks it, in a throwaway copy of its files at the
# commit: ``--default-seeds <task>`` (line 1 the seeds, line 2 ``1`` where the seed only drives sampling, so a greedy
# model gets the first seed only) and ``--check <task>`` (the final-eval script it would run; arenahardwriting and
# healthbench take evaluate_openrouter_final_eval.py where only OPENROUTER_API_KEY is set). Its per-stage max-tokens
# arguments are read from its text (STAGE_MAX_TOKENS_ARGS of the task's case arm). ptflow then runs each seed as an
# evaluation seed of its own (rule evaluate_seed) through that cascade, and the cell's mean as
# aggregate_seed_metrics.py computes it.

RUN_FINAL_EVAL = "src/eval/run_final_eval.sh"
DEFAULT_TEMPERATURE = "src/utils/default_temperature.py"  # "greedy <t>" or "sampling <t>" for a model dir
AGGREGATE_SEED_METRICS = "src/utils/aggregate_seed_metrics.py"
FINAL_EVAL_TRIES = (4, 3, 2)  # run_final_eval.sh's STAGE_MAX_RETRIES
OPENROUTER_SCRIPT = "evaluate_openrouter_final_eval.py"  # --check's answer where only OPENROUTER_API_KEY is set
GRADER_KEYS = ("OPENAI_API_KEY", "OPENROUTER_API_KEY")  # what --check looks at (set or not; never their values)
_QUERY_TIMEOUT_S = 60
_CASE_ARM = re.compile(r"^[ \t]*([\w|*-]+)\)\s*STAGE_MAX_TOKENS_ARGS=\(([^)]*)\)", re.MULTILINE)


@dataclass(frozen=True)
class FinalEval:
    """One task's seeded final evaluation as the checkout's run_final_eval.sh gives it: the final-eval script in the
    task's dir, the default seeds, whether the seed only drives sampling (a greedy model then gets the first seed
    only), and the max-tokens arguments of each cascade stage (stage 0: ``""``, the script's own default)."""

    script: str
    seeds: tuple[int, ...]
    seed_only_samples: bool
    stages: tuple[str, ...]
    sandbox: tuple[str, ...] = ()  # where the task's answer sandbox runs (apptainer, local); () where it has none

    def keys(self, own) -> list[str]:
        """The key names the script reads: OpenRouter's where --check chose its script, else the eval's own."""
        return ["OPENROUTER_API_KEY"] if self.script == OPENROUTER_SCRIPT else list(own)

    def call(self, seed: int | None) -> dict:
        """The fields of one seed's call (``CheckoutCall``, every cell alike: agents', baselines' and instruct
        cells'): the seed, and the script with each stage's arguments (``final``)."""
        sandbox = {"answer_sandbox": list(self.sandbox)} if self.sandbox else {}  # only there: gsm8k's params stay
        return {"seed": seed, "final": {"script": self.script, "stages": list(self.stages), **sandbox}}


def final_eval_paths(eval_dir: str) -> list[str]:
    """What a seeded final evaluation reads: the eval's dir, the templates and main's three scripts."""
    return [*eval_paths(eval_dir), RUN_FINAL_EVAL, DEFAULT_TEMPERATURE, AGGREGATE_SEED_METRICS]


def stage_max_tokens_args(text: str, task: str) -> tuple[str, ...] | None:
    """run_final_eval.sh's STAGE_MAX_TOKENS_ARGS for ``task`` (its case arm naming the task, else ``*``), or None."""
    arms = [(pattern.split("|"), args) for pattern, args in _CASE_ARM.findall(text)]
    for _names, args in [*(a for a in arms if task in a[0]), *(a for a in arms if "*" in a[0])]:
        try:
            return tuple(shlex.split(args))
        except ValueError:
            return None
    return None


@functools.cache
def final_eval(checkout: str, commit: str, eval_dir: str, graders: tuple[str, ...] = ()) -> FinalEval:
    """Ask the checkout's run_final_eval.sh at ``commit`` about ``eval_dir`` (``graders``: the grader keys set in the
    environment, by name). Run in a copy of its files at the commit (git archive: the script and the task's dir),
    with a throwaway POST_TRAIN_BENCH_CONTAINERS_DIR holding an empty vllm_debug.sif and a throwaway HF_HOME, which
    its setup_task checks for and the two queries never read. CheckoutError (one line) where it refuses, where the
    checkout's script has no --default-seeds, or where the task's per-stage arguments cannot be read."""
    where = f"the PostTrainBench checkout at {commit[:12]}: {RUN_FINAL_EVAL}"
    text = _texts(checkout, commit, [RUN_FINAL_EVAL]).get(RUN_FINAL_EVAL, "")
    if "--default-seeds" not in text:
        raise CheckoutError(f"{where} has no --default-seeds query (run_final_eval.sh without it, as at 214ccb4, is "
                            "not one ptflow runs: it cannot ask the checkout for its seeds)")  # fmt: skip
    sandbox = answer_sandbox.kinds(text, eval_dir, lambda path: not _missing(checkout, commit, path))
    if sandbox == ():  # the task's answers run in its answer sandbox, never bare: refused where the checkout lacks it
        raise CheckoutError(answer_sandbox.refusal(where, eval_dir))
    with tempfile.TemporaryDirectory(prefix="ptflow-final-eval-") as tmp:
        tree = Path(tmp, "checkout")
        tree.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(checkout), "archive", commit, RUN_FINAL_EVAL, EVAL_DIR.format(eval=eval_dir)],
            capture_output=True, timeout=_GIT_TIMEOUT_S,
        )  # fmt: skip
        if archive.returncode != 0:
            raise CheckoutError(f"{where}: git archive failed: {archive.stderr.decode(errors='replace').strip()}")
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True, timeout=_GIT_TIMEOUT_S)
        containers = Path(tmp, "containers")  # the query's own, thrown away: setup_task checks vllm_debug.sif exists
        containers.mkdir()
        (containers / "vllm_debug.sif").touch()
        env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
        env.update({k: "set" for k in graders})  # --check tests whether they are set, never their values
        env.update(POST_TRAIN_BENCH_CONTAINERS_DIR=str(containers), HF_HOME=str(Path(tmp, "hf_home")))

        def ask(mode: str) -> list[str]:
            proc = subprocess.run(["bash", RUN_FINAL_EVAL, mode, eval_dir], cwd=tree, env=env, capture_output=True,
                                  text=True, timeout=_QUERY_TIMEOUT_S)  # fmt: skip
            if proc.returncode != 0:
                said = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
                raise CheckoutError(f"{where} {mode} {eval_dir} refuses: {said}")
            return proc.stdout.strip().splitlines()

        seeds_out, script_out = ask("--default-seeds"), ask("--check")
    try:
        seeds = tuple(int(s) for s in seeds_out[0].split())
        only_samples = {"1": True, "0": False}[seeds_out[1].strip()]
        if not seeds or not script_out:
            raise ValueError
    except (IndexError, ValueError, KeyError):
        raise CheckoutError(f"{where} --default-seeds/--check {eval_dir} printed {seeds_out + script_out!r}, not "
                            "the seeds, 0/1 and a script") from None  # fmt: skip
    stages = stage_max_tokens_args(text, eval_dir)
    if stages is None or len(stages) != len(FINAL_EVAL_TRIES):
        raise CheckoutError(f"{where}: the per-stage max-tokens arguments (STAGE_MAX_TOKENS_ARGS) of {eval_dir} cannot "
                            f"be read from it ({len(FINAL_EVAL_TRIES)} stages expected)")  # fmt: skip
    return FinalEval(script_out[-1].strip(), seeds, only_samples, stages, sandbox or ())
