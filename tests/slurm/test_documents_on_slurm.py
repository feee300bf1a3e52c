"""The documents' recipes on the real two-node test cluster: NeMo-RL's launcher interface (ray_bare.sub) with
hostile shell start-up files, `ptflow interactive`, the Ray launcher preflight (bash -n, sbatch --test-only), the
env rule (an overlay venv and a uv environment, stand-in checkouts), `ptflow doctor`, and a COMPLETED job whose
status.json says failed. No GPU, container runtime, verl or NeMo-RL here: the checkouts are small stand-ins (named
as such) built by the same commands the documents use."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from ptflow.cluster import slurm
from ptflow.config.load import load
from ptflow.launch.check import check_ray_launchers
from tests.e2e.smk import REPO, snakemake

WORK_ROOT = Path("/var/lib/ptflow-tests")
SITE = REPO / "tests" / "slurm" / "localtest.yaml"
PTFLOW = str(Path(sys.executable).with_name("ptflow"))
VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture
def work():
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    path = WORK_ROOT / f"docs-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def env_with_venv(cluster, **extra) -> dict:
    env = {**os.environ, **cluster.env}
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    env.update(extra)
    return env


def sbatch(args: list[str], env: dict) -> str:
    out = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip().split(";")[0]


def test_ray_bare_sub_interface_and_no_shell_startup_files(slurm_cluster, work):
    """NeMo-RL's launcher as documented: COMMAND, BASE_LOG_DIR, RAY_PORT, RAY_TMPDIR; logs ray-head.log,
    ray-worker-1.log, ray-driver.log; "All workers connected!" after ray status counts the worker_units; and a
    ~/.bashrc / $BASH_ENV that would break any shell that reads them are never read."""
    home = work / "home"
    home.mkdir()
    marker = work / "startup-file-was-read"
    hostile = f"touch {marker}; export PATH=/nonexistent\n"
    (home / ".bashrc").write_text(hostile)
    (home / ".bash_profile").write_text(hostile)
    (work / "bash_env").write_text(hostile)
    sub = work / "ray_bare.sub"
    out = subprocess.run(
        [
            PTFLOW,
            "ray-launcher",
            "-o",
            str(sub),
            "--check",
            "-N2",
            "-p",
            "debug",
            "-A",
            "ptflow",
            "-t",
            "10",
            "--mem=1000",
        ],
        capture_output=True,
        text=True,
        env=env_with_venv(slurm_cluster),
    )
    assert out.returncode == 0 and "ok: bash -n and sbatch --test-only accept" in out.stdout, out.stdout + out.stderr
    bad = subprocess.run(
        [PTFLOW, "ray-launcher", "-o", str(sub), "--check", "-N3", "-p", "debug"],
        capture_output=True,
        text=True,
        env=env_with_venv(slurm_cluster),
    )
    assert bad.returncode == 1 and "sbatch --test-only" in bad.stdout  # 3 nodes in a 2-node partition
    logs, raytmp = work / "logs", Path(f"/tmp/ptflow-rt-{work.name[-8:]}")  # short: Ray's socket paths go below it
    env = env_with_venv(
        slurm_cluster,
        HOME=str(home),
        BASH_ENV=str(work / "bash_env"),
        COMMAND='python -c \'import ray; ray.init(); print("units", ray.cluster_resources()["worker_units"])\'',
        BASE_LOG_DIR=str(logs),
        RAY_PORT="23999",
        RAY_TMPDIR=str(raytmp),
    )
    job = sbatch(
        ["-N2", "-p", "debug", "-A", "ptflow", "-t", "10", "--mem=1000", "-o", str(work / "job.out"), str(sub)], env
    )
    rec = slurm.wait_job(job, poll=3, timeout=600)
    text = (work / "job.out").read_text()
    assert rec.base_state == "COMPLETED", text[-3000:]
    job_dir = logs / f"{job}-logs"
    assert {p.name for p in job_dir.glob("ray-*.log")} >= {"ray-head.log", "ray-worker-1.log", "ray-driver.log"}
    assert "All workers connected!" in text and "worker_units" in text
    assert "units 2.0" in (job_dir / "ray-driver.log").read_text()  # one CPU per node, both nodes
    assert (
        "--port=23999" in (job_dir / "launcher.sh").read_text()
        and f"--temp-dir={raytmp}/ptr{job}r0n0" in (job_dir / "launcher.sh").read_text()
    )
    assert not marker.exists(), "a shell start-up file was read by a job step"
    mismatch = sbatch(
        ["-N1", "-p", "debug", "-A", "ptflow", "-t", "5", "--mem=500", "-o", str(work / "gpus.out"), str(sub)],
        {**env, "GPUS_PER_NODE": "4"},
    )
    slurm.wait_job(mismatch, poll=2, timeout=300)
    assert "GPUS_PER_NODE=4 but the allocation has 0 GPU(s) per node" in (work / "gpus.out").read_text()


def test_interactive_brings_up_ray_runs_on_the_head_and_tears_down(slurm_cluster, work):
    out = subprocess.run(
        [
            PTFLOW,
            "interactive",
            "--site",
            str(SITE),
            "--nodes",
            "2",
            "--time",
            "10",
            "--log-dir",
            str(work),
            "--command",
            "ray status | grep -c worker_units; echo PROMPT=${PS1:-none}",
        ],
        capture_output=True,
        text=True,
        cwd=work,
        env=env_with_venv(slurm_cluster),
        timeout=600,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert "salloc" in text and "=== Ray Cluster Status ===" in text and "All workers connected!" in text
    assert "Number of nodes: 2" in text and "PROMPT=none" in text  # a clean bash, no ~/.bashrc
    (job_dir,) = work.glob("*-logs")
    job_id = job_dir.name.split("-")[0]
    assert (job_dir / "ENDED").is_file() and (job_dir / "ray-driver.log").is_file()
    state = slurm.job_state(job_id)
    assert state is None or state.base_state in slurm.TERMINAL_STATES  # the allocation was given back
    assert not list(Path("/tmp").glob(f"ptr{job_id}r*"))


def test_preflight_renders_the_ray_launcher_and_asks_sbatch_test_only(slurm_cluster, work):
    site = yaml.safe_load(SITE.read_text())
    site["agent_resources"]["verl"] = {"partition": "gpu", "nodes": 2, "gpus": 2, "threads": 2, "runtime": 20}
    cfg = work / "verl.yaml"
    cfg.write_text(
        textwrap.dedent("""\
        models: [{id: Qwen/Qwen2.5-0.5B-Instruct, source: hub, revision: main}]
        evals: [{id: gsm8k, dataset: {source: hub, repo: openai/gsm8k, revision: main}, task: ptflow,
                 max_new_tokens: 64}]
        agents: [{id: verl-ppo-gsm8k, kind: verl, params: {variant: ppo-gsm8k}}]
        matrix: {models: all, evals: all, agents: all}
        """)
    )
    for threads, ok in ((2, True), (64, False)):  # 64 CPUs per node: more than the nodes have
        site["agent_resources"]["verl"]["threads"] = threads
        (work / "site.yaml").write_text(yaml.safe_dump(site))
        loaded = load(REPO, [str(cfg)], [f"site={work / 'site.yaml'}"])
        problems = check_ray_launchers(loaded.cfg, loaded.site)
        if ok:
            assert problems == []
        else:
            assert len(problems) == 1 and "Slurm would not take the Ray job: sbatch --test-only" in problems[0]
            assert "--cpus-per-task=64" in problems[0]


def _standin_checkouts(root: Path) -> tuple[Path, Path]:
    """Stand-ins for the verl and NeMo-RL checkouts (neither installs here): a setuptools package and a uv project
    with the plan's extras, so `pip install --no-build-isolation -e` and `uv sync --extra ...` do real work."""
    verl = root / "verl-standin"
    (verl / "verl_standin").mkdir(parents=True)
    (verl / "verl_standin" / "__init__.py").write_text("__version__ = '0.0.1'\n")
    # an in-tree PEP 517/660 backend: pip install --no-build-isolation -e needs no setuptools/wheel in the new venv
    # (the NGC image brings those for the real verl; this machine's base Python may not)
    (verl / "standin_backend.py").write_text(
        textwrap.dedent("""\
        import base64, hashlib, os, zipfile
        NAME, VERSION = "verl_standin", "0.0.1"
        DIST = f"{NAME}-{VERSION}.dist-info"
        def _record_line(path, data):
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            return f"{path},sha256={digest},{len(data)}"
        def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
            name = f"{NAME}-{VERSION}-py3-none-any.whl"
            files = {
                f"{NAME}.pth": (os.path.dirname(os.path.abspath(__file__)) + "\\n").encode(),
                f"{DIST}/METADATA": f"Metadata-Version: 2.1\\nName: verl-standin\\nVersion: {VERSION}\\n".encode(),
                f"{DIST}/WHEEL": b"Wheel-Version: 1.0\\nGenerator: standin\\nRoot-Is-Purelib: true\\n"
                + b"Tag: py3-none-any\\n",
            }
            record = [_record_line(p, d) for p, d in files.items()] + [f"{DIST}/RECORD,,"]
            with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
                for path, data in files.items():
                    zf.writestr(path, data)
                zf.writestr(f"{DIST}/RECORD", "\\n".join(record) + "\\n")
            return name
        build_wheel = build_editable
        def get_requires_for_build_editable(config_settings=None):
            return []
        """)
    )
    (verl / "pyproject.toml").write_text(
        textwrap.dedent("""\
        [build-system]
        requires = []
        build-backend = "standin_backend"
        backend-path = ["."]
        [project]
        name = "verl-standin"
        version = "0.0.1"
        """)
    )
    nemo = root / "nemo-standin"
    nemo.mkdir()
    (nemo / "nemo_standin.py").write_text("OK = True\n")
    (nemo / "pyproject.toml").write_text(
        textwrap.dedent("""\
        [project]
        name = "nemo-standin"
        version = "0.0.1"
        requires-python = ">=3.9"
        dependencies = []
        [project.optional-dependencies]
        fsdp = []
        vllm = []
        [tool.uv]
        package = false
        """)
    )
    return verl, nemo


