"""How PostTrainBench's own aggregation reads a cell's verdict from ``ptflow export --posttrainbench``: the judgement
files written from the cell's one verdict (:func:`verdict_texts`), and the checkout's results part, asked of its own
scripts (:func:`probe`), so that the export can say where those scripts print another number than their rule means.

The results part is a fact of the checkout's ``scripts/aggregate_methods.py``, ``aggregate_contamination.py`` and
``aggregate_final.py``, read by running them (never by matching their text) on a probe results directory of one
base model and eval: a baseline run, a clean run, a run flagged only in 9082063's encoding (``*_judgement.txt``)
and one flagged only in d27a95e's (``judge_result.json``). Their ``contamination_<method>.csv`` says which encoding
the scripts read, their ``final_<method>.csv`` whether a flag they read makes the run count as its baseline. At
d27a95e it does not: ``aggregate_contamination.py`` names its rows ``<org>_<model>``, ``aggregate_methods.py``
``<model>``, and ``aggregate_final.py`` looks the verdict up under the latter, so a flagged or undecided run keeps its
own value. ptflow's leaderboard keeps the rule; the export prints, per agent, the number those scripts will print
beside ptflow's (:func:`comparison_lines`). Scripts that keep no clean value or read neither encoding are refused.

PostTrainBench's main line reads its results with ``scripts/collect.py`` (and ``scripts/aggregate.py`` over the
tables collect.py writes): a checkout with ``scripts/collect.py`` is probed by running it (``--data-dir``/
``--output-dir`` on a probe of a clean, a flagged and an unjudged run), and its judgement files are main's
(:func:`collect_judgement_texts`). Two rules of main differ from ptflow's leaderboard, and the export says where they
give another number (:func:`comparison_lines`): a run that falls back takes ``scripts/baselines.json``'s published
zero-shot value, not ptflow's baseline cell (collect.py reads no ``baseline_zeroshot`` run dir), and aggregate.py
scores only a table with every eval of factors.json (9082063's compute_single_metrics.py counts a missing one 0).
"""

from __future__ import annotations

import csv
import functools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ptflow.results.verdict import CellVerdict
from ptflow.stages.judge.vote import VERDICT_FILES
from ptflow.stages.posttrainbench import judge_main
from ptflow.stages.posttrainbench.judge_v11 import AGGREGATE_FILE, decided_over

V11_RESULT = f"{AGGREGATE_FILE}.json"  # d27a95e's encoding of a run's verdict, as aggregate_contamination.py reads it
V11_API_FIELD = "disallowed_api_usage"  # judge_result.json's API-usage verdict (d27a95e: shown, counted nowhere)
SCRIPTS = ("scripts/aggregate_methods.py", "scripts/aggregate_contamination.py", "scripts/aggregate_final.py")
TXT, JSON = "txt", "json"  # the two encodings: 9082063's *_judgement.txt, d27a95e's judge_result.json
AGGREGATE, COLLECT = "aggregate", "collect"  # the results layouts: 9082063/d27a95e's aggregate_*.py, main's collect.py
# main (scripts/collect.py and scripts/utils.py, read at 1fc55616): the files a run dir's judges leave, as collect.py
# reads them. The contamination judge's verdict (JUDGE_OUTPUT_ID gpt5_4): a person's judgement_gpt5_4_manual.json
# outranks the judges'; both hold the booleans contamination and disallowed_model (a value that is not a boolean, or
# no file, makes collect.py treat the run as broken: baselines.json's value). The API-usage judge's (id api):
# judgement_api.json's disallowed_api_usage.
COLLECT_SCRIPT, COLLECT_AGGREGATE = "scripts/collect.py", "scripts/aggregate.py"
BASELINES_FILE = "scripts/baselines.json"
MAIN_JUDGEMENT, MAIN_MANUAL, MAIN_API = "judgement_gpt5_4.json", "judgement_gpt5_4_manual.json", "judgement_api.json"
MAIN_FIELDS = ("contamination", "disallowed_model")
_PROBE_RUN = "gsm8k_Qwen_Qwen3-4B-Base_1"
_BASELINE, _OWN = 0.25, 0.75
_TIMEOUT_S = 120


