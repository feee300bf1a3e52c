import pytest

from ptflow.config.model import Agent, ConfigError
from ptflow.config.sites import load_site
from tests.conftest import REPO

SITES = REPO / "config" / "sites"


def test_local_site_requests():
    site = load_site("local", SITES)
    assert site.scheduler == "local"
    req = site.request("train", Agent("sft", "trl-sft"))
    assert req["threads"] == 1 and req["mem_mb"] > 0
    res = site.snakemake_resources(req)
    assert "slurm_partition" not in res and res["runtime"] == req["runtime"]


def test_unknown_site_lists_known(tmp_path):
    with pytest.raises(ConfigError, match="known sites: .*local"):
        load_site("nowhere", SITES)


def test_bad_site_file_names_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nscheduler: slurm\nresources:\n  default: {threads: 0}\n")
    with pytest.raises(ConfigError, match=r"site error in .*bad.yaml at resources.default.threads"):
        load_site(str(bad), SITES)


def test_slurm_translation(tmp_path):
    site_file = tmp_path / "s.yaml"
    site_file.write_text(
        "name: s\nscheduler: slurm\naccount: acc\nresources:\n"
        "  default: {threads: 2, mem_mb: 1000, runtime: 10, partition: cpu}\n"
        "  train: {partition: gpu, gpus: 1, gpu_type: h100, tmp_mb: 400000, constraint: h100}\n"
        "agent_resources:\n  verl: {nodes: 2, gpus: 4}\n"
    )
    site = load_site(str(site_file), SITES)
    res = site.snakemake_resources(site.request("train", Agent("sft", "trl-sft")))
    assert res == {
        "mem_mb": 1000,
        "runtime": 10,
        "constraint": "h100",
        "slurm_partition": "gpu",
        "slurm_account": "acc",
        "gres": "gpu:h100:1",
        "slurm_extra": "--tmp=400000M",
    }
    multi = site.snakemake_resources(site.request("train", Agent("v", "verl")))
    assert multi["nodes"] == 2 and multi["tasks"] == 2 and multi["mpi"] == "srun" and multi["gres"] == "gpu:h100:4"
    assert multi["tasks_per_gpu"] == 0, "else the plugin asks for --ntasks-per-gpu=2"
