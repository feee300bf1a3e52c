"""Image build plans (argv per site), cache keys, tool errors and the EDF file. Real builds: tests/integration."""

import tomllib

import pytest

from ptflow.cluster import images
from ptflow.config.sites import load_site
from tests.conftest import REPO

SITES = REPO / "config" / "sites"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("PTFLOW_ACCOUNT", "x")
    monkeypatch.setenv("USER", "alice")


def site(name):
    return load_site(name, SITES).raw


def test_alps_dockerfile_is_podman_build_then_enroot_import(tmp_path):
    """Alps guide: podman storage in /dev/shm/$USER, podman build, enroot import -x mount ... podman://localhost/..."""
    raw = site("alps")
    digest = images.image_digest(raw, "ngc-ray", images.image_spec(raw, "ngc-ray"), REPO)
    plan = images.plan_build(
        raw, "ngc-ray", "/capstor/i/ngc-ray.sqsh", digest=digest, recipe_root=REPO, workdir=tmp_path, euid=1000
    )
    build, imp = plan.steps
    assert build[:2] == ["podman", "build"] and "--platform=linux/arm64" in build
    assert build[build.index("-f") + 1] == str(REPO / "envs" / "ngc-ray.Dockerfile")
    assert imp[:5] == ["enroot", "import", "-x", "mount", "-o"]
    assert imp[-1] == f"podman://localhost/ptflow/ngc-ray:{digest}"
    conf = plan.files[plan.env["CONTAINERS_STORAGE_CONF"]]
    assert 'graphroot = "/dev/shm/alice/ptflow-ngc-ray-' in conf and 'driver = "overlay"' in conf
    assert ["podman", "unshare", "rm", "-rf"] == plan.cleanup[-1][:4]  # rootless storage needs unshare
    assert plan.tmp_output.parent == plan.output.parent and not plan.tmp_output.exists()


def test_without_enroot_podman_export_and_mksquashfs(tmp_path):
    raw = site("alps")
    raw["runtime"]["build"] = {"converter": "auto"}
    plan = images.plan_build(
        raw, "ngc-ray", tmp_path / "x.sqsh", digest="d", recipe_root=REPO, workdir=tmp_path, which=lambda _: None
    )
    tools = [s[0] + " " + s[1] for s in plan.steps]
    assert tools == ["podman build", "podman create", "podman export", "podman rm", f"mksquashfs {tmp_path}/rootfs"]
    assert "-all-root" in plan.steps[-1] and plan.extract == (tmp_path / "rootfs.tar", tmp_path / "rootfs")


def test_posttrainbench_def_uses_fakeroot_unless_root(tmp_path):
    raw = site("generic")
    spec = images.image_spec(raw, "standard")
    assert images.builder_of(raw, spec) == "apptainer-def"
    plan = images.plan_build(raw, "standard", "/s/standard.sif", digest="d", recipe_root=REPO, workdir=tmp_path, euid=5)
    assert plan.steps == [["apptainer", "build", "--fakeroot", str(plan.tmp_output), str(REPO / "envs/standard.def")]]
    assert plan.cwd == str(REPO)
    root = images.plan_build(raw, "standard", "/s/standard.sif", digest="d", recipe_root=REPO, workdir=tmp_path, euid=0)
    assert "--fakeroot" not in root.steps[0]


def test_pyxis_registry_source_is_enroot_import(tmp_path):
    raw = site("pyxis")
    plan = images.plan_build(raw, "ngc-pytorch", "/l/n.sqsh", digest="d", workdir=tmp_path)
    assert plan.steps == [["enroot", "import", "-o", str(plan.tmp_output), "docker://nvcr.io#nvidia/pytorch:25.06-py3"]]


@pytest.mark.parametrize(
    ("source", "uri"),
    [
        ("nvcr.io#nvidia/pytorch:25.06-py3", "docker://nvcr.io#nvidia/pytorch:25.06-py3"),
        ("docker://nvcr.io#nvidia/tao:latest", "docker://nvcr.io#nvidia/tao:latest"),
        ("nvcr.io/nvidia/pytorch:25.06-py3", "docker://nvcr.io#nvidia/pytorch:25.06-py3"),
        ("ubuntu:24.04", "docker://ubuntu:24.04"),
        ("library/ubuntu:24.04", "docker://library/ubuntu:24.04"),
    ],
)
def test_enroot_uri_forms_tao_accepts(source, uri):
    assert images.enroot_uri(source) == uri


