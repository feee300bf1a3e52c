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

import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

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
# (ptflow.stages.posttrainbench.data_probe), with the inspect_evals that runs it (ptflow's 0.26 clones bfcl's data
# from GitHub instead of this hub dataset).
EVAL_HUB_DATA: dict[str, tuple[HubData, ...]] = {
    "gsm8k": (HubData("openai/gsm8k", "main", ("test", "train")),),
    "aime2025": (HubData("math-ai/aime25", None, ("test",)),),
    "humaneval": (HubData("openai/openai_humaneval", "openai_humaneval", ("test",)),),
    "gpqamain": (HubData("Idavidrein/gpqa", "gpqa_main", ("train",), gated=True),),
    "bfcl": (HubData("gorilla-llm/Berkeley-Function-Calling-Leaderboard", "exec_simple", ("train",)),),
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


# ---- the judge protocols ptflow knows ----------------------------------------------------------------------------
# Which judge a checkout has is read from the checkout itself, not from its commit id alone (a fork or a rebased
# branch keeps the protocol under another id): the files of its judge directory, and in them the command-line
# facts ptflow reproduces (the models, the CLIs' flags, the verdict file names). A fact ptflow does not reproduce
# may change freely; one it does may not, or ptflow would judge as a protocol the checkout no longer has.


@dataclass(frozen=True)
class PtbJudgeProtocol:
    """A PostTrainBench judge protocol: the commit it was read at, and the facts a checkout must show to have it."""

    version: str  # PostTrainBench's name for it (v1.0, v1.1)
    commit: str  # the commit of aisa-group/PostTrainBench whose judge this is (12 hex digits)
    present: tuple[str, ...]  # paths under JUDGE_DIR that must be there
    absent: tuple[str, ...]  # paths under JUDGE_DIR that must not
    says: tuple[tuple[str, str], ...]  # (path under JUDGE_DIR, text the file holds)

    @property
    def label(self) -> str:
        return f"{self.commit[:7]} ({self.version})"

    def unmet(self, listed: set[str], texts: dict[str, str]) -> list[str]:
        """The facts the checkout does not show, each as a few words (empty: it has this protocol)."""
        out = [f"no {p}" for p in self.present if p not in listed]
        out += [f"has {p}" for p in self.absent if p in listed]
        out += [f"{p} lacks {text!r}" for p, text in self.says if p in listed and text not in texts.get(p, "")]
        return out


JUDGE_V10 = PtbJudgeProtocol(
    "v1.0",
    "9082063a62e1",
    present=("get_judge_prompt.py", "prompt.txt"),
    absent=("run_judge.sh", "aggregate_judgement.py", "prompt_api_judge.md"),
    says=(
        ("get_judge_prompt.py", '"--benchmark"'),  # the benchmark's name (benchmark.txt), not its id
        ("prompt.txt", "contamination_judgement.txt"),
        ("prompt.txt", "disallowed_model_judgement.txt"),
    ),
)
JUDGE_V11 = PtbJudgeProtocol(
    "v1.1",
    "d27a95e9ffd8",
    present=(
        "run_judge.sh",
        "get_judge_prompt.py",
        "prompt.txt",
        "prompt_api_judge.md",
        "aggregate_judgement.py",
        "judge_tools/contamination_check.py",
        "judge_tools/model_identity_check.py",
    ),
    absent=(),
    says=(
        ("get_judge_prompt.py", '"--benchmark-id"'),
        ("get_judge_prompt.py", '"--kind"'),
        ("get_judge_prompt.py", '"api"'),
        ("prompt.txt", "judgement.json"),
        ("prompt_api_judge.md", "disallowed_api_usage"),
        ("aggregate_judgement.py", 'API_JUDGE_NAME = "api"'),
        # the command lines, sign-ins and file names ptflow.stages.posttrainbench.judge_v11 reproduces
        (
            "run_judge.sh",
            "codex --search -a never exec --json -c model_reasoning_summary=detailed -c "
            'model_reasoning_effort=xhigh --skip-git-repo-check --yolo --model "gpt-5.4"',
        ),
        ("run_judge.sh", 'opencode run --model "opencode/kimi-k2.6" --format json'),
        ("run_judge.sh", 'CODEX_AUTH_SRC="$REPO_ROOT/agents/codex_non_api/auth.json"'),
        ("run_judge.sh", '--bind "${CODEX_AUTH_SRC}:/home/ben/.codex/auth.json"'),
        ("run_judge.sh", 'forced_login_method = "chatgpt"'),
        ("run_judge.sh", '--env CODEX_API_KEY=""'),
        ("run_judge.sh", '--env OPENAI_API_KEY=""'),
        ("run_judge.sh", "OPENCODE_API_KEY"),
        ("run_judge.sh", "--kind api"),
        ("run_judge.sh", "judge_tools/reference_configs"),
        ("run_judge.sh", "judgement_gpt5_4_rerun.json"),
        ("run_judge.sh", "judgement_kimi_rerun.json"),
        ("run_judge.sh", "judgement_api_rerun.json"),
        ("run_judge.sh", "judge_result_rerun.json"),
    ),
)
JUDGE_PROTOCOLS = (JUDGE_V10, JUDGE_V11)


def _judge_texts(checkout: str | Path, commit: str, paths: list[str]) -> dict[str, str]:
    """The text of each path under JUDGE_DIR at ``commit``, in one ``git cat-file --batch``."""
    request = "".join(f"{commit}:{JUDGE_DIR}/{p}\n" for p in paths).encode()
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


@functools.cache
def judge_protocol(checkout: str, commit: str) -> PtbJudgeProtocol:
    """The judge protocol of the checkout at ``commit`` (read with git, cached: a commit's files never change);
    CheckoutError (one line saying what was found) for a judge ptflow does not know."""
    listing = git(checkout, "ls-tree", "-r", "--name-only", commit, "--", JUDGE_DIR)
    listed = {line[len(JUDGE_DIR) + 1 :] for line in listing.splitlines()}
    wanted = sorted({p for proto in JUDGE_PROTOCOLS for p, _ in proto.says if p in listed})
    try:
        texts = _judge_texts(checkout, commit, wanted)
    except (subprocess.SubprocessError, OSError) as exc:
        raise CheckoutError(f"git cat-file in {checkout} failed: {exc}") from None
    unmet = {proto: proto.unmet(listed, texts) for proto in JUDGE_PROTOCOLS}
    for proto, missing in unmet.items():
        if not missing:
            return proto
    nearest = min(JUDGE_PROTOCOLS, key=lambda proto: len(unmet[proto]))
    ids = object_ids(
        checkout, commit, [f"{JUDGE_DIR}/{p}" for p in ("run_judge.sh", "get_judge_prompt.py") if p in listed]
    )
    found = ", ".join(f"{p} {oid[:12]}" for p, oid in ids.items()) or f"no files under {JUDGE_DIR}"
    known = " and ".join(proto.label for proto in JUDGE_PROTOCOLS)
    raise CheckoutError(
        f"the PostTrainBench checkout at {commit[:12]} has a judge ptflow does not know ({found}; nearest "
        f"{nearest.label}: {'; '.join(unmet[nearest][:2])}); ptflow knows {known}: pin a commit with one of them, "
        "or turn the judge off (judge: {enabled: false})"
    )


def _missing(checkout, commit: str, path: str) -> bool:
    proc = subprocess.run(
        ["git", "-C", str(checkout), "cat-file", "-e", f"{commit}:{path}"], capture_output=True, timeout=_GIT_TIMEOUT_S
    )
    return proc.returncode != 0
