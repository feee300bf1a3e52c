"""The job's private HF cache view: real fuse-overlayfs when /dev/fuse is usable, else a real copy."""

import shutil
from pathlib import Path

import pytest

from ptflow.cluster import hfcache, hfview
from tests.support import apt


@pytest.fixture
def shared(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("{}")
    home = tmp_path / "shared_hf"
    hfcache.publish_local_repo(home, "org/m", "model", src)
    return home


def _has_fuse_overlayfs(tool):
    """As if fuse-overlayfs were installed, so the device check is what decides (it may be absent here)."""
    return f"/usr/bin/{tool}" if tool == "fuse-overlayfs" else shutil.which(tool)


def _check_private(view, shared):
    snap = hfcache.snapshot_path(view.path, "org/m", "model")  # hub layout (relative symlinks) still resolves
    assert (snap / "config.json").read_text() == "{}"
    (view.path / "written-by-job").write_text("x")
    assert not (shared / "written-by-job").exists()  # the shared cache is never written


@pytest.fixture
def fuse_overlayfs():
    """fuse-overlayfs installed (Debian's package) as the Slurm tests install Slurm. This kind of machine has a FUSE
    device: one without (a container started without /dev/fuse) fails here, with or without CI."""
    if not Path("/dev/fuse").exists():
        pytest.fail("/dev/fuse does not exist: the machine (or container) has no FUSE device", pytrace=False)
    apt.ensure_tools({"fuse-overlayfs": "fuse-overlayfs", "fusermount3": "fuse3"})
    problem = hfview.fuse_problem()
    assert problem is None, problem


def test_overlay_when_fuse_usable(fuse_overlayfs, shared, tmp_path):
    lines = []
    with hfview.hf_view(shared, tmp_path / "job", log=lines.append) as view:
        assert view.method == "overlay"
        _check_private(view, shared)
        assert (tmp_path / "job" / "upper" / "written-by-job").exists()  # the write went to the private upper
    assert any("fuse-overlayfs over" in line for line in lines)
    assert not (tmp_path / "job").exists()


def test_copy_when_fuse_not_usable(shared, tmp_path):
    lines = []
    with hfview.hf_view(
        shared, tmp_path / "job", fuse_device=tmp_path / "no-fuse", which=_has_fuse_overlayfs, log=lines.append
    ) as view:
        assert view.method == "copy" and "no-fuse does not exist" in view.reason
        _check_private(view, shared)
    assert any("HF cache view: copy of" in line and "no overlay" in line for line in lines)


def test_copy_when_fuse_overlayfs_missing(shared, tmp_path):
    with hfview.hf_view(
        shared, tmp_path / "job", which=lambda t: None if t == "fuse-overlayfs" else shutil.which(t), log=lambda _: None
    ) as view:
        assert view.method == "copy" and view.reason == "fuse-overlayfs is not on PATH"


def test_overlay_required_but_unusable_is_an_error(shared, tmp_path):
    with pytest.raises(RuntimeError, match="hf_view = overlay but .*does not exist"):
        hfview.open_view(
            shared,
            tmp_path / "job",
            method="overlay",
            fuse_device=tmp_path / "nope",
            which=_has_fuse_overlayfs,
            log=print,
        )