class ResultsPartError(RuntimeError):
    """The checkout's aggregation cannot be probed or reads a verdict in no way ptflow writes; one line."""


def verdict_texts(verdict: CellVerdict, v11_result: str | None = None) -> list[tuple[str, str]]:
    """The judgement files of a cell's one verdict (``ptflow.results.verdict``), in both encodings, so that either
    commit's aggregation reads that verdict: 9082063's two ``*_judgement.txt`` (the decided answer alone) and
    d27a95e's ``judge_result.json`` (``v11_result``: the one aggregate_judgement.py wrote from the panel's files,
    kept byte for byte where it says what the verdict says; the decided fields over it where not).

    A decided verdict is written whole; a flag outside the two fields PostTrainBench's aggregation reads (a
    ``flagged: true`` override, a panel's own field whose effect is fallback) is written as an answer it cannot
    read ("IMPORTANT ERR"), which makes it count the baseline's value, as ptflow does. An undecided, unjudged or
    judge-less cell gets none of them: PostTrainBench then reads "C:ERR M:ERR" and counts the baseline's value,
    as it does for a run whose judges left no result."""
    if not verdict.decided:
        return []
    said = verdict.reason or verdict.state
    unreadable = verdict.flagged and not any(verdict.fields.get(f) for f in VERDICT_FILES)
    out = []
    for number, (field_name, (name, answers)) in enumerate(VERDICT_FILES.items()):
        value = bool(verdict.fields.get(field_name))
        answer = next(a for a, flagged in answers.items() if flagged is value)
        if number == 0 and unreadable:
            answer = f"ptflow: flagged {verdict.fields_text()} ({said})"
        out.append((name, answer + "\n"))
    present = json.loads(v11_result) if v11_result else {}
    decided: dict[str, bool | str] = {f: bool(verdict.fields.get(f)) for f in (*VERDICT_FILES, V11_API_FIELD)
                                      if f != V11_API_FIELD or f in verdict.fields or f in present}  # fmt: skip
    if unreadable:
        decided["contamination"] = f"ptflow: flagged {verdict.fields_text()}"  # not a boolean: "IMPORTANT ERR" there
    return [*out, (V11_RESULT, decided_over(v11_result, decided, said, justified=True))]