def test_env_rule_builds_the_overlay_venv_and_the_uv_environment(slurm_cluster, work):
    verl, nemo = _standin_checkouts(work)
    site = yaml.safe_load(SITE.read_text())
    site["runtime"] = {
        "kind": "venv",
        "envs": {
            "verl": {
                "build": "overlay-venv",
                "checkout": str(verl),
                "path": str(verl / "venv-vllm-v0.10.2"),
                "check": ["verl_standin"],
                "for": ["sft"],
            },
            "nemo": {
                "build": "uv-sync",
                "checkout": str(nemo),
                "extras": ["fsdp", "vllm"],
                "check": ["nemo_standin"],
                "env": {
                    "NRL_FORCE_REBUILD_VENVS": "true",
                    "UV_CACHE_DIR": str(work / "uv-cache"),
                    "UV_PYTHON_DOWNLOADS": "never",
                },
                "for": ["grpo"],
            },
        },
    }
    site["resources"]["image"] = {"partition": "cpu", "threads": 1, "mem_mb": 2000, "runtime": 15}
    (work / "site.yaml").write_text(yaml.safe_dump(site))
    snakemake(
        work,
        "results/envs/verl.json",
        "results/envs/nemo.json",
        "--config",
        f"site={work / 'site.yaml'}",
        env=env_with_venv(slurm_cluster),
        profile="profiles/slurm",
    )
    verl_rec = json.loads((work / "results" / "envs" / "verl.json").read_text())
    assert verl_rec["build"] == "overlay-venv" and verl_rec["check"][-1] == "OK"
    assert "--system-site-packages" in verl_rec["script"] and "--no-build-isolation -e" in verl_rec["script"]
    venv_py = verl / "venv-vllm-v0.10.2" / "bin" / "python"
    assert "include-system-site-packages = true" in (verl / "venv-vllm-v0.10.2" / "pyvenv.cfg").read_text()
    imported = subprocess.run(
        [str(venv_py), "-c", "import verl_standin; print(verl_standin.__file__)"],
        capture_output=True,
        text=True,
        cwd=work,
    )
    assert imported.stdout.strip() == str(verl / "verl_standin" / "__init__.py")  # editable: the checkout itself
    nemo_rec = json.loads((work / "results" / "envs" / "nemo.json").read_text())
    assert "sync --extra fsdp --extra vllm" in nemo_rec["script"] and nemo_rec["check"][-1] == "OK"
    assert (nemo / ".venv" / "pyvenv.cfg").is_file()
    logs = list((work / ".snakemake" / "slurm_logs" / "rule_env").rglob("*.log"))
    assert len(logs) == 2  # each built in a Slurm job of its own


