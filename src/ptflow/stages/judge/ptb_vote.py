"""A vote of a PostTrainBench checkout's own panel: one run of one of its judges on a cell of the checkout, as the
checkout runs that judge (d27a95e's ``run_judge.sh``: its ``gpt``, ``kimi`` or ``api`` judge; main's
``src/judges/judge_lib.sh``: one of ``ALL_JUDGES``), through the site's runtime.

Everything the judge sees and runs is the adapter's, the panel module of the vote's protocol
(:mod:`ptflow.stages.posttrainbench.judge_panels`: ``judge_run_v11``/``judge_v11``, ``judge_main``, whose unit tests
prove them equal to the checkout's scripts): the home from ``judge_home_entries`` (the task dir's files
hard-linked), the prompt from the checkout's ``get_judge_prompt.py``, the CLI's argv (a CLI pinned into the home
installed there first, by the adapter's command in the same image, or linked from a prefix given), its environment
and binds, and how a vote reads its verdict. This room adds what ptflow runs around it: the home's dir beside the
kept workspace, the runtime, the CLI's own settings, the masking, the logs. The ChatGPT sign-in (``auth.json``) is
bound onto the home's ``.codex/auth.json`` (a container) or linked there (a venv site: the judge runs on the host with
that home as ``$HOME``), never copied; its token values are masked in everything kept. The judge's
``task/judgement.json`` is kept (masked) in the vote's dir as ``judgement.json``; ``ptflow export --posttrainbench``
writes it under the checkout's name.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ptflow.files import link_tree, write_text_atomic
from ptflow.keys import Masker, run_masked
from ptflow.specs import StageRuntime
from ptflow.stages.judge import sign_in
from ptflow.stages.judge.ballot import Ballot, JudgedCell, fresh_root
from ptflow.stages.judge.trace import readable_trace
from ptflow.stages.posttrainbench import judge_panels

STDOUT = "judge_stdout.log"  # run_judge.sh's judge_output_<name>.json (the CLI's --json events)
STDERR = "judge_stderr.log"
INSTALL_LOG = "cli_install.log"  # the pinned CLI's install (main's npm install of @openai/codex@<version>)


def runs(vote: dict | None) -> bool:
    """Whether ``vote`` is one of a checkout panel's (its protocol has a panel module)."""
    return judge_panels.adapter((vote or {}).get("protocol")) is not None


def masker_for(judge, auth: str, env: dict[str, str], keys=()) -> Masker:
    """The values no kept file may hold: the judge's key, the job's secret-looking variables, and every token of the
    subscription's auth.json (read when the vote starts: codex may rotate them, the old ones are masked too)."""
    base = Masker.for_env(env, [*keys, *([judge.key] if judge.key else [])])
    return sign_in.masking(base, auth) if judge.subscription else base


def _link(source: Path, dest: Path) -> None:
    link_tree(source, dest)


def verdict(judged: JudgedCell, ballot: Ballot, kept: Path, runtime: StageRuntime | None, log) -> dict:
    """Run the vote's judge in a home of its own beside the kept workspace; ``{field: bool, ..., reason}`` from its
    judgement.json, or ``{"status": "no_verdict", "reason": ...}``. ``ballot.vote``: ``{judge, run, fields,
    protocol, auth_json, base_url, ...}`` (the panel module's ``vote_settings`` too); ``judged.checkout``: ``{path,
    eval_dir}``; ``kept``: the vote's dir."""
    vote, checkout = ballot.vote, judged.checkout
    panel = judge_panels.adapter(vote["protocol"])
    judge = panel.panel_judge(vote["judge"], checkout["path"])
    workspace = judged.workspace
    if workspace is None:
        return judged.no_workspace()
    auth = vote.get("auth_json") or str(panel.subscription_auth(checkout["path"]))
    if judge.subscription and not Path(auth).is_file():
        return {"status": "no_verdict", "reason": f"no subscription sign-in at {auth} (posttrainbench.judge.auth_json)"}
    root = fresh_root(workspace, ballot.label)  # the same filesystem as the workspace: its files linked
    try:
        outcome = _run(judged, judge, vote, auth, kept, runtime, root, log)
        if (kept / STDOUT).is_file():
            text = (kept / STDOUT).read_text(errors="replace")
            write_text_atomic(
                kept / "judge_trace.md", readable_trace(text, "", masker_for(judge, auth, dict(os.environ)), judge.cli)
            )
        return outcome
    finally:
        shutil.rmtree(root, ignore_errors=True)  # the auth.json link goes, the file it points at stays


def cli_settings(judge, where: Path, base_url: str | None) -> dict[str, str]:
    """What the judge's CLI needs beyond run_judge.sh's environment where ptflow, not PostTrainBench's image, set it
    up, never inside the judge's home (which stays run_judge.sh's): codex reads ``OPENAI_BASE_URL`` (with the
    ChatGPT sign-in too); opencode gets ptflow's settings (its XDG dirs under ``where``: the model declared, no
    models.dev fetch or plugin install, the provider's baseURL), over which the task dir's opencode.json (the key)
    is merged. ``base_url``: ``posttrainbench.judge.base_url`` (a gateway, or the tests' stand-in)."""
    from ptflow.stages.train.agent.clis import CLIS
    from ptflow.stages.train.agent.clis.base import CellHome

    if judge.cli == "codex":
        return {"OPENAI_BASE_URL": base_url} if base_url else {}
    cli = CLIS[judge.cli]
    where.mkdir(parents=True, exist_ok=True)
    ctx = {"model": judge.model, "task_dir": "", "base_url": base_url, "root": False, "host_values": None}
    return {**cli.env, **cli.write_home(CellHome(where, str(where), ""), ctx)}


