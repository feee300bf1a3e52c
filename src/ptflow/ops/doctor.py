"""``ptflow doctor --site NAME`` and ``ptflow smoke``: every document's "test it first" steps as two commands.

doctor: the login-node checks (preflight: partitions, account, time limits, node features, inputs, enroot
credentials, Slurm's accounting and the user's account/QoS associations, the QOS/association caps the run keeps
under), then one short job per partition the matrix uses, with that partition's largest request of the matrix (its
GPUs, ``--constraint``, ``--tmp``) and a five-minute limit, running ``templates/doctor_probe.sh.j2``: container
runtime and version (apptainer >= 1.1, enroot/pyxis, EDF), GPUs visible inside the container (``nvidia-smi -L``
through the site's runtime) and to the jobs' torch (a CPU build of torch trains on the CPUs), /dev/fuse and
fuse-overlayfs, uuidgen, free node-local disk against ``tmp_mb``, outbound HTTPS to the API hosts of the matrix's
agent CLIs. One table of findings; what it finds is reported as found (on the test cluster: no container, GPUs that
Slurm hands out but no driver sees, a CPU build of torch).

smoke: one cell of the matrix with a short budget (PostTrainBench's "NUM_HOURS=1 on gsm8k + Qwen3-1.7B" step), as
an agent ``<id>-smoke`` of its own, so the real matrix's cells are untouched.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ptflow import templates
from ptflow.cluster import images, preflight, slurm
from ptflow.cluster.limits import LimitsError, for_matrix, request_problems
from ptflow.cluster.runtime import runtime_argv
from ptflow.config.request import Request
from ptflow.config.sites import Site
from ptflow.jobenv import user_name

MIN_APPTAINER = "1.1"
PROBE_MINUTES = 5
SRUN_FLAG = {"pyxis": "--container-image", "enroot-edf": "--environment"}


@dataclass
class Finding:
    where: str
    check: str
    status: str  # ok | info | warn | FAIL
    detail: str


def login_findings(cfg, site: Site, layout) -> list[Finding]:
    out = []
    notes: list[str] = []
    problems = preflight.run_preflight(cfg, site, layout, notes=notes)
    where = "login node"
    try:
        config = slurm.read_config()
        out.append(
            Finding(
                where,
                "Slurm",
                "info",
                f"version {config.get('SLURM_VERSION', '?')}, AccountingStorageType="
                f"{config.get('AccountingStorageType') or 'none'}",
            )
        )
        assoc = slurm.user_associations(user_name(), config)
        if assoc is None:
            out.append(Finding(where, "account and QoS", "info", "no accounting: nothing to check, squeue for status"))
        else:
            rows = [a for a in assoc if not site.account or a["account"] == site.account]
            qos = sorted({q for a in rows for q in a["qos"].split(",") if q})
            status = "ok" if rows else "FAIL"
            detail = (
                f"account {site.account or '(none set)'}: QoS {', '.join(qos) or '(default)'}"
                if rows
                else f"user {user_name()} has no association with account {site.account}"
            )
            out.append(Finding(where, "account and QoS", status, detail))
    except slurm.SlurmUnavailable as exc:
        out.append(Finding(where, "Slurm", "FAIL", str(exc)))
    out += [Finding(where, "preflight", "FAIL", p) for p in problems]
    out += [Finding(where, "preflight", "info", n) for n in notes]
    if not problems:
        out.append(Finding(where, "preflight", "ok", "no problem found"))
    return out


def limits_findings(ctx) -> list[Finding]:
    """The caps the driver keeps the run under (``ptflow.cluster.limits``, the lines ``ptflow plan`` prints), so a
    user sees where a queue of pending jobs comes from before submitting; and each request that could never start
    under them (the driver's preflight refuses those)."""
    where, check = "login node", "cluster limits"
    try:
        limits = for_matrix(ctx.cfg, ctx.site)
    except LimitsError as exc:
        return [Finding(where, check, "FAIL", str(exc))]
    out = [Finding(where, check, "info", f"read: {limits.note}")] if limits.any and limits.note else []
    out += [Finding(where, check, "info", line) for line in limits.lines()]
    problems = request_problems(limits, preflight.requests_in_use(ctx.cfg, ctx.site), ctx.site)
    return out + [Finding(where, check, "FAIL", p) for p in problems]


def partition_requests(cfg, site: Site) -> dict[str, tuple[str, Request]]:
    """partition -> (label, the largest request of the matrix there: most GPUs, then most node-local disk)."""
    chosen: dict[str, tuple[str, Request]] = {}
    for label, req in preflight.requests_in_use(cfg, site):
        part = req.get("partition") or "(default)"
        key = (req.gpus, req.get("tmp_mb", 0) or 0)
        if part not in chosen or key > (chosen[part][1].gpus, chosen[part][1].get("tmp_mb", 0) or 0):
            chosen[part] = (label, req)
    return chosen


def api_hosts(cfg) -> list[str]:
    """Where the matrix's agent CLIs send their requests (each CLI's API host), for the outbound check."""
    from ptflow.config.agent_clis import CLI_PACKAGES

    clis = {cfg.agent_for(c.agent).cli for c in cfg.cells if cfg.agent_for(c.agent).spec.agent_cli}
    return sorted({CLI_PACKAGES[c].api_host for c in clis if c in CLI_PACKAGES})


def cli_checks(cfg, site: Site, partition: str) -> list[dict]:
    """For the probe of a partition where agent cells run: each real CLI those agents use, its ``--version`` argv
    in the site's agent image, and its pin (config ``agent_clis``)."""
    from ptflow.config.agent_clis import CLI_PACKAGES

    rt = site.runtime
    agents = {c.agent_id: cfg.agents[c.agent_id] for c in cfg.cells if cfg.agents[c.agent_id].spec.agent_cli}
    here = [
        a
        for a in agents.values()
        if a.cli in CLI_PACKAGES
        and not a.command
        and (site.request("train", a).get("partition") or "(default)") == partition
    ]
    checks = []
    for name in sorted({a.cli for a in here}):
        image = images.image_for(rt, "train", next(a for a in here if a.cli == name))
        argv = [CLI_PACKAGES[name].binary, "--version"]
        if image:
            argv = runtime_argv(rt, argv, image=images.runtime_handle(rt, image), gpus=0)
        image_file = images.image_path(rt, image) if image else None
        checks.append({"name": name, "argv": argv, "pin": cfg.cli_versions[name], "image_file": image_file})
    return checks


# What the jobs' torch makes of the GPUs: a CPU build of torch in a GPU site's runtime trains and evaluates on the
# CPUs for the whole allocation (ptflow.stages.train.trl_common.device_args only says so in the job's log).
TORCH_PROBE = "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count())"


def render_probe(path: Path, cfg, site: Site, partition: str, label: str, req: Request) -> Path:
    rt = site.runtime
    stage = label.split("[")[0]
    agent = cfg.agents[label[6:-1]] if label.startswith("train[") else None
    image = images.image_for(rt, stage, agent) if req.gpus else None
    gpu_argv, image_file, torch_argv = None, None, None
    if image:
        handle = images.runtime_handle(rt, image)
        image_file = images.image_path(rt, image)
        gpu_argv = runtime_argv(rt, ["nvidia-smi", "-L"], image=handle, gpus=req.gpus)
        torch_argv = runtime_argv(rt, [rt.python, "-c", TORCH_PROBE], image=handle, gpus=req.gpus)
    elif req.gpus and not rt.is_container:
        # the python the jobs re-run in (ptflow.cluster.runtime.reexec_in_runtime): the site's venv, else ptflow's
        torch_argv = [f"{rt.venv}/bin/python" if rt.venv else sys.executable, "-c", TORCH_PROBE]
    checks = cli_checks(cfg, site, partition)  # agent cells run on this partition (whatever request is largest)
    text = templates.render(
        "doctor_probe.sh.j2",
        cli_checks=checks,
        partition=partition,
        arch=rt.arch,
        kind=rt.kind,
        venv=rt.venv,
        min_apptainer=MIN_APPTAINER,
        srun_flag=SRUN_FLAG.get(rt.kind, ""),
        gpus=req.gpus,
        gpu_argv=gpu_argv,
        torch_argv=torch_argv,
        image_file=image_file,
        tmp_mb=req.get("tmp_mb"),
        api_hosts=api_hosts(cfg) if stage == "train" or checks else [],
    )
    path.write_text(text)
    path.chmod(0o755)
    return path


def parse_findings(text: str, where: str) -> list[Finding]:
    out = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[0] == "FINDING":
            out.append(Finding(where, parts[1], parts[2], parts[3]))
    return out


def run_probes(cfg, site: Site, workdir: Path, wait_minutes: float, log=print) -> list[Finding]:
    workdir.mkdir(parents=True, exist_ok=True)
    jobs = {}
    findings = []
    for part, (label, req) in sorted(partition_requests(cfg, site).items()):
        short = dataclasses.replace(req, values={**req.values, "runtime": PROBE_MINUTES}, requeue=False)
        short = dataclasses.replace(short, values={k: v for k, v in short.values.items() if k != "warn_seconds"})
        safe = part.replace(",", "+")
        script = render_probe(workdir / f"probe-{safe}.sh", cfg, site, part, label, short)
        out = workdir / f"probe-{safe}-%j.out"
        options = short.sbatch_options(job_name=f"ptflow-doctor-{safe}", output=str(out))
        options = [o for o in options if not o.startswith(("--ntasks=", "--nodes="))] + ["--nodes=1"]
        try:
            job_id = slurm.submit(slurm.sbatch_argv(str(script), options=options))
        except slurm.SlurmUnavailable as exc:
            findings.append(Finding(f"partition {part}", "submission", "FAIL", f"{label}: {exc}"))
            continue
        log(f"doctor: partition {part} ({label}): job {job_id}: sbatch {shlex.join(options)} {script}")
        jobs[job_id] = (part, label, Path(str(out).replace("%j", job_id)))
    deadline = time.monotonic() + wait_minutes * 60
    for job_id, (part, label, out) in jobs.items():
        where = f"partition {part}"
        try:
            rec = slurm.wait_job(job_id, poll=3, timeout=max(deadline - time.monotonic(), 1))
        except TimeoutError:
            state = slurm.job_state(job_id)
            slurm.cancel([job_id])
            reason = f" ({state.reason})" if state and state.reason else ""
            findings.append(
                Finding(
                    where,
                    "job",
                    "warn",
                    f"{label}: job {job_id} still {state.state if state else '?'}{reason} "
                    f"after {wait_minutes:g} min; cancelled — the queue is the finding",
                )
            )
            continue
        found = parse_findings(out.read_text(errors="replace") if out.is_file() else "", where)
        node = rec.nodes or "?"
        findings.append(
            Finding(where, "job", "ok" if found else "FAIL", f"{label}: job {job_id} {rec.state} on {node}")
        )
        findings += found
    return findings


def table(findings: list[Finding]) -> str:
    rows = [("where", "check", "status", "detail")] + [(f.where, f.check, f.status, f.detail) for f in findings]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r[:3], widths, strict=True)) + "  " + r[3] for r in rows)


