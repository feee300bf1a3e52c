"""Images enter the plan only on container sites, and only for the stages/agents that name one (dry-runs)."""

from tests.e2e.smk import REPO, plan


def test_local_default_plans_no_image(tmp_path):
    jobs = plan(tmp_path)
    assert "image" not in jobs and "edf" not in jobs and jobs["train"]


def test_posttrainbench_on_generic_builds_its_two_sif_images_once(tmp_path):
    jobs = plan(
        tmp_path, "--configfile", str(REPO / "config" / "posttrainbench-ptflow.yaml"), "--config", "site=generic"
    )
    # cached by name: one build each (image + its build record) for 224 trainings and 252 evaluations
    assert jobs["image"] == {
        f"/shared/ptflow/images/{name}.sif{ext}" for name in ("standard", "vllm_debug") for ext in ("", ".json")
    }


def test_alps_builds_sqsh_and_edf_and_rebuilds_them_where_scratch_moves(tmp_path):
    """The guide's names (ngc-ray-vllm+v0.10.2.sqsh, edf/ngc-ray-vllm-v0.10.2.toml) under CE_IMAGES; after the
    /capstor -> /ritom move (one key, vars.SCRATCH) the plan builds both at the new place, and the verl venv too."""
    env = {"PTFLOW_ACCOUNT": "g204", "USER": "alice"}
    verl = str(REPO / "config" / "verl.yaml")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    jobs = plan(tmp_path / "a", "--configfile", verl, "--config", "site=alps", env=env)
    assert any("/capstor/scratch/cscs/alice/images/ngc-ray-vllm+v0.10.2.sqsh" in o for o in jobs["image"])
    assert jobs["edf"] == {"/capstor/scratch/cscs/alice/images/edf/ngc-ray-vllm-v0.10.2.toml"}
    assert jobs["env"] == {"/capstor/scratch/cscs/alice/ptflow/results/envs/verl.json"}  # before verl's trainings
    moved = tmp_path / "alps-ritom.yaml"
    text = (REPO / "config" / "sites" / "alps.yaml").read_text()
    moved.write_text(text.replace("SCRATCH: /capstor/scratch/cscs/$USER", "SCRATCH: /ritom/scratch/cscs/$USER"))
    jobs = plan(tmp_path / "b", "--configfile", verl, "--config", f"site={moved}", env=env)
    assert any("/ritom/scratch/cscs/alice/images/ngc-ray-vllm+v0.10.2.sqsh" in o for o in jobs["image"])
    assert jobs["edf"] == {"/ritom/scratch/cscs/alice/images/edf/ngc-ray-vllm-v0.10.2.toml"}
