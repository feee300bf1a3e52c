"""A ptflow run's cells written as PostTrainBench's results directory, for PostTrainBench's own aggregation scripts.

PostTrainBench (aisa-group/PostTrainBench, read at commit 9082063) keeps one directory per method under
``$POST_TRAIN_BENCH_RESULTS_DIR`` and one run directory per (eval, model, cluster job) inside it:

* agent runs (``src/run_task.sh``)::

      <agent>_<agent_config_safe>_<N>h[_<g>gpu]<experiment_name>/<eval>_<org>_<model>_<clusterid>/
          metrics.json                      {"accuracy": x, "stderr": y} (written by the eval's evaluate.py)
          time_taken.txt                    HH:MM:SS of the agent's run
          contamination_judgement.txt       the judge's verdicts (first line is the answer)
          disallowed_model_judgement.txt
          final_model/                      the agent's model (the scripts only test that it is a directory)
          prompt.txt, solve_out.txt         the agent's prompt and raw output

  ``agent_config_safe`` is the agent's model with ``/ : [ ]`` replaced by ``_``; so is ``org/model``.
* zero-shot evaluations (``src/baselines/run_baseline.sh``; the aggregation reads them as the method
  ``baseline_zeroshot``): ``baseline_zeroshot/<eval>_<org>_<model>_<clusterid>/`` with metrics.json and
  time_taken.txt. It holds base models *and* their instruct counterparts (``scripts/aggregate_summary.py`` averages
  its BASE_MODELS and INSTRUCT_MODELS rows).

The scripts that read it: ``scripts/aggregate_methods.py`` (metrics.json; a run without it is "not avl." without
time_taken.txt, "not stored" without final_model/, else "ERR"), ``scripts/aggregate_contamination.py`` (the two
judgement files; a missing one is an error), ``scripts/aggregate_time.py`` and ``scripts/aggregate_time_baselines.py``
(time_taken.txt), ``scripts/aggregate_final.py`` (the baseline_zeroshot value wherever a method's value is not a
number or its contamination cell is not empty) and ``scripts/aggregate_summary.py``. They split every run directory
name on ``_`` into exactly four parts and keep the highest integer clusterid per (eval, model) — so an eval id with
``_``, a model id with ``_`` or without an ``org/`` part cannot be exported: :func:`export_posttrainbench` refuses
the whole export with one line naming it, before it writes anything.

What each ptflow cell becomes (cells of the matrix that have an eval.json; the others are listed as skipped):

* agents of kind ``baseline`` and ``instruct`` -> ``baseline_zeroshot/``, named after the model the cell evaluated
  (``Config.evaluated_model``: the instruct counterpart for kind instruct). Only run 1 of a repeated reference agent
  is exported (PostTrainBench keeps one zero-shot number per eval and model); time_taken.txt is the evaluation's
  time (eval.json ``timings.eval_seconds``); model.txt and eval.txt as run_baseline.sh writes them.
* ``cli-agent`` cells -> ``<ptb agent>_<agent model safe>_<hours>h[_<g>gpu]<exp>``. ``<ptb agent>`` is the
  PostTrainBench agent directory that ran when the cell records one (``agent_run.ptb_agent``), else the checkout's
  ``agents/<dir>`` the agent runs (``Config.ptb_agent``: its ``solve``, default its cli; or ``params.ptb_agent``),
  else the agent's ``cli``; ``<hours>`` is the budget (``10``, ``0.5``);
  ``_<g>gpu`` when the site's train request of the agent has more than one GPU (only when a site is given; the
  ``ptflow export`` command always gives it); ``<exp>`` is ``""`` for a single run and ``_run<k>`` for run k of an
  agent with ``repeats`` > 1 (run 1 included), PostTrainBench's own naming of repeats. Its scripts take an agent's
  runs together where ``scripts/constants.py``'s ``HARDCODED_AGENT_MAP`` lists their method names (one adds them
  there): ``compute_single_metrics_avg_stddev.py`` then gives the mean and sample sd over the runs that ptflow's
  scoring gives (tests/unit/test_ptb_score.py). time_taken.txt is the agent's time over all its attempts (the
  manifest's ``agent_run.time_taken``).
* every other trained kind (trl-sft, trl-grpo, verl, nemo-distill, skyrl) -> ``<kind>_<agent id>_0h[_<g>gpu]<exp>``:
  the method name keeps PostTrainBench's shape, ``0h`` saying that no agent time budget applies. time_taken.txt is
  the training's wall time (the manifest's ``train_seconds``). No judge reads these cells, so they get no judgement
  files: ``aggregate_contamination.py`` reports "C:ERR M:ERR" for them and ``aggregate_final.py`` replaces their
  values by the baseline's in ``final_<method>.csv`` (``aggregated_<method>.csv`` keeps the measured numbers). No
  verdict is made up: nemo-distill, for one, does learn from another model.

Per run directory: ``metrics.json`` only for a cell whose eval.json says ``scored`` — the PostTrainBench checkout's
own metrics.json copied verbatim where the evaluation kept one (eval.json ``posttrainbench.metrics_file``, relative
to eval.json, else ``<cell_dir>/metrics.json``), else ``{"accuracy": metrics.value, "stderr": metrics.stderr}``
(``null`` for an unknown stderr) — and none for ``no_model`` and ``eval_failed``, so the aggregation shows "not
stored" / "ERR" as it would for PostTrainBench's own runs. A cell of a seeded eval (eval.json ``seeds``, rule
seed_mean) gets the metrics.json of PostTrainBench's newer final evaluation (``src/eval/run_final_eval.sh`` and
``src/utils/aggregate_seed_metrics.py``): the mean over the seeds that succeeded (``accuracy``, and ``stderr`` where
the seeds reported one: a metric that is no number is not averaged), ``num_seeds`` (the seeds attempted: a greedy
model's later seeds, which ptflow records as skipped, are not), ``num_seeds_succeeded`` and ``per_seed``
(``{"<seed>": {"max_tokens_stage", "metrics": {"accuracy", "stderr"}}}`` for the seeds that succeeded, from each
seed's own eval.json), and beside it ``metrics_seed<S>.json`` per seed that succeeded, as each seed's run writes it.
The scripts that read the run dir read metrics.json's ``accuracy`` only.

A cell judged by a ``d27a95e`` checkout's panel (``ptflow.stages.posttrainbench.judge_v11``) also gets what that
commit's ``src/run_task.sh`` leaves of its judges: ``judgement_gpt5_4.json``, ``judgement_kimi.json``,
``judgement_api.json`` (each judge's judgement.json as it wrote it). A cell judged by main's panel
(``ptflow.stages.posttrainbench.judge_main``; results layout COLLECT) gets its four judges'
``judgement_<JUDGE_OUTPUT_ID>.json`` as each wrote it where it says what the cell's one verdict says, the decided
fields over it where an override changed it (``ptflow.results.ptb_protocol.collect_judgement_texts``).

The judgement files of every agent cell are written from the cell's one verdict (``ptflow.results.verdict``: the
judges' decision, the overrides, the accepted failure), never copied, in both encodings
(``ptflow.results.ptb_protocol.verdict_texts``): 9082063's ``contamination_judgement.txt`` and
``disallowed_model_judgement.txt`` (the decided answer alone: ptflow's own judge prompt asks for evidence lines after
it, which aggregate_contamination.py would read as "IMPORTANT ERR") and d27a95e's ``judge_result.json`` (the one
aggregate_judgement.py wrote from the panel's files where it agrees with the verdict, else the decided fields). An
undecided, unjudged or judge-less cell gets neither, and PostTrainBench counts it as its baseline; a flag those files
have no field for is written as an answer they cannot read, which it counts as its baseline too. A cell whose
verdict a person overrode has ``ptflow_overrides.txt`` beside them: what was overridden, by whom, when and why, and
what the judges said; the export's summary says it too. ``task/`` is the agent's task dir as it left it (the kept
workspace less ``final_model/``, masked), as run_task.sh keeps it and PostTrainBench's rerun tooling requires.
``final_model`` is a symlink to the checkpoint dir when the manifest says the agent left a model. ``prompt.txt`` and
``solve_out.txt`` are copies of the trace dir's ``prompt.md`` and ``stdout.log``. Every copied file goes through
``ptflow.keys.Masker`` (the config's key names and every secret-looking variable, with their values where the export
runs): a key that a run's files still hold (written before ptflow masked captured output) is exported as ``***``.
The clusterid is the evaluation's Slurm job id (eval.json ``slurm_job_id``) when it is all digits, else 0.

A cell whose failure an operator accepted (``accepted:`` in the file of ``scoring.overrides``) is exported as
PostTrainBench leaves a run that failed, with or without an eval.json of ptflow's: its run dir has no metrics.json
(nor a seed's), whatever ptflow measured, and what else the cell has (time_taken.txt, final_model, the judgement
files, solve_out.txt), so PostTrainBench's aggregation counts it as its baseline's value, as ptflow's score does;
``ptflow_accepted.txt`` beside it says who accepted it, when and why (PostTrainBench itself keeps no such record: its
operators leave such runs out of their reruns by hand). The export's summary lists each accepted cell.

Each run directory is built in a hidden temp dir beside it and renamed into place whole; exporting again replaces
it. A run directory this export does not write is left as it is (DEST may hold PostTrainBench's own results). The
temp dirs exist only while an export runs; PostTrainBench's scripts stop on their names, so run the scripts after
the export, and one export at a time per DEST (an export killed mid-way leaves them: the next one removes them).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from ptflow.config.entries import Agent
from ptflow.config.layout import Layout
from ptflow.config.matrix import Cell, Config
from ptflow.keys import Masker
from ptflow.results import verdict as verdicts
from ptflow.results.cells import EVAL_FAILED, NO_MODEL, SCORED, ScoreError, read_cell
from ptflow.results.overrides import ACCEPTED_RECORD, OVERRIDES_RECORD, Accepted, Override, by_cell
from ptflow.results.ptb_protocol import (
    AGGREGATE,
    COLLECT,
    MAIN_JUDGEMENT,
    MAIN_MANUAL,
    V11_RESULT,
    collect_judgement_texts,
    verdict_texts,
)
from ptflow.results.ptb_seeds import seed_logs, seeded_metrics
from ptflow.stages.posttrainbench import judge_run_v11
from ptflow.stages.posttrainbench.judge_v11 import export_from_trace

BASELINE_METHOD = "baseline_zeroshot"
TASK_DIR = "task"  # the agent's task dir as it left it (run_task.sh: cp -r task "$EVAL_DIR/task")
STAGING_MARK = ".ptflow-export-"  # hidden temp dirs beside the run dirs: .<name>.ptflow-export-XXXX
REPLACED_MARK = ".ptflow-replaced-"  # the previous run dir, moved aside for the swap
_UNSAFE = str.maketrans({c: "_" for c in "/:[]"})  # run_task.sh: tr '/:[]' '____'


class ExportError(RuntimeError):
    """The export cannot go on; one line naming the model, eval, cell or file and what to do."""


@dataclass(frozen=True)
class RunDir:
    """One run directory to write: what it holds, from where."""

    cell: str  # the ptflow cell key (model/eval/agent slot)
    method: str
    name: str  # <eval>_<org>_<model>_<clusterid>
    copies: tuple[tuple[str, Path], ...] = ()  # (file name, source) copied verbatim
    texts: tuple[tuple[str, str], ...] = ()  # (file name, content)
    final_model: Path | None = None  # symlink target
    trees: tuple[
        tuple[str, Path], ...
    ] = ()  # (dir name, source dir) copied file by file (masked), final_model/ left out

    @property
    def rel(self) -> str:
        return f"{self.method}/{self.name}"

    @property
    def files(self) -> list[str]:
        names = [n for n, _ in self.copies] + [n for n, _ in self.texts] + [n + "/" for n, _ in self.trees]
        return sorted(names + (["final_model"] if self.final_model else []))


@dataclass
class ExportSummary:
    dest: Path
    runs: list[RunDir] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "<cell key>: <why>"
    notes: list[str] = field(default_factory=list)

    @property
    def methods(self) -> list[str]:
        return sorted({r.method for r in self.runs})

    def lines(self) -> list[str]:
        out = [f"skipped {s}" for s in self.skipped] + [f"note: {n}" for n in self.notes]
        per_method = {m: sum(r.method == m for r in self.runs) for m in self.methods}
        listed = ", ".join(f"{m} ({n})" for m, n in per_method.items()) or "none"
        out.append(f"exported {len(self.runs)} run dir(s) into {self.dest}: {listed}")
        return out


# ---- names ----


def safe(text: str) -> str:
    """``/ : [ ]`` -> ``_``, as run_task.sh makes AGENT_CONFIG_SAFE and RESULT_PREFIX_SAFE."""
    return text.translate(_UNSAFE)


def hms(seconds: float) -> str:
    """HH:MM:SS, as run_task.sh's ``printf '%02d:%02d:%02d'`` writes time_taken.txt."""
    s = max(0, int(round(seconds)))
    return f"{s // 3600:02d}:{(s % 3600) // 60:02d}:{s % 60:02d}"


