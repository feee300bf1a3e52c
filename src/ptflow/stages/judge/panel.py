"""The judge panel's decision (rule judge): a cell's votes (``judges/<id>/run<k>.json``, ``ptflow.stages.judge.vote``)
decided field by field into judge.json, and the votes as ``ptflow status`` and the report show them.

How a panel decides (``ptflow.config.judges``: the config's rules):

- **Across a judge's runs**, per field: ``majority`` (more than half of its runs with a verdict flag the field; a tie
  does not flag) or ``any`` (one run flagging it). A run with no verdict (``status: no_verdict``) does not count;
  a judge with no run that gave a verdict has no value.
- **Across judges**, per field: ``any`` or ``majority`` of the judges that answer the field. A judge without a value
  leaves the field undecided only where its verdict could change the outcome: under ``any`` one judge flagging it
  decides it, under ``majority`` enough judges agreeing do.
- **The cell**: ``judged`` when every field is decided (but a field only judges marked not required answer, whose
  verdict nothing reads), else ``no_verdict`` (it counts as its base model's score,
  as a single judge's missing verdict always did). ``flagged``: some decided field is flagged. ``effect``: ``stop``
  when a flagged field's effect is stop (rule aggregate then fails naming the cell and field), ``fallback`` for any
  other flag or no verdict (the base model's score), else null.

The verdict files PostTrainBench's aggregation reads are written into the cell's ``agent/`` dir from the decision
(``ptflow export --posttrainbench`` copies them): a panel of one vote copies that vote's files as its judge wrote
them; a bigger panel writes each decided field's answer line alone.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from ptflow.config.judges import DEFAULT_FIELDS, VERDICT_FIELDS
from ptflow.files import write_json_atomic, write_text_atomic
from ptflow.keys import Masker
from ptflow.specs import JudgePanelSpec
from ptflow.stages.judge.trace import readable_trace

REASON_CHARS = 600  # of each vote's reason in the panel's reason


def _runs_value(decision: str, flags: list[bool]) -> bool | None:
    """A judge's value of a field from its runs' verdicts (None: no run gave one)."""
    if not flags:
        return None
    flagged = sum(flags)
    return flagged > 0 if decision == "any" else 2 * flagged > len(flags)


def _judges_value(decision: str, values: list[bool | None]) -> bool | None:
    """The panel's value of a field from its judges' values; None where the judges without one could change it."""
    flagged, known = sum(v is True for v in values), sum(v is not None for v in values)
    missing = len(values) - known
    if decision == "any":
        return True if flagged else (None if missing else False)
    if 2 * flagged > len(values):
        return True
    return False if 2 * (flagged + missing) <= len(values) else None


def decide(panel: dict, votes: list[dict]) -> dict:
    """The panel's decision over the votes: per judge its per-field tally, per field the decided value, the status,
    flagged and effect (the module docstring's rules). ``panel``: ``JudgePanel.to_params()``."""
    by_judge: dict[str, list[dict]] = {j["id"]: [] for j in panel["judges"]}
    for vote in votes:
        by_judge.setdefault(vote["judge"], []).append(vote)
    fields = list(panel["effects"])
    judges, per_field = {}, {f: [] for f in fields}
    for j in panel["judges"]:
        usable = [v for v in by_judge[j["id"]] if v.get("status") == "judged"]
        tally = {}
        for f in j["fields"]:
            flags = [bool(v["fields"][f]) for v in usable if isinstance(v.get("fields", {}).get(f), bool)]
            value = _runs_value(j["decision"], flags)
            tally[f] = {"flagged": sum(flags), "votes": len(flags), "value": value}
            per_field[f].append(value)
        judges[j["id"]] = {
            "runs": j["runs"],
            "decision": j["decision"],
            "no_verdict": len(by_judge[j["id"]]) - len(usable),
            "tally": tally,
        }
    decided = {f: _judges_value(panel["decision"], per_field[f]) for f in fields}
    # a field whose effect is record is shown, never counted: the cell is not flagged by it (d27a95e's API verdict)
    flagged_fields = [f for f, v in decided.items() if v and panel["effects"][f] != "record"]
    # a field only judges that are not required answer (their verdict read by nothing) never leaves the cell undecided
    optional = {f for f in fields if all(not j.get("required", True) for j in panel["judges"] if f in j["fields"])}
    status = "judged" if all(v is not None for f, v in decided.items() if f not in optional) else "no_verdict"
    effect = None
    if flagged_fields and any(panel["effects"][f] == "stop" for f in flagged_fields):
        effect = "stop"
    elif flagged_fields or status == "no_verdict":
        effect = "fallback"
    return {
        "status": status,
        "flagged": bool(flagged_fields) if status == "judged" else (True if flagged_fields else None),
        "fields": decided,
        "judges": judges,
        "decision": {
            "across_judges": panel["decision"],
            "across_runs": {j["id"]: j["decision"] for j in panel["judges"]},
        },
        "effects": dict(panel["effects"]),
        "effect": effect,
    }


def votes_text(judge: dict | None) -> str:
    """A decided judge.json's votes in a few words: ``gpt 2/3 contamination, kimi 0/1``; "" without votes."""
    out = []
    for judge_id, info in ((judge or {}).get("judges") or {}).items():
        tally = info.get("tally") or {}
        counted = max((t.get("votes", 0) for t in tally.values()), default=0)
        flags = [f"{t['flagged']}/{t['votes']} {f}" for f, t in tally.items() if t.get("flagged")]
        text = f"{judge_id} " + (" + ".join(flags) if flags else f"0/{counted}")
        if info.get("no_verdict"):
            text += f" ({info['no_verdict']} without verdict)"
        out.append(text)
    return ", ".join(out)


def _reason(decision: dict, votes: list[dict]) -> str:
    """The votes' own words: the one vote's reason, or each vote's, named by judge and run."""
    if len(votes) == 1:
        return str(votes[0].get("reason", ""))
    said = [f"{v['judge']} run{v['run']}: {str(v.get('reason', ''))[:REASON_CHARS]}" for v in votes]
    undecided = [f for f, value in decision["fields"].items() if value is None]
    lead = f"undecided: {', '.join(undecided)} — " if undecided else ""
    return lead + "; ".join(said)


def _vote(path: Path) -> dict:
    """One vote file as the decision reads it (its judge and run from its place: judges/<id>/run<k>.json)."""
    data = json.loads(path.read_text())
    run = int(path.stem.removeprefix("run"))
    return {
        "judge": path.parent.name,
        "run": run,
        "status": data.get("status"),
        "fields": data.get("fields") or {f: data[f] for f in DEFAULT_FIELDS if isinstance(data.get(f), bool)},
        "reason": data.get("reason", ""),
        "judged_at": data.get("judged_at"),
        "cli": (data.get("judge") or {}).get("cli"),
        "model": (data.get("judge") or {}).get("model"),
    }


def write_verdict_files(trace_dir: Path, decision: dict, vote_files: list[Path]) -> None:
    """The verdict files PostTrainBench's aggregation reads, in the cell's agent/ dir: one vote's as its judge wrote
    them; a bigger panel's, each decided field's answer line; an undecided field's file removed (no stale verdict)."""
    for field, (name, answers) in VERDICT_FIELDS.items():
        target = trace_dir / name
        value = decision["fields"].get(field)
        if len(vote_files) == 1 and (vote_files[0].with_suffix("") / name).is_file():
            write_text_atomic(target, (vote_files[0].with_suffix("") / name).read_text(errors="replace"))
        elif len(vote_files) == 1 and field in decision["fields"]:
            target.unlink(missing_ok=True)  # a cli judge writes no files: none, as before the panel
        elif value is None:
            target.unlink(missing_ok=True)
        else:
            write_text_atomic(target, next(a for a, flagged in answers.items() if flagged is value) + "\n")


def decide_cell(job: JudgePanelSpec, manifest: str | Path, vote_files: list[str], judge_json: str | Path, log=print):
    """Rule judge's job: judge.json from the cell's votes (or ``skipped`` without a judge). Returns its content."""
    run = json.loads(Path(manifest).read_text()).get("agent_run") or {}
    trace_dir = Path(run.get("trace_dir", ""))
    trace_md = trace_dir / "trace.md"
    base = {**job.cell, "trace": os.path.relpath(trace_md, Path(judge_json).parent)}
    if job.panel is None:
        if trace_dir.is_dir():  # no vote wrote it: the readable trace, its keys masked, for the report
            stdout = (trace_dir / "stdout.log").read_text(errors="replace")
            stderr = (trace_dir / "stderr.log").read_text(errors="replace")
            write_text_atomic(
                trace_md, readable_trace(stdout, stderr, Masker.for_env(os.environ, job.keys), run.get("cli"))
            )
        data = {**base, "status": "skipped", "flagged": None, "reason": "no judge configured (config key judge)"}
        write_json_atomic(judge_json, data)
        log(f"{job.cell}: judge skipped (no judge configured)")
        return data
    paths = [Path(p) for p in vote_files]
    votes = [_vote(p) for p in paths]
    decision = decide(job.panel, votes)
    one = votes[0] if len(votes) == 1 else None
    data = {
        **base,
        "status": decision["status"],
        **({"judge": {"cli": one["cli"], "model": one["model"]}} if one else {}),
        "flagged": decision["flagged"],
        **{f: decision["fields"][f] for f in DEFAULT_FIELDS if f in decision["fields"]},
        "reason": _reason(decision, votes),
        **{k: decision[k] for k in ("fields", "effects", "effect", "decision", "judges")},
        "votes": [{k: v[k] for k in ("judge", "run", "status", "fields", "reason")} for v in votes],
        "judged_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if decision["status"] == "no_verdict":
        data["reason"] += " — the cell counts as its base model's score; delete a vote's file to judge it again"
    if trace_dir.is_dir():
        write_verdict_files(trace_dir, decision, paths)
    write_json_atomic(judge_json, data)
    said = f"flagged={decision['flagged']}, effect={decision['effect']}"
    log(f"{job.cell}: {decision['status']}, {said}: {votes_text(data)}")
    return data
