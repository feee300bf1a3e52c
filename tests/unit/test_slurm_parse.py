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