def cluster_id(slurm_job_id) -> int:
    """The evaluation's Slurm job id when it is all digits (an array id ``123_4`` is not), else 0."""
    text = str(slurm_job_id or "")
    return int(text) if text.isascii() and text.isdigit() else 0


def _number(value: float) -> str:
    return f"{value:g}"


def experiment_name(agent: Agent, run: int) -> str:
    """``""`` for an agent run once, ``_run<k>`` for each run of a repeated one."""
    return f"_run{run}" if agent.repeats > 1 or run > 1 else ""


def ptb_agent(cfg: Config, agent: Agent, agent_run: dict) -> str:
    """The PostTrainBench agent directory a cli-agent cell ran: as the cell recorded it, else as configured (the
    checkout's ``agents/<solve>``), else the agent's cli."""
    configured = getattr(cfg, "ptb_agent", None)
    return str(
        agent_run.get("ptb_agent")
        or (configured(agent) if configured else None)
        or getattr(agent, "solve", None)
        or agent.params.get("ptb_agent")
        or agent_run.get("cli")
        or agent.cli
    )


def method_name(cfg: Config, agent: Agent, run: int, agent_run: dict | None = None, site=None) -> str:
    """The method directory of a cell of ``agent`` (run ``run``); see the module docstring."""
    spec = agent.spec
    if not spec.trains:
        return BASELINE_METHOD
    gpus = site.request("train", agent).gpus_total if site is not None else 0
    suffix = (f"_{gpus}gpu" if gpus > 1 else "") + experiment_name(agent, run)
    if spec.agent_cli:
        agent_run = agent_run or {}
        model = agent_run.get("model") or agent.model
        hours = agent_run.get("hours") if agent_run.get("hours") is not None else agent.hours
        return f"{ptb_agent(cfg, agent, agent_run)}_{safe(str(model))}_{_number(float(hours))}h{suffix}"
    return f"{agent.kind}_{agent.id}_0h{suffix}"


