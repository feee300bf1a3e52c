"""Image build plans (argv per site), cache keys, tool errors and the EDF file. Real builds: tests/integration."""

import dataclasses
import tomllib

import pytest

from ptflow.cluster import image_build, images
from ptflow.config.sites import load_site
from tests.conftest import REPO

SITES = REPO / "config" / "sites"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("PTFLOW_ACCOUNT", "x")
    monkeypatch.setenv("USER", "alice")


def site(name):
    return load_site(name, SITES).runtime


def test_alps_dockerfile_is_podman_build_then_enroot_import(tmp_path):
    """Alps guide: podman storage in /dev/shm/$USER, podman build, enroot import -x mount ... podman://localhost/..."""
    rt = site("alps")
    digest = images.image_digest(rt, "ngc-ray:25.06", images.image_spec(rt, "ngc-ray:25.06"), REPO)
    plan = image_build.plan_build(
        rt,
        "ngc-ray:25.06",
        "/capstor/i/ngc-ray+25.06.sqsh",
        digest=digest,
        recipe_root=REPO,
        workdir=tmp_path,
        job=image_build.BuildJob(euid=1000),
    )
    build, imp = plan.steps
    assert build[:2] == ["podman", "build"] and "--platform=linux/arm64" in build
    assert build[build.index("-f") + 1] == str(REPO / "envs" / "ngc-ray.Dockerfile")
    assert imp[:5] == ["enroot", "import", "-x", "mount", "-o"]
    # the guide's tag: podman build -t ${USER}/ngc-ray:25.06, enroot import ... podman://localhost/${USER}/ngc-ray:25.06
    assert build[build.index("-t") + 1] == imp[-1].removeprefix("podman://") == "localhost/alice/ngc-ray:25.06"
    conf = plan.files[plan.env["CONTAINERS_STORAGE_CONF"]]
    assert 'graphroot = "/dev/shm/alice/ptflow-ngc-ray+25.06-' in conf and 'driver = "overlay"' in conf
    assert ["podman", "unshare", "rm", "-rf"] == plan.cleanup[-1][:4]  # rootless storage needs unshare
    assert plan.tmp_output.parent == plan.output.parent and not plan.tmp_output.exists()


def test_without_enroot_podman_export_and_mksquashfs(tmp_path):
    rt = site("alps")
    rt = dataclasses.replace(rt, build={"converter": "auto"})
    plan = image_build.plan_build(
        rt,
        "ngc-ray:25.06",
        tmp_path / "x.sqsh",
        digest="d",
        recipe_root=REPO,
        workdir=tmp_path,
        job=image_build.BuildJob(which=lambda _: None),
    )
    tools = [s[0] + " " + s[1] for s in plan.steps]
    assert tools == ["podman build", "podman create", "podman export", "podman rm", f"mksquashfs {tmp_path}/rootfs"]
    assert "-all-root" in plan.steps[-1] and plan.extract == (tmp_path / "rootfs.tar", tmp_path / "rootfs")


def test_posttrainbench_def_uses_fakeroot_unless_root(tmp_path):
    rt = site("generic")
    spec = images.image_spec(rt, "standard")
    assert images.builder_of(rt, spec) == "apptainer-def"

    def plan_as(euid: int) -> image_build.BuildPlan:
        job = image_build.BuildJob(euid=euid)
        return image_build.plan_build(rt, "standard", "/s/standard.sif", digest="d", recipe_root=REPO,
                                      workdir=tmp_path, job=job)  # fmt: skip

    plan = plan_as(5)
    assert plan.steps == [["apptainer", "build", "--fakeroot", str(plan.tmp_output), str(REPO / "envs/standard.def")]]
    assert plan.cwd == str(REPO)
    assert "--fakeroot" not in plan_as(0).steps[0]


def test_pyxis_registry_source_is_enroot_import(tmp_path):
    rt = site("pyxis")
    plan = image_build.plan_build(rt, "ngc-pytorch", "/l/n.sqsh", digest="d", workdir=tmp_path)
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
    rt = site("pyxis")
    rt = dataclasses.replace(rt, images={**rt.images, "tao": {"source": "nvcr.io#nvidia/tao:latest"}})
    spec, pinned = rt.images["tao"], rt.images["ngc-pytorch"]
    assert images.reconvert_token(rt, spec, "run1") is None  # cached by name: reused
    rt = dataclasses.replace(rt, force_reconvert_latest=True)
    assert images.reconvert_token(rt, spec, "run1") == "run1"
    assert images.reconvert_token(rt, pinned, "run1") is None  # a fixed tag is never re-converted


