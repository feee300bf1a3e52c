"""The five documents' recipes, item by item, where the real tool cannot run here (no apptainer, enroot, pyxis,
GPU, NeMo-RL or verl): decisions on real inputs (Slurm's own `scontrol show config` output captured from the test
cluster), and the commands as rendered text. What runs for real is in tests/slurm/test_documents_on_slurm.py."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ptflow.cluster import envs, image_build, images, preflight, slurm
from ptflow.cluster.runtime import container_env, node_commands
from ptflow.config.layout import Layout
from ptflow.config.matrix import build_config
from ptflow.config.sites import load_site
from ptflow.config.uris import PathURIError, cluster_path
from ptflow.config.validate import ConfigError
from ptflow.jobenv import clean_shell_env
from ptflow.ops import doctor
from ptflow.specs import StageRuntime
from tests.conftest import REPO

SITES = REPO / "config" / "sites"
CONFIG_TEXT = (Path(__file__).parent / "data" / "scontrol_show_config.txt").read_text()


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("PTFLOW_ACCOUNT", "x")
    monkeypatch.setenv("PTFLOW_PARTITION", "booster")
    for var in ("SLURM_TIME_HOURS", "SLURM_TIMEOUT_HOURS", "SLURM_PARTITION", "SLURM_ACCOUNT"):
        monkeypatch.delenv(var, raising=False)


# ---- clusters without accounting: the decision comes from AccountingStorageType, never from message text ----


def test_accounting_read_from_the_clusters_configuration():
    real = slurm.parse_config(CONFIG_TEXT)  # captured from the running test cluster (slurmdbd)
    assert real["AccountingStorageType"] == "accounting_storage/slurmdbd" and real["SLURM_VERSION"] == "22.05.8"
    assert slurm.accounting_enabled(real)
    off = slurm.parse_config(
        CONFIG_TEXT.replace("accounting_storage/slurmdbd", "accounting_storage/none")
    )  # a small site's slurm.conf
    assert not slurm.accounting_enabled(off)
    assert not slurm.accounting_enabled({**real, "AccountingStorageType": "(null)"})  # newer Slurm: empty/(null)
    # no sacctmgr call is made at all where accounting is off (none would answer in a way worth reading)
    assert slurm.user_accounts("alice", off) is None and slurm.user_associations("alice", off) is None


def test_preflight_skips_the_account_check_and_says_so_once(default_raw):
    cfg = build_config(default_raw)
    site = load_site(str(REPO / "tests" / "slurm" / "localtest.yaml"), REPO)
    parts = {p: slurm.PartitionInfo(p, 720, ["n1"], 4) for p in ("debug", "gpu", "cpu")}
    cluster = slurm.ClusterInfo(parts, None, "alice", "accounting_storage/none")
    notes: list[str] = []
    assert preflight.check_cluster(cfg, site, cluster, notes=notes) == []
    assert len(notes) == 1 and "keeps no accounting (AccountingStorageType=accounting_storage/none)" in notes[0]


def test_a_declared_tmp_shared_path_wins_with_one_note():
    site = load_site(str(REPO / "tests" / "slurm" / "localtest.yaml"), REPO)
    site.raw["shared_paths"] = ["/tmp/ptflow-cluster"]
    notes: list[str] = []
    layout = Layout("/tmp/ptflow-cluster/results", "/tmp/ptflow-cluster/scratch", "/tmp/ptflow-cluster/hf")
    assert preflight.check_paths(layout, site, notes=notes) == []
    assert len(notes) == 4 and "declares /tmp/ptflow-cluster in shared_paths" in notes[0]  # evals_cache too
    site.raw["shared_paths"] = ["/shared"]
    problems = preflight.check_paths(layout, site, notes=[])
    assert "node-local storage" in problems[0] and "(/shared)" in problems[0]  # never "use /tmp/..." for /tmp


def test_constraint_names_node_features(default_raw):
    assert preflight.constraint_features("h100&ib|[a100*2]") == {"h100", "ib", "a100"}
    cfg = build_config(default_raw)
    site = load_site(str(REPO / "tests" / "slurm" / "localtest.yaml"), REPO)
    site.raw["resources"]["evaluate"]["constraint"] = "h100"
    parts = {p: slurm.PartitionInfo(p, 720, ["n1"], 4) for p in ("debug", "gpu", "cpu")}
    problems = preflight.check_cluster(cfg, site, slurm.ClusterInfo(parts, {"ptflow"}, "root"))
    assert any("constraint: 'h100' names feature(s) h100 that no node of partition gpu has" in p for p in problems)
    parts["gpu"] = dataclasses.replace(parts["gpu"], features=frozenset({"h100"}))
    assert preflight.check_cluster(cfg, site, slurm.ClusterInfo(parts, {"ptflow"}, "root")) == []


# ---- sites: one key for the scratch move, TAO's wall time, URIs ----


def test_alps_scratch_is_one_key_and_names_are_the_guides(tmp_path):
    text = (SITES / "alps.yaml").read_text()
    moved = tmp_path / "alps.yaml"
    moved.write_text(text.replace("SCRATCH: /capstor/scratch/cscs/$USER", "SCRATCH: /ritom/scratch/cscs/$USER"))
    for path, root in ((SITES / "alps.yaml", "/capstor"), (moved, "/ritom")):
        site = load_site(str(path), SITES)
        rt = site.runtime
        assert images.image_inputs(rt, "ngc-ray-vllm:v0.10.2") == {
            "image": f"{root}/scratch/cscs/alice/images/ngc-ray-vllm+v0.10.2.sqsh",
            "edf": f"{root}/scratch/cscs/alice/images/edf/ngc-ray-vllm-v0.10.2.toml",
        }
        assert images.image_path(rt, "ngc-ray:25.06").endswith("/images/ngc-ray+25.06.sqsh")
        assert site.paths["scratch"] == f"{root}/scratch/cscs/alice/ptflow"


def test_pyxis_wall_time_follows_tao_variables(monkeypatch):
    site = load_site("pyxis", SITES)
    assert site.request("train").get("runtime") == 240 and site.request("evaluate").get("runtime") == 240
    assert abs(site.supervises("train").internal_timeout_fraction - 3.8 / 4) < 1e-9
    monkeypatch.setenv("SLURM_TIME_HOURS", "2")
    monkeypatch.setenv("SLURM_TIMEOUT_HOURS", "1.5")
    site = load_site("pyxis", SITES)
    assert site.request("train").get("runtime") == 120 and site.supervises("train").internal_timeout_fraction == 0.75
    monkeypatch.setenv("SLURM_TIME_HOURS", "5")
    with pytest.raises(ConfigError, match=r"time_hours: 5 h \(SLURM_TIME_HOURS\) is above partition .*4 h"):
        load_site("pyxis", SITES)
    monkeypatch.setenv("SLURM_TIME_HOURS", "3")
    monkeypatch.setenv("SLURM_TIMEOUT_HOURS", "3")
    with pytest.raises(ConfigError, match="must be below time_hours"):
        load_site("pyxis", SITES)


def test_a_request_above_its_partitions_declared_limit_is_refused_when_the_site_is_read(tmp_path):
    text = (SITES / "pyxis.yaml").read_text().replace("mem_mb: 64000, runtime: 60}", "mem_mb: 64000, runtime: 300}")
    (tmp_path / "pyxis.yaml").write_text(text)
    with pytest.raises(
        ConfigError, match=r"resources.default.runtime: 300 min is above partition .*max_runtime of 240"
    ):
        load_site(str(tmp_path / "pyxis.yaml"), SITES)


def test_tao_account_and_partition_from_the_environment(monkeypatch):
    assert load_site("pyxis", SITES).account is None  # unset: no -A
    monkeypatch.setenv("SLURM_ACCOUNT", "edgeai")
    site = load_site("pyxis", SITES)
    assert site.account == "edgeai" and site.request("train")["partition"] == "polar,polar3,polar4,grizzly"
    assert "--account=edgeai" in site.request("train").sbatch_options(job_name="j", output="o")


def test_lustre_and_slurm_uris_become_paths_and_others_are_refused():
    assert cluster_path("lustre:///lustre/fsw/me/data") == "/lustre/fsw/me/data"
    assert cluster_path("slurm://cluster1/lustre/x") == "/lustre/x"
    assert cluster_path("/plain") == "/plain" and cluster_path("file:///x") == "file:///x"  # refused at preflight
    for bad in ("s3://bucket/x", "lustre://host/x"):
        with pytest.raises(PathURIError):
            cluster_path(bad)
    raw = {"paths": {"results": "lustre:///lustre/r", "scratch": "/lustre/s", "hf_home": "slurm:///lustre/h"}}
    assert Layout.from_config(raw) == Layout("/lustre/r", "/lustre/s", "/lustre/h")


# ---- images: a slow registry import is stopped, reported and retried once (enroot stand-in) ----


def _fake_enroot(tmp_path: Path, sleeps: list[int]) -> Path:
    """A stand-in for enroot (not installable here): hangs for the given seconds on successive calls, then writes
    the -o file, as `enroot import -o FILE URI` would."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    counter = tmp_path / "calls"
    script = bindir / "enroot"
    script.write_text(
        "#!/bin/bash\n"
        f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}\n"
        f"sleeps=({' '.join(map(str, sleeps))})\n"
        'sleep "${sleeps[$((n-1))]:-0}"\n'
        'out=$3; echo image > "$out"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bindir


