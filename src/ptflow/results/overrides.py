"""The operators' decisions on cells, kept in one tracked file: overrides with reasons (a person's decision on a
cell's judge verdict, which outranks the judge or the judge panel, so that a wrong verdict is fixed without editing
any result file) and accepted failures (cells that count at their fallback, never to be run again).

The file is named by the config key ``scoring.overrides`` (a path relative to the workflow directory, as
``scoring.reference`` is) and checked against ``schemas/overrides.schema.json``::

    overrides:
      - cell: Qwen--Qwen3-4B-Base/gsm8k/claude-opus-4-5   # <model>/<eval>/<agent slot>; the model may be its Hub id
        field: contamination      # a verdict field, or flagged for the whole verdict
        value: false
        reason: the trace reads test.jsonl only to count its rows
        who: J. Doe
        when: 2026-11-30

``field`` is a verdict field the config's judge answers (PostTrainBench's ``contamination`` and
``disallowed_model``, and every field a panel's judge declares under ``judge.judges[].fields``) or ``flagged``: the
whole verdict (``false`` clears every field, ``true`` flags the cell whatever its fields say). The file is checked
against the matrix when the workflow plans (:func:`overrides_for_config`: an unknown cell or field, a missing reason,
who or when, a value of the wrong type, one cell's field given twice: one line each); it is an input of rule
aggregate alone, so editing it rescores and runs no cell's job again.

How an override decides (``ptflow.results.verdict.of``, the one place a cell's verdict is decided): judge.json's
fields are taken, the overridden fields replaced, and the cell is flagged when any field is (or as a ``flagged``
override says). A field the judges left undecided stays undecided unless an override decides it (the cell has no
verdict until then); a cell with no judge fields at all (not judged, no judge.json, a single judge without a
verdict) is decided by its overrides alone: the fields they do not name count as not flagged. judge.json stays the
judges' record; the override and its reason are shown beside the cell in summary.csv, leaderboard.md, the HTML
report and ``ptflow status``, and ``ptflow export --posttrainbench`` writes the decided verdict
(``ptflow.results.ptb_export``) with the override beside it.

There is no score-level override (forcing a cell to its base model's score, or to its own): a verdict outside the
judges' questions is ``flagged: true`` with its reason, and a cell without a score of its own (no model, a failed
evaluation) has nothing to be scored by.

Accepted failures, beside ``overrides:`` in the same file (both keys optional)::

    accepted:
      - cell: Qwen--Qwen3-4B-Base/healthbench/claude-opus-4-5
        reason: the grader's API refused every try for a week; the cell stands at its base model's score
        who: J. Doe
        when: 2026-11-30

An accepted cell is not a target of the run (``ptflow.jobs.rule_values.RuleInputs`` leaves its eval.json, seeds'
files, judge votes, judge.json and rescore files out of rule all's targets and rule aggregate's inputs: the file is
read when the workflow plans), so no job of it runs again, and it counts as PostTrainBench counts a run that failed:
at the base model's zero-shot score, with ``fallback_reason`` "accepted: <reason> (<who>, <when>)", whatever files it
has (a finished eval.json is kept, not read). Checked as the overrides are (:func:`read_accepted`: an unknown cell
with the closest match, a missing reason/who/when, a non-ISO date, a cell twice, a reference agent's cell). Shown in
summary.csv (column ``accepted``), leaderboard.md (section "Accepted failures"), the HTML report, ``ptflow status``
and ``ptflow export --posttrainbench`` (a run dir without metrics.json, ``ptflow_accepted.txt`` beside it).
:func:`accepted_cells` is the public entry (``ptflow rerun`` never reruns them). Removing the entry makes the cell a
target again: its missing files are made by the run that follows.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import yaml

from ptflow.config import naming
from ptflow.config.validate import SCHEMA_DIR, ConfigError, explain_schema_error
from ptflow.results import verdict as verdicts
from ptflow.results.cells import ScoredCell
from ptflow.results.verdict import CellVerdict

OVERRIDES_SCHEMA = SCHEMA_DIR / "overrides.schema.json"
JUDGE_FIELDS = ("contamination", "disallowed_model")  # PostTrainBench's two questions (9082063)
WHOLE_VERDICT = verdicts.WHOLE
OVERRIDES_RECORD = "ptflow_overrides.txt"  # beside the exported verdict files: what was overridden, and why
ACCEPTED_RECORD = "ptflow_accepted.txt"  # in an accepted cell's exported run dir: who accepted it, when and why


class OverridesError(ConfigError):
    """The overrides file cannot be used; one line naming the file, the entry and what to do."""


@dataclass(frozen=True)
class Override:
    """One entry of the overrides file: ``cell`` is the cell's key (``<model path name>/<eval>/<agent slot>``)."""

    cell: str
    field: str
    value: bool
    reason: str
    who: str
    when: str

    def text(self) -> str:
        """``contamination=false (J. Doe, 2026-11-30): the reason``."""
        return f"{self.field}={str(self.value).lower()} ({self.who}, {self.when}): {self.reason}"