def test_digest_changes_with_recipe_only(tmp_path):
    rt = site("alps")
    (tmp_path / "envs").mkdir()
    recipe = tmp_path / "envs" / "ngc-ray.Dockerfile"
    recipe.write_text("FROM a\n")
    spec = images.image_spec(rt, "ngc-ray:25.06")
    first = images.image_digest(rt, "ngc-ray:25.06", spec, tmp_path)
    assert images.image_digest(rt, "ngc-ray:25.06", spec, tmp_path) == first
    recipe.write_text("FROM b\n")
    assert images.image_digest(rt, "ngc-ray:25.06", spec, tmp_path) != first
    rt = dataclasses.replace(rt, arch="amd64")
    recipe.write_text("FROM a\n")
    assert images.image_digest(rt, "ngc-ray:25.06", spec, tmp_path) != first  # another arch is another image


def test_missing_tool_names_tool_and_setting(tmp_path):
    plan = image_build.plan_build(site("pyxis"), "ngc-pytorch", "/l/n.sqsh", digest="d", workdir=tmp_path)
    with pytest.raises(
        images.MissingToolError, match=r"enroot not found on PATH, but site pyxis sets runtime.kind = pyxis"
    ):
        image_build.check_tools(plan, which=lambda _: None)
    plan = image_build.plan_build(site("generic"), "standard", "/s.sif", digest="d", recipe_root=REPO, workdir=tmp_path)
    with pytest.raises(images.MissingToolError, match=r"apptainer not found .*runtime.images.standard"):
        image_build.check_tools(plan, which=lambda _: None)


def test_wrong_recipe_kind_and_unknown_image_are_clear():
    rt = site("generic")
    rt = dataclasses.replace(rt, images={**rt.images, "bad": {"recipe": "envs/ngc-ray.Dockerfile"}})
    with pytest.raises(images.ImageError, match="not an apptainer .def"):
        images.builder_of(rt, rt.images["bad"])
    with pytest.raises(images.ImageError, match=r"image 'nope' is not under runtime.images \(known: bad, standard"):
        images.image_spec(rt, "nope")


def test_arch_mismatch_refuses_emulated_build():
    with pytest.raises(images.ImageError, match="runtime.arch = 'arm64' but this build node is amd64"):
        image_build.check_arch(site("alps"), machine="x86_64")
    image_build.check_arch(site("alps"), machine="aarch64")
    image_build.check_arch(site("nscc"), machine="x86_64")


def test_venv_sites_need_no_image():
    rt = site("local")
    assert not images.needs_images(rt) and images.image_inputs(rt, None) == {}


def test_edf_renders_and_parses(tmp_path):
    """Alps guide's TOML: image = <...>.sqsh, mounts = [/capstor, /iopsstor, /users/$USER]."""
    rt = site("alps")
    img = tmp_path / "ngc-ray.sqsh"
    text = images.render_edf("ngc-ray", img, list(rt.mounts), tmp_path / "e.toml", env={"FI_PROVIDER": "cxi"})
    doc = tomllib.loads(text)
    assert doc["image"] == str(img.resolve())
    assert doc["mounts"] == ["/capstor", "/iopsstor", "/ritom", "/users/alice"]
    assert doc["env"] == {"FI_PROVIDER": "cxi"} and doc["writable"] is True


def test_image_runtime_holds_only_what_defines_the_image():
    """The image rule's params: an unrelated site edit (mounts, hf_view, another image) does not rebuild it."""
    rt = site("generic")
    base = images.image_runtime(rt, "standard")
    other = dataclasses.replace(rt, mounts=("/elsewhere",), hf_view="copy", images={**rt.images, "x": {"source": "a"}})
    assert images.image_runtime(other, "standard") == base
    assert base.images == {"standard": rt.images["standard"]} and base.kind == "apptainer"


def test_a_recipe_of_the_posttrainbench_checkout_builds_there(tmp_path):
    """posttrainbench.images: the site's standard image from the checkout's containers/standard.def, built in the
    checkout's root (its %files name paths from there), its digest the recipe's git object id (the command as text:
    apptainer cannot run here)."""
    from tests.support.ptb_checkout import make_fixture_checkout

    checkout = tmp_path / "PostTrainBench"
    make_fixture_checkout(checkout, evals=("gsm8k",), agents=("codex",))
    rt = site("generic")
    recipe = checkout / "containers/standard.def"
    spec = {"recipe": str(recipe), "recipe_object": "a" * 40, "build_dir": str(checkout)}
    rt_checkout = images.image_runtime(rt, "standard", spec)
    plan = image_build.plan_build(
        rt_checkout,
        "standard",
        "/s/standard.sif",
        digest="d",
        recipe_root=REPO,
        workdir=tmp_path,
        job=image_build.BuildJob(euid=0),
    )
    assert plan.steps == [["apptainer", "build", str(plan.tmp_output), str(recipe)]] and plan.cwd == str(checkout)
    digest = images.image_digest(rt, "standard", spec, REPO)
    assert digest != images.image_digest(rt, "standard", {**spec, "recipe_object": "b" * 40}, REPO)
    recipe.write_text("changed in the work tree, not in the commit\n")  # the object id, not the bytes, decides
    assert digest == images.image_digest(rt, "standard", spec, REPO)
