"""A cell's one verdict: what its judges decided (judge.json, rule judge's record of the panel), the operators'
overrides over it and an accepted failure, decided here once and read by every view (the score and its fallback,
the leaderboard's PostTrainBench score, summary.csv, ``ptflow status``, the HTML report and ``ptflow export``).

None of those views reads a verdict file of its own: the ``*_judgement.txt`` files rule judge writes beside the agent's
trace are the judges' record, and what ``ptflow export --posttrainbench`` writes is made from this verdict
(``ptflow.results.ptb_export``).

States (:data:`STATES`):

- ``clean`` / ``flagged``: every field decided, by the judges or by an override; ``flagged`` when a decided field
  whose effect is not ``record`` is flagged, or a ``flagged: true`` override says so (a whole-cell flag).
- ``no verdict``: some field undecided (a judge without a usable verdict that could change the outcome; a field
  override decides that field only). The effect its config names applies: judge.json's ``effect`` (``fallback``, the
  base model's score, as PostTrainBench counts a run whose judges left no result; ``stop`` where a decided flagged
  field's effect is stop).
- ``not judged``: judge.json says skipped (no judge configured); ``""``: no judge.json (a kind no judge reads). Their
  own score counts or falls back as ``scoring.unjudged`` says; PostTrainBench's scripts, which find no judgement
  files for them, fall back.

An accepted failure outranks all of this: the cell counts at its base model's score whatever its verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

CLEAN, FLAGGED, NO_VERDICT, NOT_JUDGED, NONE = "clean", "flagged", "no verdict", "not judged", ""
STATES = (CLEAN, FLAGGED, NO_VERDICT, NOT_JUDGED, NONE)
WHOLE = "flagged"  # an override's field for the whole verdict
DEFAULT_FIELDS = ("contamination", "disallowed_model")


@dataclass(frozen=True)
class CellVerdict:
    """One cell's decided verdict (module docstring). ``fields``: each verdict field's decided value (None:
    undecided); ``whole``: a whole-cell override's value (None without one); ``overrides``/``accepted``: the
    operators' entries (``ptflow.results.overrides.Override``/``Accepted``) that took part."""

    state: str
    reason: str = ""
    fields: Mapping[str, bool | None] = field(default_factory=dict)
    effects: Mapping[str, str] = field(default_factory=dict)
    effect: str | None = None  # fallback | stop | None: what the verdict does to the cell's own score
    whole: bool | None = None
    overrides: tuple = ()
    accepted: object | None = None
    votes: str = ""  # the panel's votes in a few words ("gpt 2/3 contamination, kimi 0/1")
    vote_count: int = 0

    @property
    def decided(self) -> bool:
        return self.state in (CLEAN, FLAGGED)

    @property
    def flagged(self) -> bool:
        return self.state == FLAGGED

    @property
    def flagged_fields(self) -> list[str]:
        """The decided, flagged fields that count (a ``record`` field flags nothing)."""
        return [f for f, v in self.fields.items() if v and self.effects.get(f) != "record"]

    @property
    def recorded_fields(self) -> list[str]:
        """Flagged fields whose effect is ``record``: shown, no score changed (d27a95e's API-usage verdict)."""
        return [f for f, v in self.fields.items() if v and self.effects.get(f) == "record"]

    @property
    def undecided_fields(self) -> list[str]:
        return [f for f, v in self.fields.items() if v is None]

    @property
    def source(self) -> str:
        """Who decided: ``accepted``, ``override``, ``judges``, or "" (no judge)."""
        if self.accepted is not None:
            return "accepted"
        if self.overrides:
            return "override"
        return "judges" if self.state in (CLEAN, FLAGGED, NO_VERDICT) else ""

    def counts_own_value(self, unjudged: str = "score") -> bool:
        """Whether the cell's own score counts in ptflow's score (``unjudged``: ``scoring.unjudged``)."""
        if self.accepted is not None:
            return False
        if self.state == CLEAN:
            return True
        if self.state == NOT_JUDGED:
            return unjudged == "score"
        return self.state == NONE

    @property
    def counts_for_posttrainbench(self) -> bool:
        """Whether PostTrainBench's aggregation counts the cell's own value when it reads the export (its rule, where
        the checkout's scripts apply it): only a decided clean verdict. A cell without judgement files (not judged,
        no judge.json) and an undecided one fall back there, as does an accepted failure (no metrics.json)."""
        return self.accepted is None and self.state == CLEAN

    def fields_text(self) -> str:
        """The flagged fields as ``contamination+disallowed_model``, ``flagged`` for a whole-cell flag."""
        return "+".join(self.flagged_fields) or (WHOLE if self.state == FLAGGED else "")

    def text(self) -> str:
        """The verdict in a few words, as ``ptflow status`` shows it: ``flagged contamination: gpt 2/3
        contamination, kimi 0/1``, ``clean (override)``; ``accepted`` is said by the status' own line."""
        head = self.state or "no judge"
        if self.state == FLAGGED:
            head += f" {self.fields_text()}"
        elif self.state == NO_VERDICT and self.undecided_fields:
            head += f" (undecided: {', '.join(self.undecided_fields)})"
        if self.recorded_fields:
            head += f"; recorded: {', '.join(self.recorded_fields)}"
        if self.overrides:
            head += " (override)"
        return head + (f": {self.votes}" if self.votes else "")

    def to_dict(self) -> dict:
        """For ``ptflow status --json`` and the report: the state, fields, effect, who decided, and the reason."""
        return {
            "state": self.state,
            "fields": dict(self.fields),
            "effect": self.effect,
            "source": self.source,
            "counts_for_posttrainbench": self.counts_for_posttrainbench,
            "reason": self.reason,
            "votes": self.votes,
        }