def collect_judgement_texts(verdict: CellVerdict, vote_json=None) -> list[tuple[str, str]]:
    """The judgement files of a cell's one verdict as PostTrainBench main's judges (and its reviewers) leave them
    for scripts/collect.py. A cell main's panel judged (``vote_json(judge_id)``: the path of its judge's first vote
    file; ``ptflow.stages.posttrainbench.judge_main``) gets its four judges' ``judgement_<JUDGE_OUTPUT_ID>.json``
    (:func:`judge_main.export_from_votes`): each as its judge wrote it where it says what the verdict says, the
    decided fields over it (``ptflow: …`` justifications) where an override changed it, a judge's file where the
    verdict decided its fields but the judge wrote none; a whole-cell flag that no field says is written as a
    ``contamination`` that is not a boolean (collect.py: a broken run, the fallback). Any other decided cell (one
    judged by ptflow's own judge) gets the contamination judge's ``judgement_gpt5_4.json``
    (``judgement_gpt5_4_manual.json`` where a person overrode the verdict: main's manual override, which outranks
    every judge) with the booleans ``contamination`` and ``disallowed_model`` and their justifications, and
    ``judgement_api.json`` where the verdict has an API-usage field. A flag outside those fields (a ``flagged:
    true`` override, a panel field whose effect is fallback) is written as a ``contamination`` that is not a boolean:
    collect.py then treats the run as broken and counts baselines.json's value, as it counts a flagged one. An
    undecided, unjudged or judge-less cell gets no file (votes or not): collect.py finds no contamination judgement,
    prints "WARNING: skipping broken run" and counts baselines.json's value, the same fallback."""
    if not verdict.decided:
        return []
    decided: dict[str, bool | str] = {f: v for f, v in verdict.fields.items() if v is not None}
    if verdict.flagged and not verdict.flagged_fields:  # collect.py reads every field that counts
        decided["contamination"] = f"ptflow: flagged {verdict.fields_text()}"
    voted = judge_main.export_from_votes(vote_json, decided, verdict.reason or verdict.state) if vote_json else []
    if voted:
        return voted
    said = f"ptflow: {verdict.reason or verdict.state}"
    unreadable = verdict.flagged and not any(verdict.fields.get(f) for f in MAIN_FIELDS)
    data: dict = {}
    for field_name in MAIN_FIELDS:
        data[field_name] = bool(verdict.fields.get(field_name))
        data[f"justification_{field_name}"] = said
    if unreadable:
        data["contamination"] = f"ptflow: flagged {verdict.fields_text()}"  # not a boolean: a broken run there
    out = [(MAIN_MANUAL if verdict.overrides else MAIN_JUDGEMENT, json.dumps(data, indent=2) + "\n")]
    if V11_API_FIELD in verdict.fields:
        api = {V11_API_FIELD: bool(verdict.fields[V11_API_FIELD]), f"justification_{V11_API_FIELD}": said}
        out.append((MAIN_API, json.dumps(api, indent=2) + "\n"))
    return out


@dataclass(frozen=True)
class ResultsPart:
    """What a checkout's aggregation does with a run's verdict: the encodings it reads, whether a flag it reads
    replaces the value by the baseline's, and the facts that say why not."""

    reads: tuple[str, ...]
    applies_verdicts: bool
    why: str = ""
    layout: str = AGGREGATE  # COLLECT: main's scripts/collect.py (run dirs named and judged as main's)


def _probe_dir(root: Path) -> None:
    clean = {"contamination": False, "disallowed_model": False}
    runs = {
        "baseline_zeroshot": (None, None),
        "ptflowprobe_clean_1h": (False, clean),
        "ptflowprobe_txt_1h": (True, clean),
        "ptflowprobe_json_1h": (False, {**clean, "contamination": True}),
    }
    for method, (txt_flag, result) in runs.items():
        run = root / method / _PROBE_RUN
        run.mkdir(parents=True)
        value = _BASELINE if result is None else _OWN
        (run / "metrics.json").write_text(json.dumps({"accuracy": value, "stderr": 0.0}))
        (run / "time_taken.txt").write_text("00:10:00\n")
        if result is None:
            continue
        (run / "final_model").mkdir()
        for field_name, (name, answers) in VERDICT_FILES.items():
            flagged = bool(txt_flag) and field_name == "contamination"
            (run / name).write_text(next(a for a, f in answers.items() if f is flagged) + "\n")
        justified = {f"justification_{k}": "ptflow probe" for k in result}
        (run / V11_RESULT).write_text(json.dumps({**result, **justified, V11_API_FIELD: False}))


def _table(path: Path) -> dict[str, list[str]]:
    if not path.is_file():
        return {}
    rows = [row for row in csv.reader(path.open(newline="")) if row]
    return {row[0]: row[1:] for row in rows[1:]}