def doctor(ctx, workdir: Path, wait_minutes: float = 10, log=print) -> list[Finding]:
    findings = login_findings(ctx.cfg, ctx.site, ctx.layout)
    if ctx.site.scheduler == "slurm":
        findings += limits_findings(ctx)
        findings += run_probes(ctx.cfg, ctx.site, workdir, wait_minutes, log=log)
    return findings


# ---- smoke: one cell, short budget ----

SMOKE_SUFFIX = "-smoke"


def pick_cell(cfg, spec: str | None = None):
    """--cell, else PostTrainBench's first step (an agent cell on gsm8k x Qwen3-1.7B where there is one), else the
    first agent cell, else the first trained cell, else the first cell."""
    from ptflow.ops.context import parse_cell

    if spec:
        return parse_cell(spec, cfg)

    def rank(c):
        agent = cfg.agent_for(c.agent)
        return (
            not agent.spec.agent_cli,
            not agent.trains,
            c.eval != "gsm8k",
            "Qwen3-1.7B" not in c.model,
        )

    return min(cfg.cells, key=rank)


def smoke_agent(agent: dict, kind, hours: float, steps: int) -> dict:
    """The agent with a short budget: cli-agent hours, trainer steps, NeMo-RL's smoke variant, verl's step cap."""
    out = json.loads(json.dumps(agent))
    out["id"] = agent["id"] + SMOKE_SUFFIX
    params = out.setdefault("params", {})
    if kind.agent_cli:
        out["hours"] = min(float(agent.get("hours", hours)), hours)
    elif "steps" in params:
        params["steps"] = min(int(params["steps"]), steps)
    elif "smoke" in kind.variants:
        params["variant"] = "smoke"
    elif kind.name == "verl":
        params.setdefault("overrides", {})["trainer.total_training_steps"] = steps
    if not params:
        out.pop("params")
    return out


