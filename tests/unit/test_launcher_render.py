"""The rendered Ray launcher: ports, temp dirs, the commands it will run, shellcheck-clean, no secrets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ptflow.cluster.images import ImageError
from ptflow.cluster.runtime import NodeCommands, node_commands
from ptflow.cluster.slurm import NodeAddress
from ptflow.config.sites import RuntimeSpec
from ptflow.launch import ray as L
from ptflow.specs import StageRuntime
from tests.conftest import REPO

NODES = [NodeAddress("nid001", "10.0.0.1", "nid001"), NodeAddress("nid002", "10.0.0.2", "nid002")]


def job(tmp_path, **kw) -> L.RayJob:
    base = dict(gpus_per_node=4, cpus_per_node=288, env={"HF_HOME": "/capstor/hf home"})
    base.update(kw)
    return L.RayJob(
        1234567,
        2,
        NODES,
        ["/venv/bin/python", "-m", "verl.trainer.main_ppo", "a=b c"],
        tmp_path,
        NodeCommands("/venv/bin/ray", "/venv/bin/python"),
        **base,
    )


def test_ports_are_below_the_ephemeral_range_and_differ_per_node_and_job():
    seen = set()
    for job_id in (1, 2, 3, 1234567):
        for i in range(4):
            p = L.node_ports(job_id, i)
            assert L.PORT_FLOOR <= p["first"] and p["last"] < L.EPHEMERAL_FLOOR
            block = range(p["first"], p["last"] + 1)
            assert not (seen & set(block)), (job_id, i)
            seen |= set(block)
            fixed = [v for k, v in p.items() if k not in ("first", "last", "min_worker", "max_worker")]
            assert len(set(fixed)) == len(fixed) and max(fixed) < p["min_worker"]


def test_temp_dir_is_short_per_node_and_long_bases_are_refused():
    assert L.temp_dir("/tmp", 1234567, 2, 1) == "/tmp/ptr1234567r2n1"
    with pytest.raises(L.LaunchError, match="107-byte"):
        L.temp_dir("/very/long/node/local/scratch/path/for/ray/tmp", 1, 0, 0)


def test_rendered_launcher_is_shellcheck_clean_and_starts_head_then_workers(tmp_path):
    j = job(tmp_path)
    launcher = L.render(j)
    assert launcher == tmp_path.resolve() / "1234567-logs" / "restart-2" / "launcher.sh"
    assert (launcher.parent / "ray_node.sh").is_file() and (launcher.parent / "ray_ready.py").is_file()
    shellcheck = REPO / ".venv" / "bin" / "shellcheck"
    ignoring = L.render(job(tmp_path / "ignoring", driver_handles_warning=False))  # verl/NeMo-RL variant
    for script in (launcher, launcher.parent / "ray_node.sh", ignoring):
        out = subprocess.run([str(shellcheck), str(script)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout
    text = launcher.read_text()
    assert len(text.splitlines()) < 300 and "set -euo pipefail" in text
    head, worker = j.ray_nodes()
    gcs = L.node_ports(1234567, 0)["gcs"]
    assert "--head" in head.argv and f"--port={gcs}" in head.argv and "--num-gpus=4" in head.argv
    assert f"--address=10.0.0.1:{gcs}" in worker.argv and "--head" not in worker.argv
    assert text.index('--nodelist=nid001 "${CLEAN_BASH[@]}"') < text.index('--nodelist=nid002 "${CLEAN_BASH[@]}"')
    assert "CLEAN_BASH=(env -u BASH_ENV -u ENV bash --noprofile --norc)" in text  # no ~/.bashrc, no $BASH_ENV
    assert '>"$JOB_DIR/ray-head.log"' in text and '>"$JOB_DIR/ray-worker-1.log"' in text
    assert '>"$JOB_DIR/ray-driver.log"' in text and 'echo "All workers connected!"' in text
    assert '"worker_units":4' in " ".join(head.argv) and '"worker_units":4' in " ".join(worker.argv)
    assert "srun --jobid=1234567 --overlap --nodes=1 --ntasks=1" in text
    assert "--resource GPU" in text and "--expect nid002=10.0.0.2:4" in text
    assert "/venv/bin/python -m verl.trainer.main_ppo 'a=b c'" in text  # the driver, quoted, on the head
    assert "export HF_HOME='/capstor/hf home'" in text
    assert "--node-ip-address=10.0.0.2" in text and "--temp-dir=/tmp/ptr1234567r2n1" in text


def test_cpu_only_cluster_waits_for_cpus(tmp_path):
    text = L.render(job(tmp_path, gpus_per_node=0, cpus_per_node=2)).read_text()
    assert "--resource CPU" in text and "--expect nid001=10.0.0.1:2" in text


def test_secrets_are_never_rendered(tmp_path):
    with pytest.raises(L.LaunchError, match="secret"):
        L.render(job(tmp_path, env={"HF_TOKEN": "hf_abc"}))


@pytest.mark.parametrize(
    "runtime, image, flags, prefix, ray",
    [
        (RuntimeSpec("s", "venv", venv="/p/nemo-rl/.venv"), None, [], [], "/p/nemo-rl/.venv/bin/ray"),
        (
            RuntimeSpec("s", "enroot-edf", mounts=("/capstor",)),
            "/capstor/img/edf/ngc-ray-vllm.toml",
            ["--environment=/capstor/img/edf/ngc-ray-vllm.toml"],
            [],
            "ray",
        ),
        (
            RuntimeSpec("s", "pyxis", mounts=("/lustre",)),
            "/l/ngc-ray-vllm.sqsh",
            ["--container-image=/l/ngc-ray-vllm.sqsh", "--container-mounts=/lustre"],
            [],
            "ray",
        ),
        (
            RuntimeSpec("s", "apptainer", mounts=("/s",)),
            "/s/ngc-ray-vllm.sif",
            [],
            ["apptainer", "exec", "--nv", "--bind", "/s", "/s/ngc-ray-vllm.sif"],
            "ray",
        ),
    ],
)
def test_node_commands_of_each_site_kind(runtime, image, flags, prefix, ray):
    """The launcher's per-node steps get the same container flags as any other command (ptflow.cluster.runtime)."""
    rt = node_commands(StageRuntime(runtime, image=image, gpus=4))
    assert (rt.srun_flags, rt.prefix, rt.ray) == (flags, prefix, ray)


def test_local_launcher_uses_this_python():
    rt = node_commands(None)
    assert rt.python == sys.executable and rt.ray == str(Path(sys.executable).with_name("ray"))


def test_relative_venv_and_missing_image_are_refused():
    with pytest.raises(ValueError, match="absolute"):
        node_commands(StageRuntime(RuntimeSpec("s", "venv", venv="nemo-rl/.venv")))
    with pytest.raises(ImageError, match="no image was given"):
        node_commands(StageRuntime(RuntimeSpec("s", "pyxis")))