def _import_plan(tmp_path, timeout_minutes):
    rt = load_site("pyxis", SITES).runtime
    rt = dataclasses.replace(rt, build={"import_timeout_minutes": timeout_minutes})
    return image_build.plan_build(rt, "ngc-pytorch", tmp_path / "ngc-pytorch.sqsh", digest="d", workdir=tmp_path)


def test_import_timeout_retried_once_then_clear_error(tmp_path, monkeypatch):
    bindir = _fake_enroot(tmp_path, [30, 0])
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    plan = _import_plan(tmp_path, 0.02)  # 1.2 s
    lines = []
    image_build.run_build(plan, log=lines.append)
    assert plan.output.read_text() == "image\n"
    assert any("did not finish within 0.02 min (try 1 of 2); trying once more" in ln for ln in lines)
    (tmp_path / "b").mkdir()
    monkeypatch.setenv("PATH", f"{_fake_enroot(tmp_path / 'b', [30, 30])}:{os.environ['PATH']}")
    plan = _import_plan(tmp_path / "b", 0.02)
    with pytest.raises(image_build.ImportTimeout, match="timed out twice.*resources.convert"):
        image_build.run_build(plan, log=lambda m: None)
    assert not plan.output.exists()


def test_convert_request_of_its_own_else_image():
    pyxis = load_site("pyxis", SITES)
    assert pyxis.request("convert")["runtime"] == 120 and pyxis.request("convert")["threads"] == 8
    generic = load_site("generic", SITES)
    assert generic.request("convert").values == generic.request("image").values