def _run(judged: JudgedCell, judge, vote: dict, auth: str, kept: Path, runtime: StageRuntime | None, root: Path,
         log) -> dict:  # fmt: skip
    from ptflow.cluster.runtime import HOME_BOUND, container_env, runtime_argv

    checkout, panel = judged.checkout, judge_panels.adapter(vote["protocol"])
    home, job_tmp = root / "home", root / "tmp"
    job_tmp.mkdir()
    entries = panel.judge_home_entries(judge, checkout["path"], checkout["eval_dir"], judged.workspace,
                                       judged.trace_md)  # fmt: skip
    panel.build_judge_home(entries, home, link=_link)
    try:
        prompt = panel.judge_prompt(checkout["path"], judge, checkout["eval_dir"], judged.cell.get("model"), vote,
                                    env=os.environ)  # fmt: skip
    except panel.PtbVerdictError as exc:
        return {"status": "no_verdict", "reason": str(exc)}
    container = runtime is not None and runtime.kind in HOME_BOUND
    seen = panel.HOME if container else str(home)  # the home as the CLI sees it
    env = judge.env(os.environ.get("PATH", ""), dict(os.environ))
    binds = judge.binds(checkout["path"], job_tmp, auth)
    env |= cli_settings(judge, root / "cli", vote.get("base_url"))
    if (root / "cli").is_dir():  # the CLI's own settings, outside the judge's home, at the same path inside
        binds.append((str(root / "cli"), str(root / "cli")))

    def wrap(command: list[str], env: dict[str, str], binds: list[tuple[str, str]]):
        if container:  # the checkout's apptainer exec: the home at /home/ben, the binds at their places
            command = runtime_argv(
                runtime.site_runtime, command, image=runtime.image, job_dir=str(home), agent_cell=True, gpus=0,
                binds=[f"{src}:{dest}" for src, dest in binds], workdir=f"{panel.HOME}/{panel.TASK}",
            )  # fmt: skip
            return command, container_env(runtime.site_runtime, env)
        # on the host: this home is $HOME, the private tmp as TMPDIR
        env = {**env, "HOME": str(home), "TMPDIR": str(job_tmp)}
        return (runtime_argv(runtime.site_runtime, command) if runtime is not None else command), env

    if judge.pin:  # a CLI pinned into the home (main's .codex-cli-<version>): linked from a given prefix, or installed
        given = vote.get("codex_cli")
        if given:
            (home / judge.pin).symlink_to(given)
            binds.append((given, given))  # the link's target, at its own path inside
        elif not os.access(home / judge.pin / "bin" / judge.cli, os.X_OK):
            command, install_env = wrap(judge.install_argv(seen), judge.install_env(os.environ.get("PATH", "")),
                                        [(str(job_tmp), "/tmp")])  # fmt: skip
            log(f"judge {judge.id}: installing its pinned CLI: $ " + " ".join(judge.install_argv(seen)))
            with open(kept / INSTALL_LOG, "wb") as out:
                try:
                    run_masked(command, masker_for(judge, auth, dict(os.environ)), out, out, cwd=home,
                               env=install_env)  # fmt: skip
                except FileNotFoundError:
                    pass  # no installer here: the check below says what is missing
        if not os.access(home / judge.pin / "bin" / judge.cli, os.X_OK):
            return {"status": "no_verdict", "reason": f"judge {judge.id}: the install of its pinned CLI failed (no "
                    f"{judge.pin}/bin/{judge.cli} in the sandbox home; see {kept}/{INSTALL_LOG}, or give "
                    "posttrainbench.judge.codex_cli)"}  # fmt: skip
    if not container and judge.subscription:  # the sign-in linked where the bind puts it
        placeholder = home / panel.AUTH_IN_HOME
        placeholder.unlink(missing_ok=True)
        placeholder.symlink_to(auth)
    command, env = wrap(judge.argv(prompt, seen), env, binds)
    masker = masker_for(judge, auth, {**os.environ, **env})
    shown = [a if a != prompt else "<judge prompt>" for a in command]
    log(f"judge {judge.id} ({judge.cli}, {judge.model}, PostTrainBench {panel.LABEL}) in {home}: $ " + " ".join(shown))
    with open(kept / STDOUT, "wb") as so, open(kept / STDERR, "wb") as se:
        try:
            rc = run_masked(command, masker, so, se, cwd=home / panel.TASK, env=env)
        except FileNotFoundError:
            return {"status": "no_verdict", "reason": f"the judge CLI {command[0]!r} is not installed here"}
    written = home / panel.TASK / panel.VERDICT_FILE
    if written.is_file():
        masker.copy_file(written, kept / panel.VERDICT_FILE)
    text = (kept / panel.VERDICT_FILE).read_text() if written.is_file() else None
    return panel.vote_outcome(judge, text, f"exited {rc}", f" (see {kept}/judge_trace.md)")