def smoke_config(raw: dict, cfg, cell, hours: float, steps: int) -> tuple[dict, str]:
    """The merged config with the smoke agent added and the matrix cut to its one cell; (config, agent id)."""
    agents = list(raw["agents"])
    original = next(a for a in agents if a["id"] == cell.agent_id)
    smoke = smoke_agent(original, cfg.agent_for(cell.agent).spec, hours, steps)
    if not cfg.agent_for(cell.agent).trains:
        smoke = original
    else:
        agents = [a for a in agents if a["id"] != smoke["id"]] + [smoke]
    model = cfg.models[cell.model].id
    out = {**raw, "agents": agents, "matrix": {"models": [model], "evals": [cell.eval], "agents": [smoke["id"]]}}
    return out, smoke["id"]


def main_doctor(ns, rest: list[str]) -> int:
    from ptflow.ops.context import load_context, parse_smk_args

    smk = parse_smk_args(rest)
    smk.config = (*smk.config, f"site={ns.site}")
    ctx = load_context(smk)
    workdir = Path(ns.workdir or Path(".ptflow") / "doctor" / time.strftime("%Y%m%dT%H%M%S")).resolve()
    findings = doctor(ctx, workdir, ns.wait, log=lambda m: print(m, file=sys.stderr, flush=True))
    if ns.json:
        print(json.dumps([dataclasses.asdict(f) for f in findings], indent=2))
    else:
        print(table(findings))
    return 1 if any(f.status == "FAIL" for f in findings) else 0