# ---- environments: the verl venv and NeMo-RL's uv sync, as the commands they run ----


def test_alps_verl_venv_runs_inside_the_image(tmp_path):
    rt = load_site("alps", SITES).runtime
    plan = envs.plan_env(rt, "verl")
    edf = "/capstor/scratch/cscs/alice/images/edf/ngc-ray-vllm-v0.10.2.toml"
    assert plan.argv[:4] == ["srun", "--overlap", "--ntasks=1", f"--environment={edf}"]
    assert plan.argv[4:7] == ["bash", "--noprofile", "--norc"]
    assert "python3 -m venv --system-site-packages /users/alice/VERL-NSCC/venv-vllm-v0.10.2" in plan.script
    assert (
        "/users/alice/VERL-NSCC/venv-vllm-v0.10.2/bin/python -m pip install --no-build-isolation -e "
        "/users/alice/VERL-NSCC" in plan.script
    )
    assert "import verl" in plan.script
    script = tmp_path / "s.sh"
    script.write_text(plan.script)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    # verl's train jobs: the venv's python and ray, in the same container
    from ptflow.config.entries import Agent

    overlay = envs.overlay_venv(rt, Agent("verl-ppo-gsm8k", "verl"))
    nodes = node_commands(StageRuntime(rt, image=edf, gpus=4, **overlay))
    assert nodes.python == "/users/alice/VERL-NSCC/venv-vllm-v0.10.2/bin/python"
    assert nodes.ray == "/users/alice/VERL-NSCC/venv-vllm-v0.10.2/bin/ray"
    assert nodes.srun_flags == [f"--environment={edf}"]


