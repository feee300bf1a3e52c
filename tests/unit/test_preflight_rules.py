"""Preflight rules on given cluster facts; the same checks against the live test cluster are in tests/slurm."""

from ptflow.cluster.preflight import check_cluster, check_paths, check_secrets
from ptflow.cluster.slurm import ClusterInfo, PartitionInfo
from ptflow.config.layout import Layout
from ptflow.config.matrix import build_config
from ptflow.config.sites import load_site
from tests.conftest import REPO

SITE = REPO / "tests" / "slurm" / "localtest.yaml"


def cluster(**over):
    parts = {
        "debug": PartitionInfo("debug", 60, ["n1", "n2"], 4),
        "gpu": PartitionInfo("gpu", 720, ["n1", "n2"], 4),
        "cpu": PartitionInfo("cpu", 120, ["n1", "n2"], 4),
    }
    parts.update(over)
    return ClusterInfo(parts, {"ptflow"}, "root")


def test_clean_site_passes(default_raw):
    cfg = build_config(default_raw)
    assert check_cluster(cfg, load_site(str(SITE), REPO), cluster()) == []


def test_each_cluster_problem_is_named(default_raw, tmp_path):
    cfg = build_config(default_raw)
    site = load_site(str(SITE), REPO)
    site.raw["account"] = "other"
    site.raw["resources"]["aggregate"]["partition"] = "nope"
    site.raw["resources"]["evaluate"]["runtime"] = 900
    site.raw["resources"]["train"]["gpus"] = 8
    # (a site that declares the partition's gpus_per_node spreads such a request over nodes, TAO's rule; one that
    # does not is checked against what the live cluster's nodes have)
    site.raw["partitions"]["gpu"].pop("gpus_per_node")
    problems = check_cluster(cfg, site, cluster())
    text = "\n".join(problems)
    assert "account 'other'" in text and "ptflow" in text
    assert "resources.aggregate.partition: 'nope' does not exist" in text
    assert "resources.evaluate.runtime: 900 min exceeds partition gpu's MaxTime of 720" in text
    assert "resources.train[sft].gpus: 8 GPUs per node" in text and "at most 4" in text


def test_paths_on_slurm_must_be_shared(tmp_path):
    site = load_site(str(SITE), REPO)
    bad = Layout("/tmp/x/results", "file:///scratch", "/dev/shm/hf")
    problems = check_paths(bad, site)
    assert len(problems) == 4  # evals_cache (beside scratch by default) is a file:// path too
    assert "node-local" in problems[0] and "file:// URI" in problems[1]
    assert "paths.evals_cache" in problems[3] and "file:// URI" in problems[3]


def test_home_forbidden_where_site_says_so():
    site = load_site("alps", REPO / "config" / "sites")
    layout = Layout("/users/me/results", "/users/me/scratch", "/capstor/hf")
    problems = check_paths(layout, site, home="/users/me")
    assert any("paths.scratch" in p and "$HOME" in p for p in problems)


def test_missing_agent_key_names_it():
    from ptflow.config.load import load

    cfg = load(REPO, ["config/posttrainbench-ptflow.yaml"], base_dir=REPO).cfg
    problems = check_secrets(cfg, env={"OPENAI_API_KEY": "x", "HF_TOKEN": "t"})
    assert any(p.startswith("environment variable ANTHROPIC_API_KEY is not set") for p in problems)
    assert not any("OPENAI_API_KEY" in p for p in problems)
    gated = check_secrets(cfg, env={"OPENAI_API_KEY": "x", "ANTHROPIC_API_KEY": "y", "GEMINI_API_KEY": "z"})
    assert gated == ["models google/gemma-3-4b-pt are gated: export HF_TOKEN (a token with access) before running"]