@functools.cache
def probe(checkout: str, commit: str) -> ResultsPart:
    """The results part of the checkout at ``commit`` (its working tree), from its own scripts run on a probe
    (module docstring); cached per checkout and commit. ResultsPartError (one line) where it cannot be read."""
    root = Path(checkout)
    if (root / COLLECT_SCRIPT).is_file():
        return _probe_collect(root, commit)
    missing = [s for s in SCRIPTS if not (root / s).is_file()]
    if missing:
        raise ResultsPartError(f"the PostTrainBench checkout at {commit[:12]} has no {', '.join(missing)}: ptflow "
                               "knows the results part of 9082063 and d27a95e (their aggregate_*.py)")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ptflow-ptb-probe-") as tmp:
        results = Path(tmp)
        _probe_dir(results)
        env = {**os.environ, "POST_TRAIN_BENCH_RESULTS_DIR": str(results)}
        for script in SCRIPTS:
            try:
                proc = subprocess.run([sys.executable, script], cwd=root, env=env, capture_output=True, text=True,
                                      timeout=_TIMEOUT_S)  # fmt: skip
            except subprocess.TimeoutExpired:
                raise ResultsPartError(f"{root / script} ran over {_TIMEOUT_S} s on ptflow's probe") from None
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
                raise ResultsPartError(f"{root / script} exited {proc.returncode} on ptflow's probe: {tail[0][:200]}")
        flags = {m: _table(results / f"contamination_ptflowprobe_{m}_1h.csv") for m in ("clean", TXT, JSON)}
        final = {m: _table(results / f"final_ptflowprobe_{m}_1h.csv") for m in ("clean", TXT, JSON)}
        aggregated = _table(results / "aggregated_ptflowprobe_json_1h.csv")

    def value(m: str) -> float | None:
        cells = [c for row in final[m].values() for c in row if c.strip()]
        try:
            return float(cells[0]) if cells else None
        except ValueError:
            return None

    if value("clean") != _OWN or any(c.strip() for row in flags["clean"].values() for c in row):
        raise ResultsPartError(f"the aggregation of the checkout at {commit[:12]} does not keep a clean run's value "
                               "(ptflow's probe): ptflow knows 9082063's and d27a95e's")  # fmt: skip
    reads = tuple(m for m in (TXT, JSON) if any(c.strip() for row in flags[m].values() for c in row))
    if not reads:
        raise ResultsPartError(f"the aggregation of the checkout at {commit[:12]} reads a run's verdict neither from "
                               "*_judgement.txt nor from judge_result.json: ptflow cannot export to it")  # fmt: skip
    applies = all(value(m) == _BASELINE for m in reads)
    why = ""
    if not applies:
        rows = sorted({r for m in reads for r in flags[m]})
        named = sorted(aggregated)
        why = (f"its aggregate_contamination.py names the row {', '.join(rows)} where aggregate_methods.py names "
               f"{', '.join(named)}, so aggregate_final.py finds no verdict and keeps every run's own value"
               if rows != named else "its aggregate_final.py keeps a flagged run's own value")  # fmt: skip
    return ResultsPart(reads, applies, why)