def test_juwels_nemo_env_is_uv_sync_with_the_plans_extras(tmp_path):
    rt = load_site("juwels", SITES).runtime
    plan = envs.plan_env(rt, "nemo-rl", which=lambda _: "/usr/bin/true")
    assert "cd /p/project1/envcomp/alice/nemo-rl" in plan.script
    assert "/usr/bin/true sync --extra fsdp --extra vllm" in plan.script
    assert "/usr/bin/true run python -c 'import torch;" in plan.script and "import vllm" in plan.script
    assert plan.env == {"NRL_FORCE_REBUILD_VENVS": "true"}


# ---- jobs independent of shell start-up files ----


def test_user_name_without_a_passwd_entry(tmp_path):
    """The "I have no name!" case: a uid with no passwd entry and no USER."""
    # the suite runs as root; setpriv is util-linux's (essential on Debian)
    assert os.geteuid() == 0 and shutil.which("setpriv"), "needs root and setpriv to run as a uid without passwd entry"
    code = "from ptflow.jobenv import user_name, home_dir; print(user_name(), home_dir())"
    env = {k: v for k, v in os.environ.items() if k not in ("USER", "HOME")}
    env["PYTHONPATH"] = str(REPO / "src")
    out = subprocess.run(
        ["setpriv", "--reuid=54321", "--regid=54321", "--clear-groups", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "u54321"


def test_clean_shell_env_and_apptainer_home(monkeypatch):
    env = clean_shell_env({"BASH_ENV": "/home/me/.conda-hook", "ENV": "x", "PATH": "/bin"})
    assert env == {"PATH": "/bin"}
    rt = load_site("generic", SITES).runtime
    monkeypatch.setenv("HOME", "/set/by/slurm")
    assert container_env(rt, {"HOME": "/set/by/slurm"})["HOME"] != "/set/by/slurm"  # the passwd home
    assert container_env(load_site("alps", SITES).runtime, {"HOME": "/h"}) == {"HOME": "/h"}


# ---- doctor probes where the tools are not here: rendered text, bash -n ----


@pytest.mark.parametrize("site_name", ["generic", "pyxis", "alps"])
def test_doctor_probe_renders_for_every_runtime(tmp_path, site_name, default_raw):
    raw = dict(default_raw, site=site_name)
    cfg = build_config(raw)
    site = load_site(site_name, SITES)
    label, req = max(doctor.partition_requests(cfg, site).values(), key=lambda lr: lr[1].gpus)
    assert req.gpus >= 1, label
    path = doctor.render_probe(tmp_path / "probe.sh", cfg, site, "p", "evaluate", req)
    text = path.read_text()
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    # the jobs' torch is asked too, in the image the GPU jobs run in (run for real on the test cluster's venv:
    # tests/slurm/test_documents_on_slurm.py)
    assert '"torch sees GPUs"' in text and shlex.quote(doctor.TORCH_PROBE) in text
    if site_name == "generic":
        assert "apptainer --version" in text and "1.1" in text
        assert (
            "apptainer exec --nv" in text and "nvidia-smi -L" in text and "/shared/ptflow/images/vllm_debug.sif" in text
        )
        assert "409600" in text  # PostTrainBench's 400 GB of node-local disk
    if site_name == "pyxis":
        assert "srun --help" in text and "--container-image" in text and "enroot version" in text
    if site_name == "alps":
        assert "--environment" in text and "arm64" in text


# ---- ptflow interactive and smoke, as the commands they build ----


def test_interactive_asks_for_the_guides_allocation(tmp_path):
    from ptflow.launch import ray as L
    from ptflow.ops import interactive

    site = load_site("alps", SITES)
    req = interactive.site_request(site, "verl", 2, None, None)
    argv = interactive.salloc_argv(site, req, ["python", "-m", "ptflow.ops.interactive", "--inside"])
    assert argv[0] == "salloc" and "--job-name=ray-on-slurm-int" in argv
    for flag in ("--account=g204", "--partition=normal", "--time=60", "--nodes=2", "--cpus-per-task=288"):
        assert flag in argv, flag
    assert "--gres=gpu:4" in argv and not any(a.startswith(("--output", "--signal")) for a in argv)
    # the shell on the head: foreground, with a terminal, after "All workers connected!"
    nodes = [slurm.NodeAddress("nid1", "10.0.0.1", "nid1"), slurm.NodeAddress("nid2", "10.0.0.2", "nid2")]
    jr = interactive.job_runtime(site, "verl", 4)
    job = L.RayJob(7, 0, nodes, ["bash", "--rcfile", "/x/shell.rc", "-i"], tmp_path, node_commands(jr), 4, 288)
    job.foreground, job.pty = True, True
    text = L.render(job).read_text()
    assert "--pty bash --rcfile /x/shell.rc -i" in text and "--environment=" in text
    assert text.index("All workers connected!") < text.index("--pty")
    assert jr.venv == "/users/alice/VERL-NSCC/venv-vllm-v0.10.2"  # the verl venv is activated in the shell


def test_smoke_is_one_cell_as_an_agent_of_its_own(default_raw):
    raw = dict(default_raw)
    cfg = build_config(raw)
    cell = doctor.pick_cell(cfg)
    assert cfg.agents[cell.agent].trains
    config, agent_id = doctor.smoke_config(raw, cfg, cell, hours=1.0, steps=5)
    assert agent_id == f"{cell.agent}-smoke" and config["matrix"]["agents"] == [agent_id]
    smoke = next(a for a in config["agents"] if a["id"] == agent_id)
    assert smoke["params"]["steps"] == 5 and build_config(config).cells[0].agent == agent_id
    agent = {"id": "claude-opus-4-6", "kind": "cli-agent", "cli": "claude", "model": "m", "hours": 10}
    from ptflow.config.kinds import KINDS

    assert doctor.smoke_agent(agent, KINDS["cli-agent"], 1.0, 5)["hours"] == 1.0  # PostTrainBench's NUM_HOURS=1
    nemo = doctor.smoke_agent(
        {"id": "n", "kind": "nemo-distill", "params": {"teacher": "t"}}, KINDS["nemo-distill"], 1, 5
    )
    assert nemo["params"]["variant"] == "smoke"


def test_nemo_launcher_default_workload_without_command():
    """ray_bare.sub without COMMAND: NeMo-RL distillation with DISTILL_CONFIG and CKPT_DIR, sized by the allocation."""
    from ptflow.launch.ray import DEFAULT_DISTILL_CONFIG, distill_command

    assert distill_command({}, 1, 4) == [
        "uv", "run", "python", "examples/run_distillation.py", "--config", DEFAULT_DISTILL_CONFIG,
        "cluster.num_nodes=1", "cluster.gpus_per_node=4",
    ]  # fmt: skip
    argv = distill_command({"DISTILL_CONFIG": "my-1n4g.yaml", "CKPT_DIR": "/p/scratch/ckpt"}, 2, 4)
    assert argv[5:] == ["my-1n4g.yaml", "cluster.num_nodes=2", "cluster.gpus_per_node=4",
                        "checkpointing.checkpoint_dir=/p/scratch/ckpt"]  # fmt: skip


def test_the_rule_map_is_what_the_rules_say():
    """docs/rules.md is generated from the rule files, the scripts, common.smk and Jobs: regenerate it with
    ``python -m ptflow.ops.rule_map > docs/rules.md`` after changing a rule."""
    from ptflow.ops import rule_map

    expected = rule_map.render(REPO)
    assert (REPO / "docs" / "rules.md").read_text() == expected, "docs/rules.md is stale: regenerate it"
    rows = {r["rule"]: r for r in rule_map.rows(REPO)}
    # every rule of the workflow is there, each with the request that sizes it
    assert set(rows) >= {"train", "train_supervised", "evaluate", "judge", "aggregate", "image", "cache_model"}
    assert rows["evaluate"]["spec"] == "`Jobs.evaluate` -> `EvaluateSpec`"
    assert rows["train_supervised"]["where"] == "login node" and rows["train"]["request"] == "`train`"


def test_every_name_the_glossary_gives_exists():
    """docs/concepts.md's glossary names the code type that carries each word: each ``ptflow.…`` name resolves to a
    module or an attribute of one (a renamed type fails here, not in a reader's search)."""
    import importlib

    text = (REPO / "docs" / "concepts.md").read_text()
    glossary = text[text.index("## Glossary") :]
    names = sorted(set(re.findall(r"`(ptflow(?:\.\w+)+)`", glossary)))
    assert len(names) >= 10, names
    missing = []
    for name in names:
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(name)
            break
        else:
            missing.append(name)
    assert missing == []