def check_names(cfg: Config) -> None:
    """Refuse (one line) an eval or model id that PostTrainBench's ``entry.split("_")`` into four parts cannot read."""
    for cell in cfg.cells:
        if "_" in cell.eval:
            raise ExportError(
                f"eval id {cell.eval!r} contains '_': PostTrainBench's aggregation splits run dir names "
                "<eval>_<org>_<model>_<clusterid> on '_' (scripts/aggregate_methods.py); rename the eval to export"
            )
        model_id = cfg.evaluated_model(cell).id
        parts = safe(model_id).split("_")
        if len(parts) != 2 or not all(parts):
            why = "contains '_'" if "_" in model_id else "has no 'org/' part"
            raise ExportError(
                f"model id {model_id!r} {why}: PostTrainBench's aggregation reads <eval>_<org>_<model>_<clusterid> "
                "by splitting on '_' (scripts/aggregate_methods.py), so its cells cannot be exported"
            )


# ---- planning ----


def _under(workdir: Path, path: str) -> Path:
    return workdir / path  # an absolute layout path stays as it is


def _read_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ExportError(f"{path}: cannot read it ({exc}); rerun the rule that writes it") from None


def _json_text(data: dict) -> str:
    """As PostTrainBench's scripts write JSON: ``json.dump(..., indent=2)`` and a newline."""
    return json.dumps(data, indent=2) + "\n"


