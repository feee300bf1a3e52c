"""verl and NeMo-RL command lines and configs, checked against the Alps/NSCC guide and the JUWELS plan.

Neither can train here (no GPU): these are the exact argv/config a GPU run gets; only this module builds them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ptflow.config.entries import Agent
from ptflow.config.sites import RuntimeSpec, load_site
from ptflow.specs import StageRuntime
from ptflow.stages.train import nemo, verl
from tests.conftest import REPO


def overrides(variant, **kw):
    args = dict(
        variant=variant,
        model_path="/hf/Qwen3-4B",
        train_files="/r/data/gsm8k/train.parquet",
        val_files="/r/data/gsm8k/test.parquet",
        nnodes=2,
        gpus_per_node=4,
        checkpoint_dir="/capstor/scratch/cscs/u/ptflow/checkpoints/m/e/a.verl/checkpoints",
        save_freq=20,
    )
    args.update(kw)
    return dict(o.split("=", 1) for o in verl.trainer_overrides(verl.VerlRun(**args)))


def test_ppo_quickstart_overrides():
    o = overrides("ppo-gsm8k")
    assert o["data.train_files"].endswith("train.parquet") and o["data.val_files"].endswith("test.parquet")
    assert o["actor_rollout_ref.model.path"] == o["critic.model.path"] == "/hf/Qwen3-4B"
    assert o["trainer.nnodes"] == "2" and o["trainer.n_gpus_per_node"] == "4"
    assert o["trainer.default_local_dir"].startswith("/capstor/scratch/")  # 47 GB checkpoints: scratch only
    assert o["trainer.save_freq"] == "20" and o["trainer.resume_mode"] == "auto"
    assert o["actor_rollout_ref.rollout.name"] == "vllm" and o["trainer.val_before_train"] == "False"
    argv = verl.driver_argv(
        "/venv/bin/python",
        "ppo-gsm8k",
        verl.trainer_overrides(
            verl.VerlRun(
                "ppo-gsm8k",
                model_path="m",
                train_files="t",
                val_files="v",
                nnodes=2,
                gpus_per_node=4,
                checkpoint_dir="/c",
            )  # fmt: skip
        ),
    )
    assert argv[:3] == ["/venv/bin/python", "-m", "verl.trainer.main_ppo"]


def test_dapo_recipe_overrides():
    o = overrides("dapo")
    assert o["reward_model.reward_manager"] == "dapo" and o["algorithm.filter_groups.enable"] == "True"
    assert (o["actor_rollout_ref.actor.clip_ratio_low"], o["actor_rollout_ref.actor.clip_ratio_high"]) == (
        "0.2",
        "0.28",
    )
    assert o["actor_rollout_ref.actor.loss_agg_mode"] == "token-mean" and "critic.model.path" not in o
    assert verl.VARIANTS["dapo"][0] == ["-m", "recipe.dapo.main_dapo"]


def test_agent_overrides_apply_but_cannot_change_managed_keys():
    assert overrides("ppo-gsm8k", overrides={"trainer.total_epochs": 1})["trainer.total_epochs"] == "1"
    with pytest.raises(ValueError, match="trainer.nnodes"):
        overrides("ppo-gsm8k", overrides={"trainer.nnodes": 1})


def test_newest_checkpoint_and_merger(tmp_path):
    for n in (10, 20, 5):
        (tmp_path / f"global_step_{n}" / "actor").mkdir(parents=True)
    assert verl.newest_checkpoint(tmp_path).name == "global_step_20"
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("10\n")
    step = verl.newest_checkpoint(tmp_path)
    assert step.name == "global_step_10"
    argv = verl.merge_argv("/venv/bin/python", step, "/out")
    assert argv[1:5] == ["-m", "verl.model_merger", "merge", "--backend"]
    assert argv[argv.index("--local_dir") + 1] == str(step / "actor") and argv[-1] == "/out"
    with pytest.raises(FileNotFoundError, match="save_freq"):
        verl.newest_checkpoint(tmp_path / "empty")


def test_state_dir_survives_the_staging_swap():
    """One state dir per cell, whichever attempt's staging dir (.<agent>.partial-<attempt>) the trainer writes."""
    want = Path("/s/checkpoints/m/e/verl-dapo.verl")
    assert verl.state_dir(Path("/s/checkpoints/m/e/.verl-dapo.partial")) == want
    assert verl.state_dir(Path("/s/checkpoints/m/e/.verl-dapo.partial-vm-123-job7")) == want


def values(variant="full", **kw):
    args = dict(
        cell="m/e/a",
        student="/hf/student",
        teacher="Qwen/Qwen3-8B",
        checkpoint_dir="/p/scratch/ck",
        log_dir="/p/scratch/logs",
        num_nodes=2,
        gpus_per_node=4,
        variant=variant,
        checkout="/p/project1/nemo-rl",
    )
    args.update(kw)
    return nemo.config_values(nemo.Distillation(**args))


