"""A vote of PostTrainBench d27a95e's judge panel (v1.1) as the checkout's protocol has it: the panel itself as
ptflow decides it (:func:`panel`: decision ``any``, as run_judge.sh ORs its contamination judges; a contamination or
model flag scores the base model; the API verdict is recorded only, no aggregation script reads it at d27a95e),
where the ChatGPT sign-in lies (:func:`auth_json`), a vote's outcome from the ``judgement.json`` its judge wrote,
checked as ``aggregate_judgement.py`` checks it (:func:`vote_outcome`), and the run dir's judge files from a cell's
votes for ``ptflow export --posttrainbench`` (:func:`export_from_votes`).

What each judge sees and runs is :mod:`ptflow.stages.posttrainbench.judge_v11`'s; the judge's room runs a vote with
both (``ptflow.stages.judge.ptb_vote``).
"""

from __future__ import annotations

from pathlib import Path

from ptflow.config.judges import Judge, JudgePanel
from ptflow.stages.posttrainbench import judge_v11 as v11

PROTOCOL = "v1.1"
LABEL = "v1.1"  # in the log lines ("PostTrainBench v1.1")

# the names every checkout panel has (ptflow.stages.posttrainbench.judge_panels): judge_v11's
HOME, TASK, VERDICT_FILE, AUTH_IN_HOME = v11.HOME, v11.TASK, v11.VERDICT_FILE, v11.AUTH_IN_HOME
PtbVerdictError = v11.PtbVerdictError
PANEL = v11.PANEL
checkout_paths = v11.checkout_paths
subscription_auth = v11.subscription_auth
judge_home_entries = v11.judge_home_entries
build_judge_home = v11.build_judge_home


def panel_judge(judge_id: str, checkout: str | Path | None = None) -> v11.PtbPanelJudge:
    """run_judge.sh's judge ``judge_id`` (its settings are run_judge.sh's own, whatever the checkout)."""
    return v11.panel_judge(judge_id)


def judge_prompt(checkout, judge: v11.PtbPanelJudge, eval_dir: str, model_id: str, vote: dict, env=None) -> str:
    """The judge's prompt (:func:`judge_v11.judge_prompt`; the vote adds nothing to it)."""
    return v11.judge_prompt(checkout, judge, eval_dir, model_id, env=env)


def vote_settings(raw_posttrainbench: dict | None, agent: str, agent_config: str) -> dict:
    """What a vote adds to its params beyond its judge and sign-in: nothing."""
    return {}


def panel(runs: int = 1) -> JudgePanel:
    """The panel a v1.1 checkout's cells get (:func:`judge_v11.panel_config` as a :class:`JudgePanel`)."""
    raw = v11.panel_config(runs)
    judges = tuple(
        Judge(j["id"], {k: j[k] for k in ("agent", "model", "keys")}, j["runs"], j["decision"], tuple(j["fields"]))
        for j in raw["judges"]
    )
    return JudgePanel(judges, raw["decision"], dict(raw["effects"]))


def auth_json(raw_posttrainbench: dict | None, checkout: str) -> str:
    """Where the subscription sign-in is: ``posttrainbench.judge.auth_json`` (relative to the working directory,
    made absolute), else the checkout's ``agents/codex_non_api/auth.json`` as run_judge.sh reads it."""
    given = ((raw_posttrainbench or {}).get("judge") or {}).get("auth_json")
    return str(Path(given).resolve()) if given else str(v11.subscription_auth(checkout))


def vote_outcome(judge: v11.PtbPanelJudge, text: str | None, how: str = "", see: str = "") -> dict:
    """A vote's outcome from the judgement.json its judge wrote (None: none): its fields as aggregate_judgement.py
    reads them (``bool()`` of each value, so a boolean written as a string counts as its truth value there, and
    here), or ``no_verdict`` where that script would fail (no file, not JSON, a field missing)."""
    try:
        data = v11.read_verdict(judge, text)
    except v11.PtbVerdictError as exc:
        return {"status": "no_verdict", "reason": f"judge {judge.id} {how}: {exc}{see}".replace("  ", " ")}
    reason = "; ".join(f"{f}: {data[f]} ({str(data[f'justification_{f}'])[:300]})" for f in judge.fields)
    return {**{f: bool(data[f]) for f in judge.fields}, "reason": reason}


def export_from_votes(vote_json) -> list[tuple[str, str]]:
    """(file name, text) of the run dir's v1.1 judge files from a cell's votes (``vote_json(judge_id)``: the path of
    the judge's first run's vote file; what it kept lies in the dir of that name without ``.json``): each judge's
    judgement.json under run_task.sh's name, and judge_result.json (:func:`judge_v11.export_texts`)."""
    verdicts = {}
    for judge in v11.PANEL:
        kept = Path(vote_json(judge.id)).with_suffix("") / v11.VERDICT_FILE
        if kept.is_file():
            verdicts[judge.id] = kept.read_text()
    return sorted(v11.export_texts(verdicts).items()) if verdicts else []
