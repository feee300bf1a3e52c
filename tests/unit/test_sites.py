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
    res = req.snakemake_resources()
    assert "slurm_partition" not in res and res["runtime"] == req["runtime"]


def test_warm_start_is_for_local_sites_only(tmp_path):
    assert load_site("local", SITES).warm_start is True  # the embedded default's jobs start warm
    slurm = tmp_path / "s.yaml"
    slurm.write_text("name: s\nscheduler: slurm\nwarm_start: true\nresources:\n  default: {threads: 1}\n")
    with pytest.raises(ConfigError, match=r"site error in .*s.yaml at warm_start: true is only for scheduler: local"):
        load_site(str(slurm), SITES)


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
    res = site.request("train", Agent("sft", "trl-sft")).snakemake_resources()
    assert res == {
        "mem_mb": 1000,
        "runtime": 10,
        "constraint": "h100",
        "slurm_partition": "gpu",
        "gres": "gpu:h100:1",
        "slurm_extra": "--tmp=400000M",
        "cpus_total": 2,
        "gpus_total": 1,
    }
    multi = site.request("train", Agent("v", "verl")).snakemake_resources()
    assert multi["nodes"] == 2 and multi["tasks"] == 2 and multi["mpi"] == "srun" and multi["gres"] == "gpu:h100:4"
    assert multi["tasks_per_gpu"] == 0, "else the plugin asks for --ntasks-per-gpu=2"


def test_sbatch_flags_are_the_plugin_resources_as_flags(tmp_path):
    """The one translation: the supervisor's and the SkyRL server's sbatch flags equal the plugin's resources."""
    site_file = tmp_path / "s.yaml"
    site_file.write_text(
        "name: s\nscheduler: slurm\naccount: acct\nrequeue: true\nretry_growth: 2\n"
        "partitions:\n  polar: {max_runtime: 300}\nresources:\n"
        "  default: {threads: 16, mem_mb: 256000, runtime: 240, partition: polar, gpus: 4, tmp_mb: 100}\n"
    )
    req = load_site(str(site_file), SITES).request("train")
    assert req.sbatch_options(job_name="ptflow-train-x", output="/l/train-%j.out") == [
        "--job-name=ptflow-train-x",
        "--output=/l/train-%j.out",
        "--cpus-per-task=16",
        "--partition=polar",
        "--account=acct",
        "--time=240",
        "--gres=gpu:4",
        "--mem=256000M",
        "--tmp=100M",
        "--requeue",
    ]
    again = req.sbatch_options(job_name="j", output="o", attempt=2)
    assert "--time=300" in again and "--mem=512000M" in again  # retries grow, capped at the partition's limit
    assert req.from_dict(req.to_dict()) == req  # what a rule's params carry


def test_the_account_reaches_the_plugin_as_sbatch_account_not_as_a_resource(tmp_path):
    """As the plugin's slurm_account resource it would be checked with sacctmgr before every submission."""
    site_file = tmp_path / "s.yaml"
    site_file.write_text(
        "name: s\nscheduler: slurm\naccount: acct\nenv: {FI_PROVIDER: tcp}\nresources:\n  default: {}\n"
    )
    site = load_site(str(site_file), SITES)
    assert site.process_env == {"FI_PROVIDER": "tcp", "SBATCH_ACCOUNT": "acct"}
    assert "slurm_account" not in site.request("train").snakemake_resources()
    assert "SBATCH_ACCOUNT" not in load_site("local", SITES).process_env
    site_file.write_text("name: s\nscheduler: slurm\nresources:\n  default: {}\n")
    assert load_site(str(site_file), SITES).process_env == {}


def test_a_stage_without_its_own_request_gets_the_default_and_says_so():
    site = load_site("local", SITES)
    assert not site.has_request("runtime_server") and site.has_request("default")
    assert site.request("runtime_server").values == site.raw["resources"]["default"]


def test_a_node_worth_of_gpus_is_exclusive_and_more_spread_over_nodes(tmp_path):
    """TAO's rule, in Site.request: >= a node's GPUs takes whole nodes; more spread over the nodes they need."""
    site_file = tmp_path / "s.yaml"
    site_file.write_text(
        "name: s\nscheduler: slurm\npartitions:\n  gpu: {gpus_per_node: 8}\nresources:\n"
        "  default: {threads: 2, partition: gpu}\n  train: {gpus: 4}\n"
        "agent_resources:\n  full: {gpus: 8}\n  two: {gpus: 16}\n  odd: {gpus: 12}\n"
    )
    site = load_site(str(site_file), SITES)
    assert "exclusive" not in site.request("train").values
    full = site.request("train", Agent("full", "trl-sft"))
    assert full["exclusive"] and full.get("nodes", 1) == 1 and full["gpus"] == 8
    assert "--exclusive" in full.snakemake_resources()["slurm_extra"]
    assert "--exclusive" in full.sbatch_options(job_name="j", output="o")
    two = site.request("train", Agent("two", "trl-sft"))
    assert (two["nodes"], two["gpus"], two["exclusive"]) == (2, 8, True)
    res = two.snakemake_resources()
    assert res["nodes"] == 2 and res["gres"] == "gpu:8" and res["tasks"] == 2 and res["mpi"] == "srun"
    odd = site.request("train", Agent("odd", "trl-sft"))
    assert (odd["nodes"], odd["gpus"]) == (2, 6)  # 12 GPUs: two nodes, split evenly
    # only train jobs span nodes: an evaluate asking for more than a node has stays as asked (the cluster check
    # refuses it), a node's worth is exclusive as for train
    site.raw["resources"]["evaluate"] = {"gpus": 16}
    assert site.request("evaluate").values.get("nodes", 1) == 1 and site.request("evaluate")["gpus"] == 16
    site.raw["resources"]["evaluate"] = {"gpus": 8}
    assert site.request("evaluate")["exclusive"] and site.request("evaluate").get("nodes", 1) == 1


def test_attempt_scaled_names_exactly_what_a_retry_changes(tmp_path):
    """The workflow gives a rule every other resource as a constant (evaluated by Snakemake once, not per job)."""
    for growth, scaled in (("1.5", ("runtime", "mem_mb")), ("1.0", ())):
        site_file = tmp_path / "s.yaml"
        site_file.write_text(
            f"name: s\nscheduler: slurm\nretry_growth: {growth}\npartitions:\n  p: {{}}\nresources:\n"
            "  default: {threads: 4, mem_mb: 1000, runtime: 60, partition: p, tmp_mb: 10}\n"
        )
        req = load_site(str(site_file), SITES).request("train")
        assert req.attempt_scaled == scaled
        first, third = req.snakemake_resources(1), req.snakemake_resources(3)
        assert {k for k in first if first[k] != third[k]} == set(scaled)