def judge_fields(judge: Mapping | None) -> dict[str, bool | None]:
    """judge.json's value per verdict field: its ``fields`` (a panel's decision: None where undecided), else the
    top-level ``contamination`` and ``disallowed_model`` (one judge, before the panel); empty for a cell no judge
    decided and a single judge's undecided record (no fields)."""
    if not judge or judge.get("status") == "skipped":
        return {}
    if isinstance(judge.get("fields"), dict):
        return {k: (None if v is None else bool(v)) for k, v in judge["fields"].items()}
    if judge.get("status") == "no_verdict":
        return {}
    return {k: bool(judge[k]) for k in DEFAULT_FIELDS if k in judge}


def _votes(judge: Mapping | None) -> tuple[str, int]:
    from ptflow.stages.judge.panel import votes_text

    return votes_text(dict(judge)) if judge else "", len((judge or {}).get("votes") or [])


def of(judge: Mapping | None, overrides: Sequence = (), accepted=None) -> CellVerdict:
    """The cell's verdict from its judge.json (None: there is none), its overrides (each with ``field``, ``value``,
    ``text()``) and its accepted failure (or None)."""
    votes, count = _votes(judge)
    effects = dict((judge or {}).get("effects") or {})
    common = {"effects": effects, "overrides": tuple(overrides), "accepted": accepted, "votes": votes,
              "vote_count": count}  # fmt: skip
    reason = str((judge or {}).get("reason", ""))
    if not overrides:
        fields = judge_fields(judge)
        if judge is None:
            return CellVerdict(NONE, **common)
        if judge.get("status") == "skipped":
            return CellVerdict(NOT_JUDGED, reason, **common)
        if judge.get("status") == "no_verdict":
            return CellVerdict(NO_VERDICT, reason, fields, effect=judge.get("effect") or "fallback", **common)
        if judge.get("flagged"):
            flagged = [f for f, v in fields.items() if v and effects.get(f) != "record"]
            said = f"{'+'.join(flagged) or WHOLE}: {reason}".strip()
            return CellVerdict(FLAGGED, said, fields, effect=judge.get("effect") or "fallback", **common)
        return CellVerdict(CLEAN, reason, fields, **common)
    # a person's decision outranks the judges': the overridden fields replaced, a whole-cell override over all
    fields = judge_fields(judge)
    whole = None
    for entry in overrides:
        if entry.field == WHOLE:
            whole = entry.value
        else:
            fields[entry.field] = entry.value
    if whole is False:
        fields = dict.fromkeys(fields, False)
    said = "override: " + "; ".join(e.text() for e in overrides)
    counted = [f for f, v in fields.items() if v and effects.get(f) != "record"]
    flagged = whole if whole is not None else bool(counted)
    common["whole"] = whole
    stop = any(effects.get(f) == "stop" for f in counted)
    if not flagged and whole is None and any(v is None for v in fields.values()):
        undecided = ", ".join(f for f, v in fields.items() if v is None)
        effect = (judge or {}).get("effect") or "fallback"
        return CellVerdict(NO_VERDICT, f"undecided: {undecided} ({said})", fields, effect=effect, **common)
    if flagged:
        return CellVerdict(FLAGGED, f"{'+'.join(counted) or WHOLE} ({said})", fields,
                       effect="stop" if stop else "fallback", **common)  # fmt: skip
    return CellVerdict(CLEAN, said, fields, **common)