def main_smoke(ns, rest: list[str]) -> int:
    import subprocess

    import yaml

    from ptflow.config.load import find_workflow, merged_config
    from ptflow.ops.context import load_context, parse_smk_args

    smk = parse_smk_args(rest)
    ctx = load_context(smk)
    cell = pick_cell(ctx.cfg, ns.cell)
    workflow = find_workflow(smk.snakefile)
    raw = merged_config(workflow, smk.configfiles, smk.config, base_dir=Path.cwd())
    config, agent_id = smoke_config(raw, ctx.cfg, cell, ns.hours, ns.steps)
    path = (ctx.workdir / ".ptflow" / "smoke" / "config.yaml").resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    target = ctx.layout.eval_json(cell.model, cell.eval, agent_id)
    args = _without_configfiles(rest)
    if not any(a in ("-s", "--snakefile") or a.startswith("--snakefile=") for a in args):
        args = ["-s", str(workflow / "Snakefile"), *args]
    argv = [str(Path(sys.executable).with_name("snakemake")), target, *args, "--configfile", str(path)]
    print(f"ptflow smoke: {cell.key} as agent {agent_id}: $ {shlex.join(argv)}", file=sys.stderr, flush=True)
    rc = subprocess.run(argv).returncode
    result = ctx.workdir / target
    if rc == 0 and result.is_file():
        data = json.loads(result.read_text())
        print(f"smoke cell {cell.model}/{cell.eval}/{agent_id}: {json.dumps(data.get('metrics'))} ({result})")
    return rc


def _without_configfiles(args: list[str]) -> list[str]:
    """Snakemake args less --configfile and its files (the smoke config already holds them, merged)."""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a in ("--configfile", "--configfiles"):
            i += 1
            while i < len(args) and not args[i].startswith("-"):
                i += 1
            continue
        if a.startswith(("--configfile=", "--configfiles=")):
            i += 1
            continue
        out.append(a)
        i += 1
    return out