def test_doctor_reports_the_test_cluster_as_it_is(slurm_cluster, work):
    out = subprocess.run(
        [PTFLOW, "doctor", "--site", str(SITE), "--json", "--wait", "8", "--workdir", str(work / "doctor")],
        capture_output=True,
        text=True,
        cwd=work,
        env=env_with_venv(slurm_cluster),
        timeout=900,
    )
    findings = json.loads(out.stdout)
    by = {(f["where"], f["check"]): f for f in findings}
    assert out.returncode == 0, out.stdout + out.stderr  # warnings only: nothing FAILs on this cluster
    assert by[("login node", "preflight")]["status"] == "ok"
    assert "AccountingStorageType=accounting_storage/slurmdbd" in by[("login node", "Slurm")]["detail"]
    assert by[("login node", "account and QoS")]["status"] == "ok"
    assert {w for w, _ in by if w.startswith("partition ")} == {"partition cpu", "partition debug", "partition gpu"}
    gpus = by[("partition gpu", "GPUs")]
    assert gpus["status"] == "warn" and "no nvidia-smi" in gpus["detail"] and "CUDA_VISIBLE_DEVICES=" in gpus["detail"]
    # the jobs' own torch, asked in the job: a CPU build (this machine's) beside placeholder GPUs is a warning; beside
    # a GPU driver, a FAIL (tests/unit/test_documents.py renders the container variants)
    torch_view = by[("partition gpu", "torch sees GPUs")]
    assert torch_view["status"] == "warn" and f"torch {version('torch')} is a CPU build" in torch_view["detail"]
    assert by[("partition gpu", "container runtime")]["detail"].startswith("none: the site runs a venv")
    assert (
        by[("partition gpu", "node-local disk")]["status"] == "ok"
        and "tmp_mb=1024" in by[("partition gpu", "node-local disk")]["detail"]
    )
    assert ("partition gpu", "/dev/fuse") in by and ("partition gpu", "uuidgen") in by


