"""NeMo-RL on-policy distillation agents (kind ``nemo-distill``): config rendering and the one command line.

A student learns from a teacher's logits on its own generations (``examples/run_distillation.py``). The config is
rendered from ``workflow/templates/nemo_distill.yaml.j2`` (the JUWELS plan's template: student, teacher, sequence
length, batch sizes, tensor-parallel sizes, generation on GPUs of its own, cluster size, data sets, checkpoints on
scratch, logger off) and run as ``uv run python examples/run_distillation.py --config <abs> <overrides>`` from the
site's NeMo-RL checkout, with absolute paths, on the head of the Ray cluster ``ptflow.launch.ray`` brings up.
Variants: ``full`` (the allocation's nodes, 2 x 4 GPUs on JUWELS) and ``smoke`` (``max_num_steps=5``, 1 node).

NeMo-RL cannot run on this machine (no GPU, no checkout): the config and command are unit-tested against the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptflow import templates
from ptflow.files import atomic_path
from ptflow.specs import StageRuntime

VARIANTS = ("full", "smoke")

DEFAULTS = {
    "defaults": "examples/configs/distillation_math.yaml",
    "max_total_sequence_length": 4096,
    "train_global_batch_size": 16,
    "generation_batch_size": 16,
    "student_tp": 1,
    "teacher_tp": 1,
    "generation_tp": 2,
    "generation_gpus_per_node": 2,
    "train_dataset": "DeepScaler",
    "validation_dataset": "AIME2024",
    "num_prompts_per_step": 16,
    "max_num_steps": 100,
    "save_period": 10,
}
SETTINGS = tuple(DEFAULTS)


@dataclass(frozen=True)
class Distillation:
    """One cell's distillation as the template takes it: the cell, student and teacher, where checkpoints and logs go,
    the allocation's size, the variant, the agent's template settings (``params.overrides``), the NeMo-RL checkout
    and the save deadline (``ptflow.cluster.preempt.deadline_settings``)."""

    cell: str
    student: str
    teacher: str
    checkpoint_dir: str
    log_dir: str
    num_nodes: int
    gpus_per_node: int
    variant: str = "full"
    settings: dict | None = None
    checkout: str | None = None
    must_save_by: str | None = None


def config_values(d: Distillation) -> dict:
    """The template's values for ``d``: the defaults, the agent's settings, then what the cell and allocation fix."""
    variant, settings, checkout = d.variant, d.settings, d.checkout
    num_nodes, gpus_per_node = d.num_nodes, d.gpus_per_node
    if variant not in VARIANTS:
        raise ValueError(f"nemo-distill variant {variant!r} is unknown; known: {', '.join(VARIANTS)}")
    unknown = sorted(set(settings or {}) - set(SETTINGS))
    if unknown:
        raise ValueError(
            f"agent params.overrides has {', '.join(unknown)}, not a setting of the distillation template; "
            f"known: {', '.join(SETTINGS)}"
        )
    values = {**DEFAULTS, **(settings or {})}
    if variant == "smoke":
        values["max_num_steps"] = 5
        num_nodes = 1
    if checkout and not values["defaults"].startswith("/"):
        values["defaults"] = f"{checkout.rstrip('/')}/{values['defaults']}"  # absolute: the config lives elsewhere
    if values["generation_gpus_per_node"] >= gpus_per_node and num_nodes == 1:
        raise ValueError(
            f"generation_gpus_per_node={values['generation_gpus_per_node']} leaves no GPU of {gpus_per_node} for "
            "training on one node (colocated generation is off); lower it or use more GPUs"
        )
    return {
        **values,
        "cell": d.cell,
        "student": d.student,
        "teacher": d.teacher,
        "checkpoint_dir": d.checkpoint_dir,
        "log_dir": d.log_dir,
        "num_nodes": num_nodes,
        "gpus_per_node": gpus_per_node,
        "must_save_by": d.must_save_by,
    }


def render_config(values: dict, path: str | Path) -> Path:
    text = templates.render("nemo_distill.yaml.j2", **values)
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)
    return Path(path)


def driver_argv(config: str | Path, values: dict, uv: str = "uv") -> list[str]:
    """``uv run python examples/run_distillation.py --config <abs> <overrides>`` (run from the checkout).

    The overrides repeat what the allocation decides, as the plan's sbatch lines do, so the command line shows it.
    """
    return [
        uv,
        "run",
        "python",
        "examples/run_distillation.py",
        "--config",
        str(Path(config).resolve()),
        f"cluster.num_nodes={values['num_nodes']}",
        f"cluster.gpus_per_node={values['gpus_per_node']}",
        f"distillation.max_num_steps={values['max_num_steps']}",
        "logger.wandb_enabled=False",
    ]


def newest_step(checkpoint_dir: str | Path) -> Path:
    from ptflow.cluster.preempt import newest_step as newest

    found = newest(checkpoint_dir)
    if found is None:
        raise FileNotFoundError(f"NeMo-RL wrote no checkpoint under {checkpoint_dir} (no step_*): lower save_period")
    return found[1]


def convert_argv(step_dir: str | Path, target_dir: str | Path, uv: str = "uv") -> list[str]:
    """NeMo-RL's DCP-to-HF converter for the student's weights of one step."""
    step = Path(step_dir)
    return [
        uv,
        "run",
        "python",
        "examples/converters/convert_dcp_to_hf.py",
        "--config",
        str(step / "config.yaml"),
        "--dcp-ckpt-path",
        str(step / "policy" / "weights"),
        "--hf-ckpt-path",
        str(target_dir),
    ]


def state_dir(out: Path) -> Path:
    name = out.name.removeprefix(".").split(".partial", 1)[0]  # .<agent>.partial-<attempt>: one state per cell
    return out.parent / f"{name}.nemo"


def default_checkout(runtime: StageRuntime | None) -> str | None:
    """The NeMo-RL checkout of a bare-metal site: the directory holding its uv venv (JUWELS: <checkout>/.venv).
    ``runtime`` is the train job's runtime."""
    venv = runtime.site_runtime.venv if runtime else None
    return str(Path(venv).parent) if venv and Path(venv).name == ".venv" else None