def test_nemo_config_matches_the_plan(tmp_path):
    cfg = yaml.safe_load(nemo.render_config(values(settings={"teacher_tp": 2}), tmp_path / "d.yaml").read_text())
    assert cfg["defaults"] == "/p/project1/nemo-rl/examples/configs/distillation_math.yaml"
    assert cfg["policy"]["model_name"] == "/hf/student" and cfg["teacher"]["model_name"] == "Qwen/Qwen3-8B"
    assert cfg["policy"]["max_total_sequence_length"] == 4096 and cfg["policy"]["train_global_batch_size"] == 16
    assert cfg["policy"]["generation"]["colocated"] == {"enabled": False, "resources": {"gpus_per_node": 2}}
    assert cfg["policy"]["generation"]["vllm_cfg"]["tensor_parallel_size"] == 2
    assert cfg["teacher"]["dtensor_cfg"]["tensor_parallel_size"] == 2
    assert cfg["cluster"] == {"gpus_per_node": 4, "num_nodes": 2}
    assert (
        cfg["data"]["train"]["dataset_name"] == "DeepScaler" and cfg["data"]["validation"]["dataset_name"] == "AIME2024"
    )
    assert cfg["checkpointing"]["checkpoint_dir"] == "/p/scratch/ck" and cfg["logger"]["wandb_enabled"] is False


def test_nemo_smoke_is_five_steps_on_one_node(tmp_path):
    v = values("smoke")
    assert v["max_num_steps"] == 5 and v["num_nodes"] == 1
    argv = nemo.driver_argv(tmp_path / "d.yaml", v, uv="/p/project1/nemo-rl/.venv/bin/uv")
    assert argv[1:5] == ["run", "python", "examples/run_distillation.py", "--config"]
    assert Path(argv[5]).is_absolute()
    assert "distillation.max_num_steps=5" in argv and "cluster.num_nodes=1" in argv
    assert "logger.wandb_enabled=False" in argv


def test_nemo_refuses_unknown_settings_and_no_training_gpu():
    with pytest.raises(ValueError, match="not a setting"):
        values(settings={"polcy.lr": 1})
    with pytest.raises(ValueError, match="no GPU"):
        values(num_nodes=1, gpus_per_node=2)


def test_nemo_checkout_from_the_juwels_venv():
    juwels = StageRuntime(RuntimeSpec("juwels", "venv", venv="/p/project1/envcomp/u/nemo-rl/.venv"))
    assert nemo.default_checkout(juwels) == ("/p/project1/envcomp/u/nemo-rl")


def test_example_configs_plan_on_their_sites(monkeypatch):
    monkeypatch.setenv("PTFLOW_ACCOUNT", "acc")
    monkeypatch.setenv("PTFLOW_PARTITION", "booster")
    alps = load_site("alps", REPO / "config" / "sites")
    req = alps.request("train", Agent("verl-dapo", "verl"))
    assert (req["nodes"], req["gpus"], req["threads"], req["runtime"]) == (2, 4, 288, 60)
    res = req.snakemake_resources()
    assert (res["nodes"], res["gres"], res["tasks"], res["mpi"]) == (2, "gpu:4", 2, "srun")
    juwels = load_site("juwels", REPO / "config" / "sites")
    assert juwels.request("train", Agent("nemo-distill-smoke", "nemo-distill"))["nodes"] == 1
    assert juwels.request("train", Agent("nemo-distill", "nemo-distill"))["nodes"] == 2
    for name in ("verl", "nemo"):
        agents = yaml.safe_load((REPO / "config" / f"{name}.yaml").read_text())["agents"]
        assert {a["kind"] for a in agents} >= {"baseline"}


def test_dry_run_plans_multi_node_verl_train_jobs_on_alps(tmp_path):
    from tests.e2e.smk import snakemake

    out = snakemake(
        tmp_path,
        "-n",
        "--configfile",
        str(REPO / "config" / "verl.yaml"),
        "--config",
        "site=alps",
        profile="profiles/slurm",
    )
    text = out.stdout + out.stderr
    blocks = [b for b in text.split("rule ") if b.startswith("train:")]
    agents = {b.split("agent=")[1].split()[0].rstrip(",") for b in blocks}
    assert agents == {"verl-ppo-gsm8k", "verl-dapo"}
    for b in blocks:
        res = b.split("resources:")[1].splitlines()[0]
        for want in ("gres=gpu:4", "mpi=srun", "nodes=2", "runtime=60", "slurm_partition=normal", "tasks=2"):
            assert want in res, res
        assert "slurm_extra=--signal=USR1@600" in res, res  # the time-limit warning (ptflow.cluster.preempt)
