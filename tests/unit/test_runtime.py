"""runtime_argv: the one place a command becomes the site's way of running it, checked against each document."""

import pytest

from ptflow.cluster import images
from ptflow.cluster.runtime import AGENT_HOME, check_runtime_tool, runtime_argv
from ptflow.config.entries import Agent
from ptflow.config.sites import RuntimeSpec, load_site
from ptflow.jobenv import package_root
from ptflow.specs import StageRuntime
from tests.conftest import REPO

SITES = REPO / "config" / "sites"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    for var in ("PTFLOW_ACCOUNT", "PTFLOW_PARTITION"):
        monkeypatch.setenv(var, "x")
    monkeypatch.setenv("USER", "alice")


def test_local_default_runs_command_unchanged():
    site = load_site("local", SITES)
    assert runtime_argv(site.runtime, ["python", "-m", "x"]) == ["python", "-m", "x"]
    assert images.image_for(site.runtime, "train", Agent("sft", "trl-sft")) is None


def test_bare_metal_venv_uses_absolute_paths():
    """JUWELS guide: `ray: command not found` inside srun -> use .venv/bin/ray and .venv/bin/python."""
    site = load_site("juwels", SITES)
    argv = runtime_argv(site.runtime, ["python", "train.py"])
    assert argv == ["/p/project1/envcomp/alice/nemo-rl/.venv/bin/python", "train.py"]
    assert runtime_argv(site.runtime, ["/usr/bin/env", "true"]) == ["/usr/bin/env", "true"]


def test_posttrainbench_agent_cell_apptainer():
    """PostTrainBench: apptainer exec --nv -c --writable-tmpfs --home <jobdir>:/home/... <standard.sif> ..."""
    site = load_site("generic", SITES)
    agent = Agent("claude-opus-4-6", "cli-agent")
    name = images.image_for(site.runtime, "train", agent)
    assert name == "standard"
    sif = images.runtime_handle(site.runtime, name)
    assert sif == "/shared/ptflow/images/standard.sif"
    argv = runtime_argv(
        site.runtime, ["bash", "run.sh"], image=sif, job_dir="/tmp/job1", agent_cell=True, binds=["/tmp/hf"]
    )
    assert argv[:7] == ["apptainer", "exec", "--nv", "-c", "--writable-tmpfs", "--home", f"/tmp/job1:{AGENT_HOME}"]
    assert argv[-3:] == [sif, "bash", "run.sh"]
    assert ["--bind", "/tmp/hf"] == argv[argv.index("/tmp/hf") - 1 : argv.index("/tmp/hf") + 1]


def test_posttrainbench_eval_runs_in_vllm_debug_without_agent_flags():
    site = load_site("generic", SITES)
    assert images.image_for(site.runtime, "evaluate") == "vllm_debug"
    # an agent cell's evaluation also runs in vllm_debug: agent keys only choose the training image
    assert images.image_for(site.runtime, "evaluate", Agent("claude-opus-4-6", "cli-agent")) == "vllm_debug"
    argv = runtime_argv(site.runtime, ["python", "eval.py"], image="/i/vllm_debug.sif")
    assert argv[:3] == ["apptainer", "exec", "--nv"] and "-c" not in argv and "--home" not in argv
    assert "--nv" not in runtime_argv(site.runtime, ["true"], image="/i/x.sif", gpus=0)


def test_pyxis_container_image_and_mounts():
    """TAO: srun --container-image=<image> --container-mounts=/lustre."""
    site = load_site("pyxis", SITES)
    name = images.image_for(site.runtime, "train", Agent("sft", "trl-sft"))
    sqsh = images.runtime_handle(site.runtime, name)
    assert sqsh == "/lustre/fsw/alice/images/ngc-pytorch.sqsh"
    argv = runtime_argv(site.runtime, ["python", "t.py"], image=sqsh)
    assert argv[0] == "srun"
    assert f"--container-image={sqsh}" in argv
    assert "--container-mounts=/lustre" in argv
    assert argv[-2:] == ["python", "t.py"]


def test_alps_edf_environment():
    """Alps guide: srun --environment ./env/ngc-ray-vllm-....toml; the EDF file carries image and mounts."""
    site = load_site("alps", SITES)
    name = images.image_for(site.runtime, "train", Agent("verl", "verl"))
    assert name == "ngc-ray-vllm:v0.10.2"
    assert images.image_inputs(site.runtime, name) == {  # the guide's file names
        "image": "/capstor/scratch/cscs/alice/images/ngc-ray-vllm+v0.10.2.sqsh",
        "edf": "/capstor/scratch/cscs/alice/images/edf/ngc-ray-vllm-v0.10.2.toml",
    }
    toml = images.runtime_handle(site.runtime, name)
    argv = runtime_argv(site.runtime, ["python", "t.py"], image=toml, binds=["/capstor/scratch/cscs/alice/ptflow"])
    assert argv == ["srun", "--overlap", "--ntasks=1", f"--environment={toml}", "python", "t.py"]
    with pytest.raises(images.ImageError, match=r"/tmp/x not under runtime.mounts \(/capstor, /iopsstor"):
        runtime_argv(site.runtime, ["true"], image=toml, binds=["/tmp/x"])


