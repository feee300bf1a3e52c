"""A REAL image build: podman build (chroot isolation) from a `podman import`ed base, turned into a real .sqsh.

enroot is not installable here, so the .sqsh is made by the plan's other route, `podman export` + `mksquashfs` (the
same kind of file enroot writes; enroot runs mksquashfs itself). No registry is reachable, so the base image is a
tarball of this machine's /bin/sh and its libraries, imported with `podman import`. podman's containers.conf is
the one NOTES found necessary here (cgroups disabled); it is passed through CONTAINERS_CONF, /etc is not touched.
Missing Debian packages are installed with apt (root only); without them the test fails (with or without CI).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from ptflow.cluster import image_build, images
from ptflow.config.sites import RuntimeSpec
from tests.conftest import REPO
from tests.e2e.smk import snakemake
from tests.support import apt

TOOLS = {"podman": "podman", "mksquashfs": "squashfs-tools", "unsquashfs": "squashfs-tools"}
CONTAINERS_CONF = '[containers]\ndefault_ulimits = []\ncgroups = "disabled"\n[engine]\ncgroup_manager = "cgroupfs"\n'
BASE = "localhost/ptflow-test/base:1"


def _unavailable(reason: str) -> None:
    pytest.fail(f"podman image test cannot run: {reason}", pytrace=False)


@pytest.fixture(scope="module")
def tools():
    try:
        apt.ensure_tools(TOOLS)
    except apt.AptError as exc:
        _unavailable(str(exc))
    return {tool: shutil.which(tool) for tool in TOOLS}


@pytest.fixture
def podman_env(tmp_path, monkeypatch):
    conf = tmp_path / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def base_tarball(path: Path) -> Path:
    """A minimal rootfs: /bin/sh, mkdir and their shared libraries from this machine."""
    files: set[str] = set()
    for binary in ("/bin/sh", "/bin/mkdir"):
        real = os.path.realpath(binary)
        files |= {binary, real}
        out = subprocess.run(["ldd", real], capture_output=True, text=True, check=True).stdout
        files |= {tok for tok in out.split() if tok.startswith("/")}
    with tarfile.open(path, "w") as tar:
        for f in sorted(files):
            tar.add(os.path.realpath(f), arcname=f.lstrip("/"))
    return path


def make_site(tmp_path: Path, storage: Path) -> dict:
    return {
        "name": "podmantest",
        "scheduler": "local",
        "resources": {"default": {"threads": 1, "mem_mb": 1000, "runtime": 30}},
        "runtime": {
            "kind": "enroot-edf",
            "arch": "amd64",
            "images_dir": "images",  # relative: tests may; clusters use an absolute shared dir
            "mounts": [str(tmp_path)],
            "images": {"tiny": {"recipe": "tests/images/tiny.Dockerfile", "context": "tests/images"}},
            "build": {
                "podman_storage": str(storage),
                "podman_args": ["--isolation", "chroot", "--build-arg", f"BASE={BASE}"],
                "converter": "mksquashfs",
            },
        },
    }


def squash_listing(sqsh: Path) -> str:
    return subprocess.run(["unsquashfs", "-l", str(sqsh)], capture_output=True, text=True, check=True).stdout


def test_podman_build_to_real_sqsh(tools, podman_env, tmp_path):
    storage = Path("/dev/shm") / f"ptflow-test-{os.getpid()}"
    site = make_site(tmp_path, storage)
    rt = RuntimeSpec.from_dict({"site": site["name"], **site["runtime"]})
    assert images.builder_of(rt, rt.images["tiny"]) == "podman"
    digest = images.image_digest(rt, "tiny", rt.images["tiny"], REPO)
    out = tmp_path / "images" / "tiny.sqsh"
    plan = image_build.plan_build(rt, "tiny", out, digest=digest, recipe_root=REPO, workdir=tmp_path / "work")
    # The base goes into the same podman storage the build will use (the plan's storage.conf).
    for path, text in plan.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    env = {**podman_env, **plan.env}
    subprocess.run(["podman", "import", str(base_tarball(tmp_path / "base.tar")), BASE], check=True, env=env)
    lines: list[str] = []
    record = image_build.run_build(plan, tmp_path / "images" / "tiny.sqsh.json", log=lines.append)

    assert out.is_file() and record["bytes"] == out.stat().st_size > 0
    assert out.read_bytes()[:4] == b"hsqs"  # squashfs magic
    listing = squash_listing(out)
    assert "squashfs-root/opt/ptflow/marker.txt" in listing and "squashfs-root/bin/sh" in listing
    content = subprocess.run(
        ["unsquashfs", "-cat", str(out), "opt/ptflow/marker.txt"], capture_output=True, text=True, check=True
    ).stdout
    assert content.strip() == "built-by-ptflow-recipe"
    assert any(line.startswith("$ podman build") and "--isolation chroot" in line for line in lines)
    assert list(storage.iterdir()) == []  # the job's podman storage is gone, as on Alps' /dev/shm
    storage.rmdir()
    assert not any(p.name.startswith(".tiny.") for p in out.parent.iterdir())  # no temp image left


def test_workflow_image_and_edf_rules(tools, podman_env, tmp_path):
    """The `image` and `edf` rules through Snakemake: a real .sqsh, an EDF that parses, a rebuild on recipe change."""
    storage = Path("/dev/shm") / f"ptflow-test-wf-{os.getpid()}"
    site = make_site(tmp_path, storage)
    # The rule's podman storage is per job: the base is imported into a separate store that the build's
    # storage.conf lists under additionalimagestores (runtime.build.additional_image_stores).
    base_store = Path("/dev/shm") / f"ptflow-test-base-{os.getpid()}"
    conf = tmp_path / "base-storage.conf"
    conf.write_text(image_build.podman_storage_conf(base_store))
    subprocess.run(
        ["podman", "import", str(base_tarball(tmp_path / "base.tar")), BASE],
        check=True,
        env={**podman_env, "CONTAINERS_STORAGE_CONF": str(conf)},
    )
    site["runtime"]["build"]["additional_image_stores"] = [f"{base_store}/root"]
    site_file = tmp_path / "podmantest.yaml"
    site_file.write_text(yaml.safe_dump(site))
    workdir = tmp_path / "wd"
    workdir.mkdir()
    try:
        args = ("--config", f"site={site_file}", "--cores", "1", "images/tiny.sqsh", "images/edf/tiny.toml")
        snakemake(workdir, *args, env=podman_env)
        sqsh = workdir / "images" / "tiny.sqsh"
        assert "squashfs-root/opt/ptflow/marker.txt" in squash_listing(sqsh)
        edf = tomllib.loads((workdir / "images" / "edf" / "tiny.toml").read_text())
        assert edf["image"] == str(sqsh.resolve()) and edf["mounts"] == [str(tmp_path)]
        # cached: nothing to do on a second run
        again = snakemake(workdir, *args, "--dry-run", env=podman_env)
        assert "Nothing to be done" in again.stdout + again.stderr
    finally:
        shutil.rmtree(base_store, ignore_errors=True)
        shutil.rmtree(storage, ignore_errors=True)