@dataclass(frozen=True)
class Accepted:
    """One accepted failure: the cell (its key) counts at its base model's score, with the reason, and is not run
    again."""

    cell: str
    reason: str
    who: str
    when: str

    def decision(self) -> str:
        """``the reason (J. Doe, 2026-11-30)``."""
        return f"{self.reason} ({self.who}, {self.when})"

    def text(self) -> str:
        """``accepted: the reason (J. Doe, 2026-11-30)``: the cell's fallback reason."""
        return f"accepted: {self.decision()}"


@dataclass(frozen=True)
class Decisions:
    """The operators' file of a config, checked: its path (None without ``scoring.overrides``) and its accepted
    cells by key."""

    path: Path | None
    accepted: dict[str, Accepted]


def overrides_path(raw: Mapping, workflow: str | Path) -> Path | None:
    """``scoring.overrides`` of a config, relative to the workflow directory (as ``scoring.reference``); None
    without the key."""
    name = (raw.get("scoring") or {}).get("overrides")
    if not name:
        return None
    path = Path(name)
    return path if path.is_absolute() else Path(workflow) / path


def declared_fields(judge: Mapping | None) -> tuple[str, ...]:
    """The verdict fields a config's judge answers: PostTrainBench's two, and each field its panel's judges declare."""
    fields = list(JUDGE_FIELDS)
    for entry in (judge or {}).get("judges") or []:
        fields += [f for f in entry.get("fields") or [] if f not in fields]
    return tuple(fields)


def config_fields(cfg) -> tuple[str, ...]:
    """The verdict fields a cell of a parsed config may be judged on: its judge's (:func:`declared_fields`), and
    where a checkout eval's cells may get PostTrainBench d27a95e's panel (``Jobs.cell_panel``: a checkout, a judge;
    its protocol may be known only after the checkout rule), that panel's (``disallowed_api_usage``)."""
    from ptflow.stages.posttrainbench import judge_v11

    fields = list(declared_fields(cfg.raw.get("judge")))
    if cfg.posttrainbench is not None and cfg.judge and any(e.from_checkout for e in cfg.evals.values()):
        fields += [f for f in declared_fields(judge_v11.panel_config()) if f not in fields]
    return tuple(fields)


def _load(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise OverridesError(
            f"overrides error: cannot read {path} ({exc.strerror}); scoring.overrides names a file relative to the "
            "workflow directory"
        ) from None
    except yaml.YAMLError as exc:
        raise OverridesError(f"overrides error in {path}: not YAML ({str(exc).splitlines()[0]})") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise OverridesError(
            f"overrides error in {path}: write a mapping with the keys overrides: [entries] and/or accepted: [entries]"
        )
    for entry in [*(data.get("overrides") or []), *(data.get("accepted") or [])]:
        # YAML reads an unquoted 2026-11-30 as a date: the record keeps its ISO text
        if isinstance(entry, dict) and isinstance(entry.get("when"), date):
            entry["when"] = entry["when"].isoformat()
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads(OVERRIDES_SCHEMA.read_text()))
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        raise OverridesError(explain_schema_error(error).replace("config error at ", f"overrides error in {path} at "))
    return data