def copy_tree(source: Path, dest: Path, masker: Masker) -> None:
    """``source`` copied file by file through ``masker`` (symlinks kept as links), its ``final_model/`` left out
    (the run dir has its own; run_task.sh deletes the model files before it keeps the task dir)."""
    for root, dirs, files in os.walk(source):
        here = Path(root)
        rel = here.relative_to(source)
        if rel == Path("."):
            dirs[:] = [d for d in dirs if d != "final_model"]
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in [*files, *(d for d in dirs if (here / d).is_symlink())]:
            path = here / name
            if path.is_symlink():
                os.symlink(os.readlink(path), dest / rel / name)
            elif path.is_file():
                masker.copy_file(path, dest / rel / name)


def _plan_cell(
    cfg: Config,
    layout: Layout,
    cell: Cell,
    workdir: Path,
    site,
    overrides: Sequence[Override] = (),
    accepted: Accepted | None = None,
    results: str = AGGREGATE,
) -> RunDir | str:
    """The run dir of one cell, or why it is skipped; ``overrides``: the cell's (scoring.overrides); ``accepted``:
    its accepted failure, exported as a run that failed (:func:`_as_accepted`), with or without an eval.json;
    ``results``: the checkout's results layout (COLLECT: main's judgement files and per-seed logs)."""
    eval_json = _under(workdir, layout.eval_json(cell.model, cell.eval, cell.agent))
    if not eval_json.is_file() and accepted is None:
        return "no eval.json yet (not evaluated)"
    try:
        read = read_cell(eval_json) if eval_json.is_file() else None
    except ScoreError as exc:
        raise ExportError(str(exc)) from None
    agent = cfg.agent_for(cell.agent)
    run = read.run if read is not None else cell.run
    if not agent.trains and run > 1:
        return f"run {run} of reference agent {agent.id} (PostTrainBench keeps one zero-shot result per eval and model)"
    data = json.loads(eval_json.read_text()) if read is not None else {}
    cell_dir = eval_json.parent
    manifest = _read_json(_under(workdir, layout.manifest(cell.model, cell.eval, cell.agent))) or {}
    agent_run = manifest.get("agent_run") or data.get("agent_run") or {}
    evaluated = cfg.evaluated_model(cell)
    job = data.get("slurm_job_id") if read is not None else manifest.get("slurm_job_id")  # an accepted cell's train job
    name = f"{cell.eval}_{safe(evaluated.id)}_{cluster_id(job)}"
    copies: list[tuple[str, Path]] = []
    texts: list[tuple[str, str]] = []
    if read is None:
        pass  # an accepted cell without an eval.json: a run without metrics.json (_as_accepted)
    elif read.status == SCORED and data.get("seeds"):
        texts += seeded_metrics(read.metric, data["seeds"], cell_dir, _read_json)
    elif read.status == SCORED:
        own = cell_dir / ((data.get("posttrainbench") or {}).get("metrics_file") or "metrics.json")
        if own.is_file():  # the checkout's evaluate.py wrote it; the evaluation kept it
            copies.append(("metrics.json", own))
        else:
            stderr = read.metric.stderr
            metrics = {"accuracy": read.metric.value, "stderr": None if math.isnan(stderr) else stderr}
            texts.append(("metrics.json", json.dumps(metrics, indent=2) + "\n"))
    elif read.status not in (NO_MODEL, EVAL_FAILED):
        raise ExportError(f"{eval_json}: status {read.status!r} is not scored, no_model or eval_failed")
    if results == COLLECT and read is not None and data.get("seeds"):
        texts += seed_logs(data["seeds"], cell_dir, _read_json)
    final_model = None
    if not agent.trains:
        seconds = (data.get("timings") or {}).get("eval_seconds")
        texts += [("model.txt", evaluated.id + "\n"), ("eval.txt", cell.eval + "\n")]
    elif agent.spec.agent_cli:
        seconds = agent_run.get("time_taken")
        if seconds is None and read is not None:
            seconds = read.time_taken_s
    else:
        seconds = manifest.get("train_seconds")
        if seconds is None:
            seconds = (data.get("timings") or {}).get("train_seconds")
    if seconds is not None:
        texts.append(("time_taken.txt", hms(float(seconds)) + "\n"))
    if agent.trains and manifest:
        left_model = manifest.get("final_model", True) is not False and agent_run.get("final_model", True) is not False
        if left_model and manifest.get("checkpoint"):
            final_model = (workdir / manifest["checkpoint"]).absolute()
    trees: list[tuple[str, Path]] = []
    judge = _read_json(eval_json.with_name("judge.json")) if eval_json.is_file() else None
    if agent.spec.agent_cli:
        trace = _under(workdir, layout.agent_trace_dir(cell.model, cell.eval, cell.agent))
        if not trace.is_dir() and agent_run.get("trace_dir"):
            trace = workdir / agent_run["trace_dir"]
        if (trace / "stdout.log").is_file():
            copies.append(("solve_out.txt", trace / "stdout.log"))
        if (trace / "prompt.md").is_file():  # run_task.sh: echo "$PROMPT" > prompt.txt (one newline after it)
            texts.append(("prompt.txt", (trace / "prompt.md").read_text().rstrip("\n") + "\n"))
        workspace = workdir / agent_run["workspace"] if agent_run.get("workspace") else None
        if workspace is not None and workspace.is_dir():  # run_task.sh keeps the task dir (its rerun tooling needs it)
            trees.append((TASK_DIR, workspace))
        first_run = partial(layout.judge_vote_json, cell.model, cell.eval, cell.agent, run=1)

        def vote_json(judge_id: str) -> Path:  # a judge's first vote (what it kept: the dir of that name)
            return _under(workdir, first_run(judge=judge_id))

        if results == COLLECT:  # main's judges' files (ptflow.results.ptb_protocol.collect_judgement_texts)
            texts += collect_judgement_texts(verdicts.of(judge, overrides, accepted), vote_json)
        else:  # judged by a d27a95e checkout's panel: each judge's verdict as it wrote it (the aggregate: the verdict)
            v11 = dict(export_from_trace(trace) or judge_run_v11.export_from_votes(vote_json))
            texts += [(n, t) for n, t in sorted(v11.items()) if n != V11_RESULT]
            texts += verdict_texts(verdicts.of(judge, overrides, accepted), v11.get(V11_RESULT))
    if overrides:  # the record of what a person decided, and what the judges said
        said = [f"{e.cell}: {e.text()}" for e in overrides]
        said.append(f"judges' own verdict: {verdicts.of(judge).state or 'no judge.json'} (judge.json unchanged)")
        texts.append((OVERRIDES_RECORD, "\n".join(said) + "\n"))
    method = method_name(cfg, agent, run, agent_run, site)
    planned = RunDir(cell.key, method, name, tuple(copies), tuple(texts), final_model, tuple(trees))
    return _as_accepted(planned, accepted, read.status if read else "missing") if accepted else planned


