"""Rule posttrainbench_checkout: the checkout at its commit, and a marker of the paths the run uses.

A given ``path`` is verified (at the commit, tracked files unchanged: the cells read the work tree); a ``repo`` is
cloned at the commit into scratch (a CPU job where the network is reachable), into a staging dir renamed into place,
so a half-made clone is never taken for a checkout. The marker (written last, atomically) records the commit, where
the checkout is, the git object id of each used path (``ptflow.config.posttrainbench.object_ids``), and the
checkout's protocol part by part (``checkout_protocol``: a part ptflow does not run is refused in one line; the judges
part only where the run judges checkout cells, whose version it also records as ``judge_protocol``).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from ptflow.config.posttrainbench import (
    EVAL_DIR,
    EVAL_FINAL,
    JUDGE_DIR,
    MAIN_JUDGES_DIR,
    RUN_FINAL_EVAL,
    CheckoutError,
    checkout_protocol,
    git,
    object_ids,
)
from ptflow.files import write_json_atomic
from ptflow.stages.posttrainbench import judge_panels


def verify(location: str | Path, commit: str) -> None:
    """The checkout is at ``commit`` and its tracked files are as committed; CheckoutError (one line) else."""
    where = Path(location)
    if not (where / ".git").exists():
        raise CheckoutError(
            f"{where} is not a git checkout of PostTrainBench (no .git); clone it there or fix the path"
        )
    head = git(where, "rev-parse", "HEAD")
    if head != commit:
        raise CheckoutError(
            f"the PostTrainBench checkout {where} is at {head[:12]}, not posttrainbench.commit {commit[:12]}: "
            f"`git -C {where} checkout {commit}`, or pin the commit it is at"
        )
    changed = git(where, "status", "--porcelain", "--untracked-files=no")
    if changed:
        first = changed.splitlines()[0].strip()
        raise CheckoutError(
            f"the PostTrainBench checkout {where} has local changes ({first} …): the run would not be the commit's; "
            "commit or stash them"
        )


def clone(repo: str, commit: str, location: str | Path, log=print) -> None:
    """``git clone`` into a staging dir beside ``location``, ``checkout --detach commit``, then rename into place."""
    dest = Path(location)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.clone-", dir=dest.parent))
    try:
        t0 = time.time()
        git(staging.parent, "clone", "--quiet", "--no-checkout", "--", repo, str(staging))
        try:
            git(staging, "checkout", "--quiet", "--detach", commit)
        except CheckoutError:
            raise CheckoutError(
                f"{repo} has no commit {commit[:12]} (cloned its default refs); check posttrainbench.commit"
            ) from None
        if dest.exists():  # a checkout elsewhere than the commit (verified and refused before): replaced whole
            shutil.rmtree(dest)
        staging.rename(dest)
        log(f"cloned {repo} at {commit[:12]} into {dest} in {time.time() - t0:.1f} s")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _panel_paths(paths: list[str], panel) -> list[str]:
    """What a checkout's own panel reads for each judged eval (``checkout_paths`` of its panel module,
    ptflow.stages.posttrainbench.judge_panels; a judged eval's paths hold its ``benchmark.txt``): known only once the
    checkout is here, so a cloned checkout's rule adds them, and each vote's params get their own object ids (not a
    parent folder's)."""
    prefix = EVAL_DIR.split("{eval}")[0]
    judged = [p[len(prefix) : -len("/benchmark.txt")] for p in paths
              if p.startswith(prefix) and p.endswith("/benchmark.txt")]  # fmt: skip
    return [q for name in judged for q in panel.checkout_paths(name)]


def make_checkout(spec: dict, marker: str | Path, log=print) -> dict:
    """spec: ``{commit, location, repo (None: a given path), paths}``. Writes the marker; returns its content."""
    location, commit = spec["location"], spec["commit"]
    if spec.get("repo"):
        try:
            verify(location, commit)
            log(f"{location} is already the checkout of {commit[:12]}")
        except CheckoutError:
            clone(spec["repo"], commit, location, log)
    verify(location, commit)
    # every part ptflow runs, the judges where checkout cells are judged (refused at planning where the checkout was
    # here already)
    judged = JUDGE_DIR in spec["paths"] or MAIN_JUDGES_DIR in spec["paths"]
    parts = checkout_protocol(str(Path(location).resolve()), commit)
    parts.check(judged)
    protocol = parts.part("judges") if judged else None
    panel = judge_panels.adapter(protocol.version) if protocol else None
    paths = spec["paths"]
    if panel is not None:  # its panel's votes key on what each judge reads (a clone's cells planned d27a95e's dir)
        paths = sorted({*(p for p in paths if p not in (JUDGE_DIR, MAIN_JUDGES_DIR)), *_panel_paths(paths, panel)})
    objects = object_ids(location, commit, paths)
    evals_planned = any(p.startswith(EVAL_DIR.format(eval="")) for p in spec["paths"])
    if parts.part("evaluation") == EVAL_FINAL and evals_planned and RUN_FINAL_EVAL not in spec["paths"]:
        # a clone this run made: its cells were planned as one-shot evaluations, before its files were here
        raise CheckoutError(
            f"the PostTrainBench checkout at {commit[:12]} has PostTrainBench main's seeded final evaluation "
            f"({RUN_FINAL_EVAL}), whose seeds and cascade ptflow reads from the checkout when the workflow is parsed; "
            f"it is in {location} now: run the workflow again"
        )
    data = {
        "commit": commit,
        "path": str(Path(location).resolve()),
        "repo": spec.get("repo"),
        "objects": objects,
        "protocol": {part: version for part, version in parts.versions().items() if judged or part != "judges"},
        **({"judge_protocol": protocol.version} if protocol else {}),
        "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_json_atomic(marker, data)
    log(f"PostTrainBench at {commit[:12]} in {location}: {len(objects)} path(s) used by this run")
    return data