def test_completed_job_whose_status_json_says_failed_is_an_error(slurm_cluster, work):
    """TAO's mapping: COMPLETED -> check status.json. A real job of the train rule's name and comment ends
    COMPLETED; status.json beside the manifest says failed; `ptflow status` shows Error, from squeue alone too."""
    run_id = str(uuid.uuid4())
    cell = ("ptflow--tiny-llama-h64", "add", "sft")
    comment = f"rule_train_wildcards_{'_'.join(cell)}"
    job = slurm_cluster.run(
        [
            "sbatch",
            "--parsable",
            "-p",
            "debug",
            "-A",
            "ptflow",
            "-t",
            "2",
            "--mem=100",
            f"--job-name={run_id}",
            f"--comment={comment}",
            "-o",
            "/dev/null",
            "--wrap",
            "true",
        ],
        check=True,
    ).stdout.strip()
    slurm.wait_job(job, poll=2, timeout=300)
    (work / ".snakemake" / "log").mkdir(parents=True)
    (work / ".snakemake" / "log" / "2026-01-01T000000.000000.snakemake.log").write_text(
        f"SLURM run ID: {run_id}\nCommand: snakemake --config site={SITE}\n"
    )
    cell_dir = work / "results" / "cells" / Path(*cell)
    cell_dir.mkdir(parents=True)
    (cell_dir / "status.json").write_text(json.dumps({"status": "failed", "failure": "training"}))
    out = subprocess.run(
        [PTFLOW, "status", "-d", str(work), "--json", "--no-png", "--smk", "--config", f"site={SITE}"],
        capture_output=True,
        text=True,
        env=env_with_venv(slurm_cluster),
    )
    data = json.loads(out.stdout)
    row = next(c for c in data["cells"] if c["cell"] == "/".join(cell))
    assert row["state"] == "Error" and row["job_id"] == job, row
    assert "COMPLETED but status.json says failed (training)" in row["detail"]
    # the same from squeue alone, as on a cluster without accounting
    squeue_only = slurm.run_jobs([run_id], accounting=False)
    assert squeue_only[job].base_state == "COMPLETED" and squeue_only[job].sources == ("squeue",)
