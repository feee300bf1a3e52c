"""Publishing into the hub cache layout, read back through huggingface_hub's own API."""

import json
import os

import pytest

from ptflow.cluster import hfcache


def make_repo(tmp_path, content=b"weights"):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True, exist_ok=True)
    (src / "config.json").write_text(json.dumps({"a": 1}))
    (src / "sub" / "model.safetensors").write_bytes(content)
    return src


def test_publish_gives_real_hub_layout(tmp_path):
    from huggingface_hub import scan_cache_dir

    hf_home = tmp_path / "hf"
    commit = hfcache.publish_local_repo(hf_home, "org/tiny", "model", make_repo(tmp_path))
    folder = hf_home / "hub" / "models--org--tiny"
    assert (folder / "refs" / "main").read_text() == commit
    link = folder / "snapshots" / commit / "sub" / "model.safetensors"
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert link.read_bytes() == b"weights"
    info = scan_cache_dir(hf_home / "hub")
    (repo,) = info.repos
    assert repo.repo_id == "org/tiny" and repo.repo_type == "model"
    assert {r.commit_hash for r in repo.revisions} == {commit}


def test_snapshot_resolved_offline_and_described(tmp_path):
    hf_home = tmp_path / "hf"
    commit = hfcache.publish_local_repo(hf_home, "org/data", "dataset", make_repo(tmp_path))
    snap = hfcache.snapshot_path(hf_home, "org/data", "dataset")
    assert snap.name == commit
    entry = hfcache.describe_repo(hf_home, "org/data", "dataset", "main", "local")
    assert entry["commit"] == commit
    assert {f["path"] for f in entry["files"]} == {"config.json", "sub/model.safetensors"}
    assert entry["bytes"] == sum(f["bytes"] for f in entry["files"])


def test_publish_is_content_addressed_and_idempotent(tmp_path):
    hf_home = tmp_path / "hf"
    src = make_repo(tmp_path)
    first = hfcache.publish_local_repo(hf_home, "org/tiny", "model", src)
    assert hfcache.publish_local_repo(hf_home, "org/tiny", "model", src) == first
    changed = hfcache.publish_local_repo(hf_home, "org/tiny", "model", make_repo(tmp_path, b"other"))
    assert changed != first
    assert hfcache.snapshot_path(hf_home, "org/tiny", "model").name == changed


def test_missing_repo_is_not_found_offline(tmp_path):
    from huggingface_hub.errors import LocalEntryNotFoundError

    with pytest.raises(LocalEntryNotFoundError):
        hfcache.snapshot_path(tmp_path / "hf", "org/absent", "model")