def train_nemo(cell) -> dict:
    """On-policy distillation on a Ray cluster over this job's allocation, then the student's newest step converted
    to HF format in the cell's staging dir (``cell``: a ``ptflow.stages.train.cell.Training``). Needs GPUs and a
    NeMo-RL checkout: it does not run on the CPU test machine."""
    from ptflow.cluster import slurm
    from ptflow.cluster.preempt import deadline_settings, job_deadline, stopped_by_deadline
    from ptflow.cluster.runtime import node_commands
    from ptflow.launch.ray import job_from_allocation, run, run_step

    params, runtime, out, log = cell.params, cell.runtime, cell.out, cell.log
    checkout = params.get("checkout") or default_checkout(runtime)
    if not checkout:
        raise ValueError(
            "nemo-distill needs the NeMo-RL checkout: set agent params.checkout or the site's runtime.venv"
        )
    if "teacher" not in params:
        raise ValueError("nemo-distill needs params.teacher (the teacher model)")
    rt = node_commands(runtime)
    state = state_dir(Path(out))
    job = job_from_allocation([], state / "logs", runtime=rt, workdir=checkout, driver_handles_warning=False)
    nnodes, cpus, gpus = slurm.job_per_node(str(job.job_id))
    job.cpus_per_node, job.gpus_per_node = cpus, gpus
    deadline_obj = job_deadline(str(job.job_id), cell.warn_seconds)
    _, deadline = deadline_settings("nemo", deadline_obj)
    distillation = Distillation(
        cell=str(cell.spec.cell.to_params()),  # the cell's dict as it prints, as the rendered config always had it
        student=cell.start_model,
        teacher=params["teacher"],
        checkpoint_dir=str(state / "checkpoints"),
        log_dir=str(state / "nemo-logs"),
        num_nodes=nnodes,
        gpus_per_node=gpus,
        variant=params.get("variant", "full"),
        settings={
            **params.get("overrides", {}),
            **({"save_period": params["save_freq"]} if "save_freq" in params else {}),
        },
        checkout=checkout,
        must_save_by=deadline.get("checkpoint_must_save_by"),
    )
    values = config_values(distillation)
    config = render_config(values, job.job_dir / "distillation.yaml")
    uv = str(Path(checkout) / ".venv" / "bin" / "uv") if (Path(checkout) / ".venv" / "bin" / "uv").exists() else "uv"
    job.driver = driver_argv(config, values, uv=uv)
    rc = run(job, log=log)
    if rc != 0:
        raise RuntimeError(f"NeMo-RL distillation exited with {rc}; logs in {job.job_dir}")
    step = newest_step(values["checkpoint_dir"])
    if stopped_by_deadline(deadline_obj):
        raise RuntimeError(
            f"NeMo-RL stopped at its save deadline ({values['must_save_by']} into the loop) with {step.name} saved; "
            "the retry or requeue of this job resumes from it"
        )
    run_step(job, ["bash", "-c", f'cd {checkout} && exec "$@"', "convert", *convert_argv(step, out, uv=uv)], log=log)
    return {"step": int(step.name.split("_")[1]), "train_loss": None}


def run(job) -> dict:
    """Kind ``nemo-distill``: NeMo-RL on a Ray cluster over the job's allocation."""
    return train_nemo(job)
