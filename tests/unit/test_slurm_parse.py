import pytest

from ptflow.cluster import slurm
from ptflow.cluster.multinode import srun_argv


@pytest.mark.parametrize(
    "text, minutes",
    [
        ("UNLIMITED", None),
        ("30", 30),
        ("1:00:00", 60),
        ("12:00:00", 720),
        ("1-00:00:00", 1440),
        ("2-12", 3600),
        ("00:05:30", 6),
    ],
)
def test_parse_minutes(text, minutes):
    assert slurm.parse_minutes(text) == minutes


@pytest.mark.parametrize(
    "gres, n", [("gpu:h100:4(S:0-1)", 4), ("gpu:4", 4), ("(null)", 0), ("gpu:a100:2,shard:8", 2), ("", 0)]
)
def test_gpus_in_gres(gres, n):
    assert slurm.gpus_in_gres(gres) == n


def test_scontrol_fields():
    f = slurm._fields("PartitionName=gpu AllowGroups=ALL MaxTime=12:00:00 Nodes=node[1-2] State=UP")
    assert f["PartitionName"] == "gpu" and f["MaxTime"] == "12:00:00" and f["Nodes"] == "node[1-2]"


def test_srun_argv():
    argv = srun_argv(["a", "b"], ["hostname"])
    assert argv == ["srun", "--nodes=2", "--ntasks-per-node=1", "--nodelist=a,b", "--overlap", "hostname"]


def test_recorded_request_of_a_two_node_gpu_job():
    line = (
        "JobId=7 JobName=x Account=ptflow Partition=gpu TimeLimit=1-00:00:00 NumNodes=2 NumCPUs=16 "
        "MinMemoryNode=128G TresPerNode=gres:gpu:h100:4"
    )
    fields = dict(f.split("=", 1) for f in line.split())
    assert slurm.recorded_request(fields) == {
        "partition": "gpu",
        "account": "ptflow",
        "cpus": 16,
        "gpus": 8,
        "nodes": 2,
        "mem_mb": 131072,
        "runtime": 1440,
    }
    newer = {**fields, "TresPerNode": "gres/gpu:h100:4", "NumNodes": "2-2"}  # Slurm >= 23 spells gres with a slash
    assert slurm.recorded_request(newer)["gpus"] == 8
    assert (slurm.memory_mb("4000M"), slurm.memory_mb("1T"), slurm.memory_mb("")) == (4000, 1048576, None)
