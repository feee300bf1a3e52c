"""The Hugging Face hub cache under HF_HOME, and the marker that says what a workflow needs from it.

Layout (as huggingface_hub writes it): ``$HF_HOME/hub/<type>s--<org>--<name>/{blobs,refs,snapshots}``; each
snapshot file is a relative symlink to a content-addressed blob, ``refs/<revision>`` holds the commit.
Repos that this workflow *creates* (the embedded default's tiny models and datasets) are published into the same
layout, so everything downstream loads them through the ordinary hub API with ``HF_HUB_OFFLINE=1``. Their commit
id is a SHA-1 over the file contents, computed here: it is not a hub commit, and the marker says so
(``source: local``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from ptflow.files import atomic_path, sha256_file, write_json_atomic, write_text_atomic

REPO_TYPES = ("model", "dataset")


def hub_dir(hf_home: str | Path) -> Path:
    return Path(hf_home) / "hub"


def repo_folder(hf_home: str | Path, repo_id: str, repo_type: str) -> Path:
    return hub_dir(hf_home) / f"{repo_type}s--{repo_id.replace('/', '--')}"


def publish_local_repo(
    hf_home: str | Path, repo_id: str, repo_type: str, src_dir: str | Path, revision: str = "main"
) -> str:
    """Publish the files of ``src_dir`` as ``repo_id@revision`` in the hub cache layout; return the commit id.

    Blobs and the snapshot are written before ``refs/<revision>`` is (atomically) updated, so a crash leaves the
    cache as it was for every reader.
    """
    if repo_type not in REPO_TYPES:
        raise ValueError(f"repo_type must be one of {REPO_TYPES}, not {repo_type!r}")
    src = Path(src_dir)
    files = sorted(p for p in src.rglob("*") if p.is_file())
    if not files:
        raise ValueError(f"nothing to publish: {src} holds no files")
    digests = {p.relative_to(src).as_posix(): sha256_file(p) for p in files}
    commit = hashlib.sha1("".join(f"{k}\0{v}\n" for k, v in sorted(digests.items())).encode()).hexdigest()

    folder = repo_folder(hf_home, repo_id, repo_type)
    blobs = folder / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for rel, digest in digests.items():
        blob = blobs / digest
        if not blob.exists():
            with atomic_path(blob) as tmp:
                shutil.copyfile(src / rel, tmp)

    snapshot = folder / "snapshots" / commit
    if not snapshot.exists():
        snapshot.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{commit}.", dir=snapshot.parent))
        for rel, digest in digests.items():
            link = staging / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            # Relative link, as huggingface_hub makes it, so the cache can be moved or mounted elsewhere.
            link.symlink_to(os.path.relpath(blobs / digest, snapshot / Path(rel).parent))
        try:
            os.rename(staging, snapshot)
        except OSError:  # another writer published the same content first
            shutil.rmtree(staging, ignore_errors=True)

    write_text_atomic(folder / "refs" / revision, commit)
    return commit


def snapshot_path(hf_home: str | Path, repo_id: str, repo_type: str, revision: str = "main") -> Path:
    """Local snapshot of a cached repo, resolved by huggingface_hub without the network."""
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(
            repo_id,
            repo_type=repo_type,
            revision=revision,
            cache_dir=str(hub_dir(hf_home)),
            local_files_only=True,
        )
    )


def describe_repo(hf_home: str | Path, repo_id: str, repo_type: str, revision: str, source: str) -> dict:
    """Marker entry for one repo: revision, resolved commit, files and bytes, read back from the cache."""
    snap = snapshot_path(hf_home, repo_id, repo_type, revision)
    files = []
    for p in sorted(snap.rglob("*")):
        if p.is_file():
            files.append({"path": p.relative_to(snap).as_posix(), "bytes": p.stat().st_size})
    return {
        "repo": repo_id,
        "repo_type": repo_type,
        "revision": revision,
        "commit": snap.name,
        "source": source,
        "files": files,
        "bytes": sum(f["bytes"] for f in files),
        "snapshot": str(snap),
    }


def write_marker(path: str | Path, hf_home: str | Path, repos: list[dict], eval_data: list[dict] = ()) -> dict:
    marker = {
        "hf_home": str(Path(hf_home).resolve()),
        "repos": repos,
        "bytes": sum(r["bytes"] for r in repos),
    }
    if eval_data:  # only then, so a matrix without eval data keeps its marker as it was
        marker["eval_data"] = list(eval_data)
    write_json_atomic(path, marker)
    return marker


# ---- what a matrix needs from the hub, and whether it can get it (preflight) ----


def hub_repos_needed(cfg) -> list[tuple[str, str, str]]:
    """(repo_type, repo_id, revision) of every hub repo the matrix needs (local ones are made, not fetched)."""
    models = {c.model for c in cfg.training_cells() + cfg.cells}
    out = {("model", cfg.models[m].id, cfg.models[m].revision) for m in models if cfg.models[m].source == "hub"}
    out |= {("model", m.id, m.revision) for m in map(cfg.evaluated_model, cfg.cells) if m.source == "hub"}
    for cell in cfg.cells:
        ds = cfg.evals[cell.eval].dataset
        if ds and ds["source"] == "hub":
            out.add(("dataset", ds["repo"], ds["revision"]))
    return sorted(out)


def missing_repos(hf_home: str | Path, repos: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Those of ``repos`` not complete in the cache, checked without the network."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    missing = []
    for repo_type, repo_id, revision in repos:
        try:
            snapshot_path(hf_home, repo_id, repo_type, revision)
        except LocalEntryNotFoundError:
            missing.append((repo_type, repo_id, revision))
    return missing


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub endpoint answers a TCP connection (HF_ENDPOINT honoured); no request is sent."""
    import os
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout):
            return True
    except OSError:
        return False


def cannot_download(env=None, reachable=hub_reachable) -> str | None:
    """Why nothing can be downloaded from here (HF_HUB_OFFLINE set, hub unreachable), or None when it can."""
    import os

    env = os.environ if env is None else env
    if str(env.get("HF_HUB_OFFLINE", "")).lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    return None if reachable() else "the hub is unreachable from here"


def offline_problem(hf_home, repos, env=None, reachable=hub_reachable) -> str | None:
    """ONE line naming every missing repo when they cannot be downloaded (offline or hub unreachable)."""
    missing = missing_repos(hf_home, repos)
    if not missing:
        return None
    why = cannot_download(env, reachable)
    if why is None:
        return None  # the cache rules will download them (in CPU jobs)
    names = ", ".join(f"{t} {r}@{rev}" for t, r, rev in missing)
    return (
        f"HF cache {hf_home} lacks {len(missing)} repo(s) and {why}: {names}; download them where the network "
        "is reachable (snakemake ... hf_cache on a node with internet) or point paths.hf_home at a cache that has them"
    )