@pytest.mark.parametrize(
    ("source", "latest"),
    [
        ("nvcr.io#nvidia/tao:latest", True),
        ("ubuntu", True),
        ("nvcr.io/nvidia/x:25.06", False),
        ("localhost:5000/x", True),
        ("x@sha256:" + "0" * 64, False),
    ],
)
def test_latest_detection(source, latest):
    assert images.is_latest(source) is latest


def test_latest_reconverted_only_with_setting():
    raw = site("pyxis")
    raw["runtime"]["images"]["tao"] = {"source": "nvcr.io#nvidia/tao:latest"}
    spec, pinned = raw["runtime"]["images"]["tao"], raw["runtime"]["images"]["ngc-pytorch"]
    assert images.reconvert_token(raw, spec, "run1") is None  # cached by name: reused
    raw["runtime"]["force_reconvert_latest"] = True
    assert images.reconvert_token(raw, spec, "run1") == "run1"
    assert images.reconvert_token(raw, pinned, "run1") is None  # a fixed tag is never re-converted


def test_digest_changes_with_recipe_only(tmp_path):
    raw = site("alps")
    (tmp_path / "envs").mkdir()
    recipe = tmp_path / "envs" / "ngc-ray.Dockerfile"
    recipe.write_text("FROM a\n")
    spec = images.image_spec(raw, "ngc-ray")
    first = images.image_digest(raw, "ngc-ray", spec, tmp_path)
    assert images.image_digest(raw, "ngc-ray", spec, tmp_path) == first
    recipe.write_text("FROM b\n")
    assert images.image_digest(raw, "ngc-ray", spec, tmp_path) != first
    raw["runtime"]["arch"] = "amd64"
    recipe.write_text("FROM a\n")
    assert images.image_digest(raw, "ngc-ray", spec, tmp_path) != first  # another arch is another image


def test_missing_tool_names_tool_and_setting(tmp_path):
    plan = images.plan_build(site("pyxis"), "ngc-pytorch", "/l/n.sqsh", digest="d", workdir=tmp_path)
    with pytest.raises(
        images.MissingToolError, match=r"enroot not found on PATH, but site pyxis sets runtime.kind = pyxis"
    ):
        images.check_tools(plan, which=lambda _: None)
    plan = images.plan_build(site("generic"), "standard", "/s.sif", digest="d", recipe_root=REPO, workdir=tmp_path)
    with pytest.raises(images.MissingToolError, match=r"apptainer not found .*runtime.images.standard"):
        images.check_tools(plan, which=lambda _: None)


def test_wrong_recipe_kind_and_unknown_image_are_clear():
    raw = site("generic")
    raw["runtime"]["images"]["bad"] = {"recipe": "envs/ngc-ray.Dockerfile"}
    with pytest.raises(images.ImageError, match="not an apptainer .def"):
        images.builder_of(raw, raw["runtime"]["images"]["bad"])
    with pytest.raises(images.ImageError, match=r"image 'nope' is not under runtime.images \(known: bad, standard"):
        images.image_spec(raw, "nope")


def test_arch_mismatch_refuses_emulated_build():
    with pytest.raises(images.ImageError, match="runtime.arch = 'arm64' but this build node is amd64"):
        images.check_arch(site("alps"), machine="x86_64")
    images.check_arch(site("alps"), machine="aarch64")
    images.check_arch(site("nscc"), machine="x86_64")


def test_venv_sites_need_no_image():
    raw = site("local")
    assert not images.needs_images(raw) and images.image_inputs(raw, None) == {}


def test_edf_renders_and_parses(tmp_path):
    """Alps guide's TOML: image = <...>.sqsh, mounts = [/capstor, /iopsstor, /users/$USER]."""
    raw = site("alps")
    img = tmp_path / "ngc-ray.sqsh"
    text = images.render_edf("ngc-ray", img, raw["runtime"]["mounts"], tmp_path / "e.toml", env={"FI_PROVIDER": "cxi"})
    doc = tomllib.loads(text)
    assert doc["image"] == str(img.resolve())
    assert doc["mounts"] == ["/capstor", "/iopsstor", "/users/alice"]
    assert doc["env"] == {"FI_PROVIDER": "cxi"} and doc["writable"] is True