def test_container_site_without_image_is_a_clear_error():
    site = load_site("pyxis", SITES)
    with pytest.raises(images.ImageError, match="runtime.kind = pyxis.*no image"):
        runtime_argv(site.runtime, ["true"])


@pytest.mark.parametrize(("site_name", "tool"), [("generic", "apptainer"), ("pyxis", "srun"), ("alps", "srun")])
def test_missing_runtime_tool_names_tool_and_setting(site_name, tool):
    site = load_site(site_name, SITES)
    with pytest.raises(images.MissingToolError, match=rf"{tool} not found on PATH.*runtime.kind = "):
        check_runtime_tool(site.runtime, which=lambda _: None)


def test_secrets_never_in_argv(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-SECRET")
    site = load_site("generic", SITES)
    argv = runtime_argv(site.runtime, ["claude", "-p", "x"], image="/i/s.sif", job_dir="/j", agent_cell=True)
    assert not any("SECRET" in a for a in argv)


def test_job_reruns_itself_in_site_venv_with_private_hf_view(tmp_path):
    """Real re-exec (bare-metal venv kind): the script runs again under the site venv's python, in a private HF
    cache view (copy: /dev/fuse is forced unusable by hf_view=copy), offline, and its exit status comes back."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    venv = tmp_path / "site-venv"
    venv.symlink_to(Path(sys.prefix))  # another path for this venv: the job's python is not the site's
    shared = tmp_path / "shared_hf"
    (shared / "hub").mkdir(parents=True)
    out = tmp_path / "child.txt"
    spec = StageRuntime(RuntimeSpec(site="t", kind="venv", venv=str(venv), hf_view="copy"), hf_home=str(shared))
    script = tmp_path / "job.py"
    script.write_text(
        "import os, sys\n"
        "from ptflow.cluster.runtime import reexec_in_runtime\n"
        "from ptflow.specs import StageRuntime\n"
        f"reexec_in_runtime(StageRuntime.from_params({spec.to_params()!r}), log=lambda m: print(m, flush=True))\n"
        f"open({str(out)!r}, 'w').write('\\n'.join([sys.executable, os.environ['HF_HOME'], "
        "os.environ['HF_HUB_OFFLINE'], str(os.path.isdir(os.environ['HF_HOME'] + '/hub'))]))\n"
        "sys.exit(3)\n"
    )
    env = {**os.environ, "PYTHONPATH": package_root()}
    env.pop("PTFLOW_IN_RUNTIME", None)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    exe, hf_home, offline, has_hub = out.read_text().splitlines()
    assert exe == f"{venv}/bin/python"
    assert hf_home != str(shared) and hf_home.endswith("hf_view/hf_home") and has_hub == "True"
    assert offline == "1"
    assert f"run in site runtime: $ {venv}/bin/python {script}" in proc.stdout
    assert "HF cache view: copy of" in proc.stdout
    assert not Path(hf_home).exists()  # the view is removed with the job


def test_an_evaluation_s_copied_view_holds_only_the_model_repos_it_reads(tmp_path, monkeypatch):
    """A job's copied HF view (no FUSE) costs what it reads: an evaluation of a trained model (on scratch) gets the
    cache's datasets and no model repo; a baseline's gets its one base model (run_in_runtime's hf_models)."""
    import sys
    from pathlib import Path

    from ptflow.cluster.runtime import run_in_runtime

    venv = tmp_path / "site-venv"
    venv.symlink_to(Path(sys.prefix))
    shared = tmp_path / "shared_hf"
    for repo in ("models--org--base", "models--org--other", "datasets--openai--gsm8k"):
        (shared / "hub" / repo / "snapshots" / "r").mkdir(parents=True)
        (shared / "hub" / repo / "snapshots" / "r" / "f.json").write_text("{}")
    spec = StageRuntime(RuntimeSpec(site="t", kind="venv", venv=str(venv), hf_view="copy"), hf_home=str(shared))
    out = tmp_path / "seen.txt"
    script = tmp_path / "job.py"
    script.write_text(f"import os\nopen({str(out)!r}, 'w').write(' '.join(sorted(os.listdir(os.environ['HF_HOME'] "
                      "+ '/hub'))))\n")  # fmt: skip
    monkeypatch.delenv("PTFLOW_IN_RUNTIME", raising=False)
    lines: list[str] = []
    assert run_in_runtime(spec, str(script), log=lines.append, tmp_root=str(tmp_path), hf_models=[]) == 0
    assert out.read_text() == "datasets--openai--gsm8k"
    assert run_in_runtime(spec, str(script), log=lines.append, tmp_root=str(tmp_path), hf_models=["org/base"]) == 0
    assert out.read_text() == "datasets--openai--gsm8k models--org--base"
    assert any("(model repos: org/base)" in line for line in lines)