def _as_accepted(planned: RunDir, accepted: Accepted, status: str) -> RunDir:
    """An accepted cell as PostTrainBench leaves a run that failed: no metrics.json (nor a seed's), whatever ptflow
    measured, so its aggregation counts the run as its baseline's value (9082063's aggregate_methods.py "not avl." /
    "not stored" / "ERR", then aggregate_final.py; newer collect.py: a broken run falls back to baselines.json), and
    ACCEPTED_RECORD beside it: who accepted it, when and why."""
    record = f"{planned.cell}: {accepted.text()}\nptflow's status of the cell: {status} (not exported as a score)\n"
    return replace(
        planned,
        copies=tuple((n, src) for n, src in planned.copies if not _is_metrics(n)),
        texts=(*((n, t) for n, t in planned.texts if not _is_metrics(n)), (ACCEPTED_RECORD, record)),
    )


def _is_metrics(name: str) -> bool:
    """A file PostTrainBench's aggregation reads a score from: metrics.json, or a seed's metrics_seed<S>.json."""
    return name == "metrics.json" or name.startswith("metrics_seed")


def plan_export(
    cfg: Config,
    layout: Layout,
    *,
    workdir: str | Path | None = None,
    site=None,
    overrides: Sequence[Override] = (),
    accepted: Mapping[str, Accepted] | None = None,
    results: str = AGGREGATE,
) -> ExportSummary:
    """Every run dir the export would write (nothing is written); raises ExportError for what cannot be exported.
    ``overrides``: the config's (``ptflow.results.overrides.config_overrides``), exported as the decided verdict;
    ``accepted``: its accepted failures by cell key (``ptflow.results.overrides.accepted_cells``), exported as runs
    that failed; ``results``: the checkout's results layout (``ptflow.results.ptb_protocol.ResultsPart.layout``)."""
    workdir = Path(workdir or Path.cwd()).absolute()
    check_names(cfg)
    summary = ExportSummary(dest=Path())
    owners: dict[str, str] = {}
    trained = False
    grouped = by_cell(overrides)
    for cell in cfg.cells:
        entries = grouped.get(cell.key, [])
        taken = (accepted or {}).get(cell.key)
        planned = _plan_cell(cfg, layout, cell, workdir, site, entries, taken, results)
        if isinstance(planned, str):
            summary.skipped.append(f"{cell.key}: {planned}")
            continue
        if taken is not None:
            summary.notes.append(f"{cell.key}: {taken.text()}; exported as a failed run, no metrics.json")
        elif entries:
            said = "; ".join(e.text() for e in entries)
            summary.notes.append(f"{cell.key}: verdict overridden, exported as decided ({said}; {OVERRIDES_RECORD})")
        if planned.rel in owners:
            raise ExportError(
                f"cells {owners[planned.rel]} and {cell.key} would both be {planned.rel}: PostTrainBench names a "
                "method by its agent directory, model and hours only; export one of the agents (a config without "
                "the other), or give them different cli/model/hours"
            )
        owners[planned.rel] = cell.key
        summary.runs.append(planned)
        trained = trained or cfg.agent_for(cell.agent).trains
    if site is None and trained:
        summary.notes.append("no site given: method names carry no _<g>gpu suffix")
    if results == COLLECT:
        unjudged = [r.rel for r in summary.runs if r.method != BASELINE_METHOD and not _has_judgement(r)]
        if unjudged:
            summary.notes.append(
                f"{len(unjudged)} run dir(s) have no contamination judgement (unjudged, undecided, or a kind no judge "
                "reads): main's collect.py prints 'WARNING: skipping broken "
                f"run' for each and counts scripts/baselines.json's value, as ptflow's rule counts the base model's "
                f"({', '.join(unjudged[:3])}{' …' if len(unjudged) > 3 else ''})"
            )
    return summary


