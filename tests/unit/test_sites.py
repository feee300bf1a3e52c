import json
import subprocess
import sys

import pytest
import yaml

from ptflow.cluster.preflight import requests_in_use
from ptflow.config.entries import Agent
from ptflow.config.matrix import build_config
from ptflow.config.rules import REQUEST_FALLBACK, RULE_REQUESTS, SITE_REQUESTS, request_of
from ptflow.config.sites import SITE_SCHEMA, load_site
from ptflow.config.validate import ConfigError
from ptflow.ops import plan_jobs
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


# ---- every job kind has its own request, or a fallback stated in one table (ptflow.config.rules) ----

# What each rule got before job kinds had requests of their own: a site without them must size every rule so still.
# (rule judge_run is what rule judge was before the judge panel: one judge's run; judge now decides, on the login node)
RULE_REQUEST_BEFORE = {**RULE_REQUESTS, "env": "image", "edf": "aggregate", "judge_run": "aggregate"}
REQUESTS_SITE = (
    "name: s\nscheduler: slurm\npartitions:\n  cpu: {}\n  judges: {}\nresources:\n"
    "  default: {threads: 1, mem_mb: 1000, runtime: 10, partition: cpu}\n"
    "  image: {threads: 8, mem_mb: 16000, runtime: 120}\n"
    "  aggregate: {threads: 2, mem_mb: 4000, runtime: 30}\n"
)


def requests_site(tmp_path, more: str = ""):
    path = tmp_path / "s.yaml"
    path.write_text(REQUESTS_SITE + more)
    return load_site(str(path), SITES)


@pytest.mark.parametrize("name", sorted(p.stem for p in SITES.glob("*.yaml")))
def test_a_shipped_site_sizes_every_rule_as_before(name, monkeypatch):
    for var in ("PTFLOW_ACCOUNT", "PTFLOW_PARTITION"):
        monkeypatch.setenv(var, "x")
    site = load_site(name, SITES)
    for rule in RULE_REQUESTS:
        if rule == "judge_run" and site.has_request("judge"):  # generic's: PostTrainBench's judge, its only limit
            continue
        assert site.request(request_of(rule)) == site.request(RULE_REQUEST_BEFORE[rule]), rule


def test_a_site_without_a_judge_request_sizes_judge_jobs_with_aggregate_s(tmp_path):
    site = requests_site(tmp_path)
    assert (
        site.request(request_of("judge_run")) == site.request("aggregate")
        and site.request(request_of("judge_run")).threads == 2
    )
    assert site.request(request_of("edf")) == site.request("aggregate")
    assert site.request(request_of("env")) == site.request("image") == site.request("convert")
    names = {kind: site.request_name(kind) for kind in ("judge", "edf", "env", "convert", "cache", "aggregate")}
    assert names == {"judge": "aggregate", "edf": "aggregate", "env": "image", "convert": "image", "cache": "cache",
                     "aggregate": "aggregate"}  # fmt: skip


def test_a_site_with_a_judge_request_sizes_judge_jobs_with_it(tmp_path, default_raw):
    """The judge's own request, over default (a fallback is a whole request, never merged with the judge's)."""
    site = requests_site(tmp_path, "  judge: {threads: 4, mem_mb: 8000, partition: judges}\n  env: {threads: 3}\n")
    judge = site.request(request_of("judge_run"))  # a vote of the panel; its decision (judge) is on the login node
    assert (judge.threads, judge["mem_mb"], judge["partition"], judge["runtime"]) == (4, 8000, "judges", 10)
    assert site.request_name("judge") == "judge" and site.request(request_of("aggregate")).threads == 2
    assert site.request(request_of("env")).threads == 3 and site.request("convert") == site.request("image")
    assert site.request(request_of("edf")) == site.request("aggregate")
    # the plan prices and labels judge jobs by it; preflight and doctor see it once the matrix has agent-CLI cells
    cfg = build_config(default_raw)
    (job,) = plan_jobs.job_requests(site, cfg, "judge_run", {"model": "m", "eval": "e", "agent": "a"})
    assert plan_jobs.job_requests(site, cfg, "judge", {"model": "m", "eval": "e", "agent": "a"}) == []
    assert (job.stage, job.partition, job.cpus, job.runtime) == ("judge", "judges", 4, 10)
    assert "judge" not in dict(requests_in_use(cfg, site))
    default_raw["agents"].append({"id": "scr", "kind": "cli-agent", "cli": "scripted", "model": "m", "hours": 0.1})
    default_raw["scoring"] = {"weights": {e["id"]: 1 for e in default_raw["evals"]}}
    with_agent = build_config(default_raw)
    assert dict(requests_in_use(with_agent, site))["judge"] == judge
    assert "judge" not in dict(requests_in_use(with_agent, requests_site(tmp_path)))  # aggregate's: listed already