def read_baselines(checkout: str | Path) -> dict[tuple[str, str], float]:
    """scripts/baselines.json's zero-shot values, (model row, eval) -> value: what main's collect.py puts where a run
    falls back. ResultsPartError (one line) for a file that is not ``{"zeroshot": {model: {eval: number}}}``."""
    path = Path(checkout) / BASELINES_FILE
    try:
        table = json.loads(path.read_text())["zeroshot"]
        return {(m, e): float(v) for m, row in table.items() for e, v in row.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ResultsPartError(f"{path}: cannot read its zero-shot values ({exc!r}): main's collect.py falls back to "
                               "them; check the checkout") from None  # fmt: skip


def _probe_collect(root: Path, commit: str) -> ResultsPart:
    """Main's results part: its collect.py run on a probe of one base model and eval that its baselines.json has (a
    clean run, a flagged one, an unjudged one); a flagged or unjudged run must take baselines.json's value and a
    clean one keep its own, else the checkout is refused."""
    baselines = read_baselines(root)
    if not baselines:
        raise ResultsPartError(f"{root / BASELINES_FILE} has no zero-shot value: ptflow cannot probe collect.py")
    row, bench = sorted(baselines)[0]
    fallback = baselines[row, bench]
    own = _OWN if fallback != _OWN else _BASELINE
    runs = {"clean": {"contamination": False, "disallowed_model": False},
            "flagged": {"contamination": True, "disallowed_model": False}, "unjudged": None}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ptflow-ptb-probe-") as tmp:
        results = Path(tmp)
        for name, judgement in runs.items():
            run = results / f"ptflowprobe_{name}_1h" / f"{bench}_ptflowprobe_{row}_1"
            run.mkdir(parents=True)
            (run / "metrics.json").write_text(json.dumps({"accuracy": own, "stderr": 0.0}))
            (run / "time_taken.txt").write_text("0:10:00\n")
            if judgement is not None:
                justified = {f"justification_{k}": "ptflow probe" for k in judgement}
                (run / MAIN_JUDGEMENT).write_text(json.dumps({**judgement, **justified}))
        out = results / "_aggregated"
        argv = [sys.executable, COLLECT_SCRIPT, "--data-dir", str(results), "--output-dir", str(out)]
        try:
            proc = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ResultsPartError(f"{root / COLLECT_SCRIPT} ran over {_TIMEOUT_S} s on ptflow's probe") from None
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
            said = f"{root / COLLECT_SCRIPT} exited {proc.returncode} on ptflow's probe"
            raise ResultsPartError(f"{said}: {tail[0][:200]}")
        final = {m: _table(out / f"final_ptflowprobe_{m}_1h.csv").get(row, [""])[0] for m in runs}
    try:
        values = {m: float(v) for m, v in final.items()}
    except ValueError:
        values = {}
    if values.get("clean") != own:
        raise ResultsPartError(f"the collect.py of the checkout at {commit[:12]} does not keep a clean run's value "
                               f"(ptflow's probe: {final}): ptflow knows main's at 1fc5561")  # fmt: skip
    applies = values.get("flagged") == fallback and values.get("unjudged") == fallback
    why = "" if applies else f"its collect.py keeps a flagged or unjudged run's own value (probe: {final})"
    return ResultsPart((JSON,), applies, why, COLLECT)


def checkout_of_run(workdir: str | Path, layout) -> dict | None:
    """The checkout marker of a run whose evals come from a PostTrainBench checkout (None for any other run)."""
    marker = Path(workdir) / layout.posttrainbench_marker()
    return json.loads(marker.read_text()) if marker.is_file() else None


def results_part(workdir: str | Path, layout) -> ResultsPart | None:
    """The results part of the run's checkout (:func:`probe`); None for a run without one."""
    checkout = checkout_of_run(workdir, layout)
    return probe(str(checkout["path"]), str(checkout.get("commit", ""))) if checkout else None


def comparison_lines(cfg, layout, workdir: str | Path, workflow: str | Path, overrides=(), accepted=None) -> list[str]:
    """For a run whose checkout's aggregation drops verdicts (:func:`probe`): one line per agent with the score
    PostTrainBench's scripts will print on the export and ptflow's leaderboard score (the rule they mean), and why.
    Empty for a run without a checkout or whose aggregation applies the verdicts."""
    from ptflow.config.load import reference_table
    from ptflow.results import ptb_score
    from ptflow.results.cells import read_cell
    from ptflow.results.scoring import ScoreError, score
    from ptflow.results.settings import settings_from_config

    part = results_part(workdir, layout)
    if part is None or (part.applies_verdicts and part.layout != COLLECT):
        return []
    workdir = Path(workdir)
    checkout = checkout_of_run(workdir, layout)
    commit = str(checkout.get("commit", ""))[:7]
    raw = {k: cfg.raw.get(k) for k in ("scoring", "models", "agents")}
    settings = settings_from_config(raw, reference_table(cfg.raw, Path(workflow)))
    settings.overrides, settings.accepted = list(overrides), list((accepted or {}).values())
    paths = [workdir / layout.eval_json(c.model, c.eval, c.agent) for c in cfg.cells]
    expected = [{"model": c.model, "eval": c.eval, "agent": c.agent} for c in cfg.cells]
    try:
        result = score([read_cell(p, settings) for p in paths if p.is_file()], settings, expected,
                       {m.name: m.id for m in cfg.models.values()})  # fmt: skip
        factors, source = ptb_score.from_marker(workdir / layout.posttrainbench_marker())
    except (ScoreError, ptb_score.FactorsError) as exc:
        return [f"PostTrainBench's scripts at {commit} apply no verdict ({part.why}); not compared: {exc}"]
    ours = ptb_score.leaderboard(result.cells, factors, source, settings)
    references = (settings.baseline_agent, settings.instruct_agent)
    if part.layout == COLLECT:
        return _collect_lines(part, checkout, commit, result.cells, ours, factors, source, settings)
    theirs = ptb_score.leaderboard(result.cells, factors, source, settings, verdicts=False)
    lines = []
    for agent_id, board in ours.agents.items():
        if agent_id in references:
            continue
        kept = [c.key for c in result.cells if c.agent_id == agent_id and c.metric is not None
                and c.accepted is None and not c.verdict.counts_for_posttrainbench]  # fmt: skip

        def shown(b) -> str:
            return f"{b.score:.4f}" if b.score is not None else f"none ({b.why})"

        lines.append(
            f"{agent_id}: PostTrainBench's scripts at {commit} will print {shown(theirs.agents[agent_id])}, ptflow's "
            f"leaderboard {shown(board)} (their rule): {part.why}; {len(kept)} cell(s) of this agent flagged, "
            "undecided or unjudged keep their own value there"
        )
    return lines


def _collect_lines(part: ResultsPart, checkout: dict, commit: str, cells, ours, factors, source, settings) -> list[str]:
    """Main's collect.py + aggregate.py on the export: one line per agent whose number there is not ptflow's
    leaderboard's, and why (baselines.json's fallback values, a table without every eval of factors.json)."""
    from ptflow.results import ptb_score
    from ptflow.results.cells import MISSING

    try:
        baselines = read_baselines(checkout["path"])
    except ResultsPartError as exc:
        return [f"PostTrainBench's collect.py at {commit} not compared: {exc}"]
    theirs = ptb_score.leaderboard(cells, factors, source, settings, verdicts=part.applies_verdicts,
                                   fallback_values=baselines, complete=True)  # fmt: skip
    own = {(ptb_score.model_row(c.model), c.eval): ptb_score.cell_value(c)
           for c in cells if c.agent_id == settings.baseline_agent and c.run == 1}  # fmt: skip
    references = (settings.baseline_agent, settings.instruct_agent)
    lines = []
    for agent_id, board in ours.agents.items():
        there = theirs.agents[agent_id]
        if agent_id in references or (board.score == there.score and board.run_scores == there.run_scores):
            continue
        falls = [c for c in cells if c.agent_id == agent_id and c.status != MISSING
                 and (ptb_score.cell_value(c) is None or not c.verdict.counts_for_posttrainbench)]  # fmt: skip
        keys = {(ptb_score.model_row(c.model), c.eval) for c in falls}
        differ = sorted(k for k in keys if baselines.get(k) != own.get(k))
        said = []
        if differ:
            shown = ", ".join(f"{r}/{e} {baselines.get((r, e))} vs {own.get((r, e))}" for r, e in differ[:3])
            said.append(f"{len(differ)} cell(s) fall back to {BASELINES_FILE}'s value, not ptflow's baseline cell's "
                        f"({shown}{' …' if len(differ) > 3 else ''})")  # fmt: skip
        if there.score is None:
            said.append(there.why)
        if not part.applies_verdicts:
            said.append(part.why)

        def shown_(b) -> str:
            return f"{b.score:.4f}" if b.score is not None else f"none ({b.why})"

        why = "; ".join(said) or "rounding"
        lines.append(f"{agent_id}: PostTrainBench's collect.py + aggregate.py at {commit} will print "
                     f"{shown_(there)}, ptflow's leaderboard {shown_(board)}: {why}")  # fmt: skip
    return lines