def _has_judgement(run: RunDir) -> bool:
    return any(name in (MAIN_JUDGEMENT, MAIN_MANUAL) for name, _ in run.texts)


# ---- writing ----


def _dir_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o777 & ~mask


def remove_leftovers(method_dir: Path) -> None:
    """Temp dirs of an export killed mid-way (PostTrainBench's scripts would fail on their names)."""
    if not method_dir.is_dir():
        return
    for entry in method_dir.iterdir():
        if entry.name.startswith(".") and (STAGING_MARK in entry.name or REPLACED_MARK in entry.name):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def _swap_in(staged: Path, target: Path) -> None:
    """``staged`` becomes ``target``; a previous ``target`` is moved aside first and removed after, so a reader
    sees the old run dir whole or the new one whole (never one half deleted)."""
    aside = None
    if target.exists() or target.is_symlink():
        aside = target.with_name(f".{target.name}{REPLACED_MARK}{uuid.uuid4().hex[:8]}")
        os.replace(target, aside)
    os.replace(staged, target)
    if aside is not None:
        shutil.rmtree(aside) if aside.is_dir() and not aside.is_symlink() else aside.unlink()


def key_names(cfg: Config) -> list[str]:
    """Every key name the config hands to a process: agents' keys, the judge's, evals' graders'."""
    names = [k for a in cfg.agents.values() for k in a.keys]
    names += [k for e in cfg.evals.values() for k in e.grader_keys]
    panel = cfg.judge_panel
    return names + (panel.keys if panel else [])  # every judge's of the panel