def _cell_key(text: str) -> str:
    """A cell as the file gives it, as its key: the model's Hub id (org/name) becomes its path name (org--name)."""
    parts = text.strip("/").split("/")
    if len(parts) == 4:
        return "/".join([naming.model_to_path("/".join(parts[:2])), *parts[2:]])
    return "/".join(parts)


def _check_cell(where: str, given: str, key: str, known: list[str] | None) -> None:
    if known is not None and key not in known:
        close = difflib.get_close_matches(key, known, 1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        example = f", e.g. {known[0]}" if known else ""
        raise OverridesError(
            f"{where}.cell: {given!r} is not a cell of the matrix{hint}; write <model>/<eval>/<agent>{example}"
        )


def _iso(when: str) -> bool:
    for parse in (date.fromisoformat, datetime.fromisoformat):
        try:
            parse(when)
            return True
        except ValueError:
            pass
    return False


def read_overrides(
    path: str | Path, cells: Iterable[str] | None = None, fields: Iterable[str] | None = None
) -> list[Override]:
    """The overrides of a file, checked: against the schema, and, where given, against the matrix's cell keys and
    the verdict fields its judge answers (plus ``flagged``)."""
    path = Path(path)
    known = list(cells) if cells is not None else None
    allowed = [*fields, WHOLE_VERDICT] if fields is not None else None
    out: list[Override] = []
    seen: dict[tuple[str, str], int] = {}
    for i, entry in enumerate(_load(path).get("overrides") or []):
        where = f"overrides error in {path} at overrides[{i}]"
        key = _cell_key(entry["cell"])
        _check_cell(where, entry["cell"], key, known)
        if allowed is not None and entry["field"] not in allowed:
            close = difflib.get_close_matches(entry["field"], allowed, 1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise OverridesError(
                f"{where}.field: {entry['field']!r} is no verdict field of this config's judge{hint}; known: "
                f"{', '.join(allowed)}"
            )
        if not _iso(entry["when"]):
            raise OverridesError(f"{where}.when: {entry['when']!r} is not an ISO date; write e.g. 2026-11-30")
        earlier = seen.setdefault((key, entry["field"]), i)
        if earlier != i:
            raise OverridesError(
                f"{where}: cell {key} field {entry['field']} is overridden already (overrides[{earlier}]); keep one "
                "entry per cell and field (the file's history keeps the earlier decision)"
            )
        out.append(Override(key, entry["field"], entry["value"], entry["reason"], entry["who"], entry["when"]))
    return out


def read_accepted(path: str | Path, cells: Iterable[str] | None = None) -> list[Accepted]:
    """The accepted failures of a file, checked: against the schema, and, where given, against the matrix's cell
    keys (an unknown cell with its closest match, a non-ISO date, one cell twice: one line each)."""
    path = Path(path)
    known = list(cells) if cells is not None else None
    out: list[Accepted] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(_load(path).get("accepted") or []):
        where = f"overrides error in {path} at accepted[{i}]"
        key = _cell_key(entry["cell"])
        _check_cell(where, entry["cell"], key, known)
        if not _iso(entry["when"]):
            raise OverridesError(f"{where}.when: {entry['when']!r} is not an ISO date; write e.g. 2026-11-30")
        earlier = seen.setdefault(key, i)
        if earlier != i:
            raise OverridesError(
                f"{where}: cell {key} is accepted already (accepted[{earlier}]); keep one entry per cell (the file's "
                "history keeps the earlier decision)"
            )
        out.append(Accepted(key, entry["reason"], entry["who"], entry["when"]))
    return out


def _refuse_reference_cells(cfg, path: Path, entries: Sequence[Override | Accepted], key: str, what: str) -> None:
    for i, entry in enumerate(entries):
        agent = cfg.agent_for(entry.cell.rsplit("/", 1)[1])
        if not agent.trains:
            raise OverridesError(
                f"overrides error in {path} at {key}[{i}].cell: {entry.cell} is a cell of reference agent "
                f"{agent.id} (kind {agent.kind}): its score is the reference and no {what} replaces it; remove it"
            )


def decisions_for_config(cfg, workflow: str | Path) -> Decisions:
    """The operators' file of a parsed config (``ptflow.config.matrix.Config``), checked against its cells and its
    judge's fields; raises OverridesError (one line). A reference agent's cell (kind baseline or instruct) is
    refused in either list: its score is the reference, which no verdict replaces and no fallback stands for."""
    path = overrides_path(cfg.raw, workflow)
    if path is None:
        return Decisions(None, {})
    keys = [c.key for c in cfg.cells]
    overrides = read_overrides(path, keys, config_fields(cfg))
    _refuse_reference_cells(cfg, path, overrides, "overrides", "verdict")
    accepted = read_accepted(path, keys)
    _refuse_reference_cells(cfg, path, accepted, "accepted", "fallback")
    return Decisions(path, {entry.cell: entry for entry in accepted})


def overrides_for_config(cfg, workflow: str | Path) -> Path | None:
    """The operators' file of a parsed config, checked (:func:`decisions_for_config`), or None where the config
    names none; raises OverridesError (one line)."""
    return decisions_for_config(cfg, workflow).path


def accepted_cells(cfg, workflow: str | Path) -> dict[str, Accepted]:
    """The accepted failures of a parsed config by cell key (empty where it names no file), checked; raises
    OverridesError (one line). ``workflow``: the workflow directory (``scoring.overrides`` is relative to it).
    These cells are never run again: the workflow leaves them out of its targets, ``ptflow rerun`` out of its."""
    return decisions_for_config(cfg, workflow).accepted


def config_overrides(cfg, workflow: str | Path) -> list[Override]:
    """The checked overrides of a parsed config (none where it names no file): for ``ptflow status`` and export."""
    path = overrides_for_config(cfg, workflow)
    return read_overrides(path) if path is not None else []


def by_cell(overrides: Iterable[Override]) -> dict[str, list[Override]]:
    out: dict[str, list[Override]] = {}
    for entry in overrides:
        out.setdefault(entry.cell, []).append(entry)
    return out


def decide(judge: dict | None, entries: Sequence[Override]) -> CellVerdict:
    """The verdict of a cell: judge.json's decided fields with ``entries`` (its overrides) applied over them
    (``ptflow.results.verdict.of``, the one place a verdict is decided)."""
    return verdicts.of(judge, entries)


def apply_overrides(cells: Iterable[ScoredCell], overrides: Iterable[Override]) -> None:
    """Every cell's verdict with its overrides applied over its judge.json (decided again from the judges' record
    each time, so applying twice is applying once); its accepted failure, if any, is kept."""
    grouped = by_cell(overrides)
    for cell in cells:
        cell.verdict = verdicts.of(cell.judge_record, grouped.get(cell.key, ()), cell.accepted)


def apply_accepted(cells: Iterable[ScoredCell], accepted: Iterable[Accepted]) -> None:
    """Mark the accepted cells (their verdict's ``accepted``): scoring counts them at their base model's score."""
    grouped = {entry.cell: entry for entry in accepted}
    for cell in cells:
        cell.verdict = verdicts.of(cell.judge_record, cell.overrides, grouped.get(cell.key))


def accepted_text(cell: ScoredCell) -> str:
    """An accepted cell's decision beside it: ``the reason (who, when)``; "" for a cell not accepted."""
    return cell.accepted.decision() if cell.accepted is not None else ""


def override_text(cell: ScoredCell) -> str:
    """The cell's overrides beside it: ``contamination=false (who, when): reason [judges: flagged]``; "" without."""
    if not cell.overrides:
        return ""
    judges = verdicts.of(cell.judge_record).state or "no judge.json"
    return "; ".join(e.text() for e in cell.overrides) + f" [judges: {judges}]"
