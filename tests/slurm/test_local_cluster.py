"""Behaviour of the local test cluster that the workflow's Slurm tests rely on."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.support.local_slurm import LocalSlurmCluster


def sbatch(cluster: LocalSlurmCluster, *args: str) -> str:
    proc = cluster.run(["sbatch", "--parsable", *args], check=True)
    return proc.stdout.strip().split(";")[0]


def scontrol_job(cluster: LocalSlurmCluster, jobid: str) -> dict[str, str]:
    out = cluster.run(["scontrol", "show", "job", jobid, "--oneliner"], check=True).stdout
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def wait_squeue_state(cluster: LocalSlurmCluster, jobid: str, state: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        seen = cluster.run(["squeue", "-h", "-j", jobid, "-o", "%T"]).stdout.strip()
        if seen == state:
            return
        time.sleep(0.2)
    raise AssertionError(f"job {jobid} never reached {state} (last: {seen!r})")


def test_partitions_match_the_advertised_data(slurm_cluster):
    out = slurm_cluster.run(["sinfo", "-h", "-o", "%R %l %D"], check=True).stdout
    seen = {name: (limit, int(nodes)) for name, limit, nodes in (line.split() for line in out.splitlines())}
    for p in slurm_cluster.partitions.values():
        h, m = divmod(p.max_time_min, 60)
        assert seen[p.name] == (f"{h}:{m:02d}:00" if h else f"{m}:00", len(slurm_cluster.partition_nodes(p.name)))
    assert slurm_cluster.default_partition == "debug"


def test_srun_runs_one_task_on_each_node(slurm_cluster):
    out = slurm_cluster.run(
        ["srun", "-N2", "--ntasks-per-node=1", "-t", "1", "bash", "-c", "echo $SLURMD_NODENAME"], check=True
    ).stdout.split()
    assert sorted(out) == sorted(slurm_cluster.hostnames)
    assert len(set(slurm_cluster.node_addr(n) for n in out)) == 2


def test_gpu_job_resources_are_recorded(slurm_cluster):
    jobid = sbatch(
        slurm_cluster,
        "--gres=gpu:1",
        "-p",
        "gpu",
        "--cpus-per-task=4",
        "--mem=1G",
        "-t",
        "10",
        "--tmp=1G",
        "--wrap",
        "true",
    )
    assert slurm_cluster.wait_job(jobid) == "COMPLETED"
    job = scontrol_job(slurm_cluster, jobid)  # still listed thanks to MinJobAge
    assert job["Partition"] == "gpu"
    assert job["NumCPUs"] == "4"
    assert job["MinMemoryNode"] == "1G"
    assert job["MinTmpDiskNode"] == "1G"
    assert job["TimeLimit"] == "00:10:00"
    assert job["TresPerNode"] == "gres:gpu:1"
    if slurm_cluster.accounting:
        # slurmdbd stores a job's start and end asynchronously: under load the end can arrive first, and until the
        # start record is in the row lacks the partition and request (seen under CI). Poll until it is complete.
        deadline = time.monotonic() + 60
        while True:
            row = slurm_cluster.run(
                ["sacct", "-nXP", "-j", jobid, "-o", "State,Partition,AllocCPUS,ReqMem,Timelimit,AllocTRES"],
                check=True,
            ).stdout.strip()
            state, partition, cpus, mem, limit, tres = row.split("|")
            if partition or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert (state, partition, cpus, mem, limit) == ("COMPLETED", "gpu", "4", "1G", "00:10:00")
        assert {"gres/gpu=1", "cpu=4", "mem=1G"} <= set(tres.split(","))


def test_batch_job_sees_gpus_and_reaches_the_cluster_from_inside(slurm_cluster, tmp_path: Path):
    # --export=NONE: slurmd itself must give the job SLURM_CONF, or an inner srun misses the private config.
    out = tmp_path / "job.out"
    jobid = sbatch(
        slurm_cluster,
        "--export=NONE",
        "-p",
        "gpu",
        "--gres=gpu:2",
        "-o",
        str(out),
        "--wrap",
        'echo "conf=$SLURM_CONF cuda=$CUDA_VISIBLE_DEVICES job_gpus=$SLURM_JOB_GPUS"\n'
        "srun -n1 /bin/sh -c 'echo step=$SLURM_STEP_ID'",
    )
    assert slurm_cluster.wait_job(jobid) == "COMPLETED", out.read_text()
    text = out.read_text()
    # The two GPUs Slurm allocated, whichever of the node's four were free (other modules' jobs hold some while the
    # suite runs): the gres plugin exports them as CUDA_VISIBLE_DEVICES, the same ones it records in SLURM_JOB_GPUS.
    found = re.search(r"^conf=(\S*) cuda=(\S*) job_gpus=(\S*)$", text, re.M)
    assert found, text
    conf, cuda, job_gpus = found.groups()
    assert conf == str(slurm_cluster.conf_path)
    assert len(set(cuda.split(","))) == 2 and set(cuda.split(",")) <= {"0", "1", "2", "3"}, text
    assert cuda == job_gpus, text
    assert "step=0" in text


def test_accounts_are_enforced(slurm_cluster):
    assert slurm_cluster.accounting, "the test cluster runs without accounting (local_slurm starts it with)"
    rejected = slurm_cluster.run(["sbatch", "-A", slurm_cluster.other_account, "--wrap", "true"])
    assert rejected.returncode != 0
    assert "Invalid account" in rejected.stderr
    explicit = sbatch(slurm_cluster, "-A", slurm_cluster.account, "--wrap", "true")
    default = sbatch(slurm_cluster, "--wrap", "true")
    assert [slurm_cluster.wait_job(j) for j in (explicit, default)] == ["COMPLETED"] * 2
    # slurmctld hands each job's record to slurmdbd on its own time (seen: one of the two missing from sacct right
    # after both COMPLETED, on a loaded machine): ask again until both are there
    deadline = time.monotonic() + 60
    while True:
        accounts = slurm_cluster.run(["sacct", "-nXP", "-j", f"{explicit},{default}", "-o", "Account"]).stdout
        if len(accounts.split()) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert accounts.split() == [slurm_cluster.account] * 2


def test_time_limit_above_partition_max_stays_pending(slurm_cluster):
    # Slurm 22.05's default EnforcePartLimits=NO accepts the job and never starts it.
    short = slurm_cluster.partitions["short"]
    jobid = sbatch(slurm_cluster, "-p", short.name, "-t", str(short.max_time_min + 5), "--wrap", "true")
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            state_reason = slurm_cluster.run(["squeue", "-h", "-j", jobid, "-o", "%T %r"]).stdout.split()
            if state_reason == ["PENDING", "PartitionTimeLimit"]:
                break
            time.sleep(0.2)
        assert state_reason == ["PENDING", "PartitionTimeLimit"]
    finally:
        slurm_cluster.run(["scancel", jobid])


def test_scancel_of_running_job_is_recorded_cancelled(slurm_cluster, tmp_path: Path):
    started = tmp_path / "started"
    # exec: no child for the cancel to orphan (proctrack/linuxproc misses children forked mid-cancel).
    jobid = sbatch(slurm_cluster, "-t", "5", "--wrap", f"touch {started}; exec sleep 300")
    wait_squeue_state(slurm_cluster, jobid, "RUNNING")
    deadline = time.monotonic() + 15
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists()
    slurm_cluster.run(["scancel", jobid], check=True)
    assert slurm_cluster.wait_job(jobid, timeout=30) == "CANCELLED"


def test_stop_without_start_is_a_no_op(tmp_path: Path):
    cluster = LocalSlurmCluster(tmp_path)
    cluster.stop()
    cluster.stop()
    assert not cluster.is_running()