def write_run_dir(run: RunDir, dest: Path, masker: Masker | None = None) -> Path:
    """Build one run dir in a hidden temp dir beside it, then rename it into place (replacing an earlier one).
    Every copied file goes through ``masker`` (default: this process's secret-looking variables): a key value that
    a run written before ptflow masked its logs kept (solve_out.txt) is not exported."""
    masker = Masker.for_env() if masker is None else masker
    method_dir = dest / run.method
    method_dir.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{run.name}{STAGING_MARK}", dir=method_dir))
    try:
        for name, source in run.copies:
            masker.copy_file(source, staged / name)
        for name, text in run.texts:
            (staged / name).write_text(masker.mask(text))
        for name, source in run.trees:
            copy_tree(source, staged / name, masker)
        if run.final_model is not None:
            os.symlink(run.final_model, staged / "final_model", target_is_directory=True)
        os.chmod(staged, _dir_mode())  # mkdtemp's 700 would hide the results from the group
        _swap_in(staged, method_dir / run.name)
    finally:
        if staged.exists():
            shutil.rmtree(staged, ignore_errors=True)
    return method_dir / run.name


def export_posttrainbench(
    cfg: Config,
    layout: Layout,
    dest: str | Path,
    *,
    workdir: str | Path | None = None,
    site=None,
    overrides: Sequence[Override] = (),
    accepted: Mapping[str, Accepted] | None = None,
    results: str = AGGREGATE,
) -> ExportSummary:
    """Write the matrix's evaluated cells into ``dest`` in PostTrainBench's results layout (module docstring).

    ``workdir``: what relative layout paths are relative to (the workflow's working directory; default the current
    directory). ``site``: the loaded site (``ptflow.config.sites.Site``), for the ``_<g>gpu`` suffix of methods whose
    train jobs have more than one GPU. Refuses (ExportError, one line) before writing anything when a model or eval
    id cannot be parsed by PostTrainBench's scripts, a file cannot be read, or two cells map to one run dir.
    ``overrides``: the config's verdict overrides (scoring.overrides), exported as the decided verdict;
    ``accepted``: its accepted failures by cell key, exported as runs that failed (no metrics.json). ``results``: the
    checkout's results layout (``ptflow.results.ptb_protocol``: AGGREGATE, 9082063/d27a95e's, or COLLECT, main's).
    """
    summary = plan_export(cfg, layout, workdir=workdir, site=site, overrides=overrides, accepted=accepted,
                          results=results)  # fmt: skip
    summary.dest = Path(dest).absolute()
    summary.dest.mkdir(parents=True, exist_ok=True)
    for method in summary.methods:
        remove_leftovers(summary.dest / method)
    masker = Masker.for_env(os.environ, key_names(cfg))  # the keys' values where this export runs
    for run in summary.runs:
        write_run_dir(run, summary.dest, masker)
    return summary