def test_the_site_schema_lists_every_request_and_names_a_misspelt_one(tmp_path):
    schema = yaml.safe_load(SITE_SCHEMA.read_text())["properties"]["resources"]["properties"]
    assert set(schema) == {"default", *SITE_REQUESTS} and all(schema[k].get("description") for k in schema)
    assert set(RULE_REQUESTS.values()) <= set(SITE_REQUESTS) and set(REQUEST_FALLBACK) <= set(SITE_REQUESTS)
    assert not set(REQUEST_FALLBACK.values()) & set(REQUEST_FALLBACK)  # a fallback is a request of its own
    requests_site(tmp_path, "  judge: {threads: 4}\n  edf: {threads: 1}\n  env: {threads: 2}\n")  # accepted
    with pytest.raises(ConfigError) as exc:
        requests_site(tmp_path, "  jugde: {threads: 4}\n")
    assert "\n" not in str(exc.value)
    assert "at resources: unknown key 'jugde' (did you mean 'judge'?)" in str(exc.value)


def test_the_site_file_reference_documents_each_request_and_its_fallback():
    """docs/configuration.md's site-file table: one row per request, with the fallback REQUEST_FALLBACK names."""
    text = (REPO / "docs" / "configuration.md").read_text()
    rows = {}
    for line in text.split("## Site files", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`") and cells[2].startswith("`"):
            rows[cells[1].strip("`")] = cells[2].strip("`")
    assert rows == {name: REQUEST_FALLBACK.get(name, "default") for name in SITE_REQUESTS}


@pytest.mark.parametrize("own", [True, False], ids=["site-with-judge", "site-without"])
def test_the_workflow_s_judge_jobs_get_the_judge_request(tmp_path, own):
    """Through the workflow itself (its rules' threads and resources): a site's resources.judge sizes judge jobs;
    without one, aggregate's does, as before."""
    site = tmp_path / "judged.yaml"
    site.write_text(
        "name: judged\nscheduler: local\naccount: null\nresources:\n"
        "  default: {threads: 1, mem_mb: 2000, runtime: 30}\n  aggregate: {threads: 1, mem_mb: 2500, runtime: 20}\n"
        + ("  judge: {threads: 2, mem_mb: 3333, runtime: 15}\n" if own else "")
    )
    (tmp_path / "work").mkdir()
    proc = subprocess.run([sys.executable, "-c", DAG_PROBE, str(REPO), str(tmp_path / "work"), str(site)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    sized = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sized["aggregate"] == {"threads": 1, "mem_mb": 2500, "runtime": 20}
    assert sized["judge_run"] == ({"threads": 2, "mem_mb": 3333, "runtime": 15} if own else sized["aggregate"])


# The judge and aggregate jobs of the default matrix with a scripted agent, as Snakemake sizes them (its API's DAG).
DAG_PROBE = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import (ConfigSettings, DAGSettings, DeploymentSettings, OutputSettings, Quietness,
    ResourceSettings, StorageSettings, WorkflowSettings)
repo, workdir, site = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
agents = [{"id": "baseline", "kind": "baseline"},
          {"id": "scr", "kind": "cli-agent", "cli": "scripted", "model": "m", "hours": 0.01}]
config = {"site": site, "agents": agents, "scoring": {"weights": {"add": 1, "sub": 1}},
          "judge": {"cli": ["{python}", "-m", "tests.support.fake_judge"]}}
with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
    workflow = api.workflow(resource_settings=ResourceSettings(), config_settings=ConfigSettings(config=config),
        storage_settings=StorageSettings(), workflow_settings=WorkflowSettings(),
        deployment_settings=DeploymentSettings(), snakefile=repo / "Snakefile", workdir=workdir,
    ).dag(DAGSettings()).workflow_api._workflow
    workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True)
    workflow._build_dag()
    print(json.dumps({job.rule.name: {"threads": job.threads, "mem_mb": job.resources.get("mem_mb"),
                                      "runtime": job.resources.get("runtime")}
                      for job in workflow.dag.jobs if job.rule.name in ("judge_run", "aggregate")}))
"""


def test_each_rule_names_itself_and_its_request_lives_only_in_rule_requests():
    """A rule's request is written once, in ptflow.config.rules.RULE_REQUESTS; its .smk names only the rule, whose
    threads, resources and localrule come from that table through common.smk (threads_of, resources_of, is_local,
    supervised_held_of). Snakemake evaluates a rule's directives before the rule exists, so the getters cannot learn
    the rule's name themselves: this keeps the name they are given the rule's own, and every rule in the table."""
    import re

    getters = re.compile(r"\b(?:threads_of|resources_of|is_local|supervised_held_of)\(\s*\"([^\"]+)\"")
    rules = {}
    for smk in sorted((REPO / "workflow/rules").glob("*.smk")):
        for block in re.split(r"^(?=(?:rule|checkpoint) )", smk.read_text(), flags=re.M)[1:]:
            name = re.match(r"(?:rule|checkpoint) (\w+):", block).group(1)
            rules[name] = smk.name
            named = set(getters.findall(block))
            assert named <= {name}, f"{smk.name}: rule {name} is sized by another rule's name: {sorted(named)}"
    assert set(rules) == set(RULE_REQUESTS), "every rule has exactly one request in RULE_REQUESTS"


def test_a_site_whose_compute_nodes_reach_the_hub_has_its_checkout_evaluations_run_online(tmp_path):
    """``evaluation.hub: online``: every job of the site gets PTFLOW_EVAL_HUB=online (Site.process_env, which the
    workflow applies in the driver and in each job), and a checkout evaluation's environment then carries no offline
    switch, not even one the job inherited; the default keeps them offline. A misspelt value names the key."""
    from ptflow.config.sites import EVAL_HUB_ENV
    from ptflow.stages.evaluate.sources import OFFLINE_ENV
    from ptflow.stages.posttrainbench.checkout_eval import eval_environment

    path = tmp_path / "s.yaml"
    path.write_text("name: s\nscheduler: slurm\nevaluation: {hub: online}\nresources:\n  default: {threads: 1}\n")
    online = load_site(str(path), SITES)
    assert online.evaluation.hub == "online" and online.process_env[EVAL_HUB_ENV] == "online"
    local = load_site("local", SITES)
    assert local.evaluation.hub == "offline" and EVAL_HUB_ENV not in local.process_env
    inherited = {"HF_HUB_OFFLINE": "1", "PATH": "/bin", "OPENAI_API_KEY": "sk-x"}
    env = eval_environment({**inherited, **online.process_env}, ())
    assert not set(OFFLINE_ENV) & set(env) and env["PATH"] == "/bin" and "OPENAI_API_KEY" not in env
    env = eval_environment({**inherited, **local.process_env}, ())
    assert all(env[k] == v for k, v in OFFLINE_ENV.items())
    path.write_text("name: s\nscheduler: slurm\nevaluation: {hub: yes}\nresources:\n  default: {threads: 1}\n")
    with pytest.raises(ConfigError, match=r"at evaluation.hub"):
        load_site(str(path), SITES)
