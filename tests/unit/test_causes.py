"""Every failure by its cause (ptflow.results.causes) from facts: Slurm's records in sacct's parsable format, the
real CLIs' error events (tests/unit/data/causes: captured from claude 2.0.55, codex 0.79.0 and gemini 0.18.4 run
through tests/support/cli_runs.py against the provider stand-in answering 401, a 429 storm and a 529 storm), the
hub stand-in's 429 through huggingface_hub, an ESTALE OSError and the cells' own files; then ``ptflow status``'s
groups and ``ptflow rerun``'s selection (the step, the targets, the refusals)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from ptflow import jobenv
from ptflow.cluster import slurm
from ptflow.config.matrix import Cell
from ptflow.ops import rerun, status
from ptflow.results import causes
from ptflow.results.cell_state import CellStatus
from ptflow.stages.train.agent.clis import CLIS
from tests.support.hubstandin import HubStandIn
from tests.unit.test_status import LAYOUT, RUN_ID, cfg, eval_json, fake_query, write_run_log  # noqa: F401

DATA = Path(__file__).parent / "data" / "causes"
SFT = Cell("ptflow--tiny-llama-h64", "add", "sft")


def events(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines() if line.startswith("{")]


@pytest.mark.parametrize(
    ("cli", "capture", "rc", "status_", "cause"),
    [
        ("claude", "claude_401", 1, 401, "api_key_refused"),
        ("claude", "claude_429_storm", 1, 429, "rate_limited"),
        ("claude", "claude_529_storm", 1, 529, "overloaded"),
        ("codex", "codex_429_storm", 1, 429, "rate_limited"),
        # gemini 0.18.4 gives up on a 429 storm with exit 1 and an error without a status: no status is invented
        ("gemini", "gemini_429_storm", 1, None, "api_error"),
        ("gemini", "gemini_429_storm", 401 % 256, 401, "api_key_refused"),  # it exits with a 401's status mod 256
    ],
)
def test_the_real_clis_error_events_name_their_cause(cli, capture, rc, status_, cause):
    error = CLIS[cli].api_error(rc, events(capture))
    assert error is not None and error["http_status"] == status_
    assert causes.api_error_cause(error) == cause


def test_claude_error_types_and_quota():
    assert causes.api_error_cause({"http_status": 429, "type": "insufficient_quota"}) == "quota_exhausted"
    assert causes.api_error_cause({"http_status": 400, "type": "billing_error"}) == "quota_exhausted"
    assert causes.api_error_cause({"http_status": 503, "type": None}) == "overloaded"
    assert causes.api_error_cause(None) is None
    # opencode's error event shape (a refused key, tests/integration/test_real_cli_opencode.py)
    ev = {"type": "error", "error": {"name": "APIError", "data": {"statusCode": 401, "message": "bad key"}}}
    assert CLIS["opencode"].api_error(0, [ev]) == {"http_status": 401, "type": "APIError"}


def sacct_line(jid: str, state: str, exit_code: str, reason: str = "None") -> str:
    # sacct -X -n -P -o JobID,JobName,State,ExitCode,Reason,NodeList,Elapsed,Partition,Submit
    return f"{jid}|{RUN_ID}|{state}|{exit_code}|{reason}|node2|00:01:02|debug|2026-11-29T10:00:00"


def train_failed(tmp_path: Path, cfg, line: str, facts: dict | None = None) -> CellStatus:  # noqa: F811
    write_run_log(tmp_path, {"20": ("train", status.wildcard_str(SFT))})
    log = tmp_path / LAYOUT.log("train", SFT.model, SFT.eval, SFT.agent)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("[t] FAILED: something\n")
    if facts is not None:
        jobenv.facts_path(log).write_text(json.dumps(facts))
    snap = status.snapshot(cfg, LAYOUT, tmp_path, query=fake_query(slurm.parse_sacct(line)))
    return next(c for c in snap.cells if c.agent == "sft")


@pytest.mark.parametrize(
    ("state", "exit_code", "cause"),
    [
        ("NODE_FAIL", "0:0", "node_failure"),
        ("PREEMPTED", "0:15", "preempted"),
        ("TIMEOUT", "0:0", "time_limit"),
        ("OUT_OF_MEMORY", "0:125", "out_of_memory"),
        ("CANCELLED by 0", "0:15", "cancelled"),
        ("FAILED", "1:0", "unknown"),
    ],
)
def test_slurm_records_name_their_cause(cfg, tmp_path, state, exit_code, cause):  # noqa: F811
    st = train_failed(tmp_path, cfg, sacct_line("20", state, exit_code, "NonZeroExitCode"))
    assert st.cause["cause"] == cause and st.cause["step"] == "train"
    assert state in st.cause["detail"] or cause == "unknown"
    if cause == "unknown":  # with the rule log to read
        assert st.cause["log"].endswith("train/ptflow--tiny-llama-h64/add/sft.log")


def test_facts_of_the_failed_job_name_the_cause_and_another_jobs_do_not(cfg, tmp_path):  # noqa: F811
    api = {"kind": "api_error", "http_status": 401, "type": "authentication_failed", "cli": "claude",
           "key_var": "ANTHROPIC_API_KEY", "exit_code": 1}  # fmt: skip
    st = train_failed(tmp_path, cfg, sacct_line("20", "FAILED", "1:0"), {"job_id": "20", "facts": [api]})
    assert st.cause["cause"] == "api_key_refused"
    assert causes.Diagnosis(**st.cause).todo() == "set a valid ANTHROPIC_API_KEY, then ptflow rerun --fixed"
    # an earlier attempt's facts (job 19) are not this job's failure
    st = train_failed(tmp_path, cfg, sacct_line("20", "FAILED", "1:0"), {"job_id": "19", "facts": [api]})
    assert st.cause["cause"] == "unknown"
    # a GPU job without a GPU that ran out of time: the missing GPU is the cause
    gpu = {"kind": "no_gpu", "gpus_requested": 1, "torch": "2.13.0"}
    st = train_failed(tmp_path, cfg, sacct_line("20", "TIMEOUT", "0:0"), {"job_id": "20", "facts": [gpu]})
    assert st.cause["cause"] == "no_gpu"


def raise_in_rule_log(log: Path, exc: BaseException, monkeypatch) -> dict:
    """Fail a job the way a rule script fails: inside ``jobenv.rule_log``; return its facts file."""
    monkeypatch.setenv("SLURM_JOB_ID", "31")
    monkeypatch.delenv(jobenv.FACTS_ENV, raising=False)
    with pytest.raises(type(exc)), jobenv.rule_log(log):
        raise exc
    return json.loads(jobenv.facts_path(log).read_text())


def test_an_estale_oserror_is_recorded_and_classified(tmp_path, monkeypatch):
    stale = OSError(errno.ESTALE, "Stale file handle")
    try:  # as a copy to scratch meets it: under another error
        raise RuntimeError("copying the checkpoint failed") from stale
    except RuntimeError as exc:
        facts = raise_in_rule_log(tmp_path / "train.log", exc, monkeypatch)
    assert facts["job_id"] == "31" and facts["facts"][0]["errno_name"] == "ESTALE"
    assert causes.facts_cause(facts["facts"])[0] == "stale_file_handle"


def test_the_hubs_429_through_huggingface_hub_is_recorded_and_classified(tmp_path, monkeypatch):
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    with HubStandIn([], rate_limited=5) as hub:
        try:
            HfApi(endpoint=hub.url).model_info("org/model")
        except HfHubHTTPError as exc:
            facts = raise_in_rule_log(tmp_path / "cache.log", exc, monkeypatch)
    fact = facts["facts"][0]
    assert fact["http_status"] == 429 and fact["http_module"].startswith("huggingface_hub")
    assert causes.facts_cause(facts["facts"])[0] == "hub_rate_limited"


def test_a_new_attempt_starts_without_the_earlier_attempts_facts(tmp_path, monkeypatch):
    log = tmp_path / "train.log"
    raise_in_rule_log(log, MemoryError(), monkeypatch)
    assert causes.facts_cause(causes.read_facts(log)["facts"])[0] == "out_of_memory"
    monkeypatch.delenv(jobenv.FACTS_ENV, raising=False)
    with jobenv.rule_log(log):
        pass
    assert causes.read_facts(log) is None


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("agent_run", "cause"),
    [
        ({"api_error": {"http_status": 429, "type": "rate_limit_error", "cli": "claude"}}, "rate_limited"),
        ({"stopped_by": "spend_cap"}, "spend_cap"),
        ({"budget_exhausted": True}, "overrun"),
        ({"budget_exhausted": False, "exit_code": 0}, "no_final_model"),
    ],
)
def test_a_cell_without_final_model_says_what_ended_its_agent(agent_run, cause):
    data = {"status": "no_model", "agent_run": {"exit_code": 1, "budget_exhausted": False, **agent_run}}
    found = causes.scored_cause(data)
    assert found.cause == cause and found.step == "train"
    assert causes.CAUSES["overrun"].rerun is False and "normal end" in causes.CAUSES["overrun"].meaning


def test_eval_failed_no_verdict_and_matrix_cap(cfg, tmp_path):  # noqa: F811
    failed = {**eval_json(SFT), "status": "eval_failed", "metrics": None, "attempts": [{"ok": False}] * 4}
    assert causes.scored_cause(failed).cause == "eval_failed"
    assert causes.scored_cause(eval_json(SFT), {"status": "no_verdict", "reason": "no vote"}).cause == "no_verdict"
    assert causes.scored_cause(eval_json(SFT), {"status": "done", "flagged": False}) is None
    cell_dir = tmp_path / LAYOUT.cell_dir(SFT.model, SFT.eval, SFT.agent)
    write(cell_dir / "agent" / causes.NOT_STARTED_FILE, {"reason": "matrix spend cap reached"})
    st = CellStatus(SFT.model, SFT.eval, SFT.agent, "Not started")
    assert causes.diagnose(st, cell_dir, {}).cause == "matrix_spend_cap"


def status_of(key: str, cause: str, step: str = "train") -> CellStatus:
    model, eval_id, agent = key.split("/")
    st = CellStatus(model, eval_id, agent, "Error")
    st.cause = causes.Diagnosis(cause, step, "seen").to_dict()
    return st


def test_status_groups_cells_by_cause_with_what_to_do():
    cells = [status_of("m/add/a", "rate_limited"), status_of("m/add/b", "api_key_refused"),
             status_of("m/add/c", "rate_limited"), CellStatus("m", "add", "d", "Done")]  # fmt: skip
    groups = causes.by_cause(cells)
    assert [g["name"] for g in groups] == ["api_key_refused", "rate_limited"]
    assert [c["cell"] for c in groups[1]["cells"]] == ["m/add/a", "m/add/c"] and groups[1]["rerun"] is True
    text = "\n".join(causes.cause_lines(cells))
    assert "cause rate_limited (2 cells; train; rerun fixes it): rerun later" in text
    assert "cause api_key_refused (1 cells; train; rerun only after the fix (--fixed))" in text


def test_rerun_selects_a_cause_at_its_step_and_refuses_what_a_rerun_cannot_fix(cfg, tmp_path):  # noqa: F811
    base, sft, mine = (Cell("ptflow--tiny-llama-h64", "add", a) for a in ("baseline", "sft", "my_agent_x"))
    # sft: every evaluation try failed (its model is kept); my_agent_x: a refused key; baseline: a no-verdict judge
    sft_dir = tmp_path / LAYOUT.cell_dir(sft.model, sft.eval, sft.agent)
    write(sft_dir / "eval.json", {"status": "eval_failed"})
    write(sft_dir / "checkpoint.json", {})
    base_dir = tmp_path / LAYOUT.cell_dir(base.model, base.eval, base.agent)
    write(base_dir / "judge.json", {"status": "no_verdict"})
    write(base_dir / "judges" / "gpt" / "run1.json", {"status": "no_verdict"})
    write(base_dir / "judges" / "gpt" / "run2.json", {"status": "done", "contamination": False})
    statuses = [status_of(sft.key, "eval_failed", "evaluate"), status_of(mine.key, "api_key_refused"),
                status_of(base.key, "no_verdict", "judge")]  # fmt: skip
    plan = rerun.plan_rerun(cfg, LAYOUT, tmp_path, statuses, ["eval_failed", "api_key_refused"], [])
    assert [c.cell for c in plan.cells] == [sft] and plan.refused == {"api_key_refused": [mine.key]}
    assert plan.targets == [LAYOUT.eval_json(sft.model, sft.eval, sft.agent)]
    assert plan.forcerun == [LAYOUT.eval_json(sft.model, sft.eval, sft.agent)]  # not the training's manifest
    assert "refused: 1 cell(s) of cause api_key_refused" in "\n".join(rerun.describe(plan))
    fixed = rerun.plan_rerun(cfg, LAYOUT, tmp_path, statuses, ["api_key_refused"], [], fixed=True)
    assert [c.cell for c in fixed.cells] == [mine] and fixed.forcerun == []  # its missing outputs drive it
    judged = rerun.plan_rerun(cfg, LAYOUT, tmp_path, statuses, [], [base])
    assert judged.targets == [LAYOUT.judge_json(base.model, base.eval, base.agent)]
    vote = str(Path(LAYOUT.cell_dir(base.model, base.eval, base.agent)) / "judges" / "gpt" / "run1.json")
    assert judged.forcerun == [LAYOUT.judge_json(base.model, base.eval, base.agent), vote]  # the silent vote only
    with pytest.raises(ValueError, match="not a cause"):
        rerun.plan_rerun(cfg, LAYOUT, tmp_path, statuses, ["bad_luck"], [])


def test_rerun_takes_the_latest_runs_arguments_without_its_targets(tmp_path):
    latest = ["/x/snakemake", "--profile", "p", "--configfile", "a.yaml", "-j", "2", "results/summary.csv"]
    args = rerun.snakemake_args([], latest, tmp_path, Path("/wf/Snakefile"))
    assert args == ["--profile", "p", "--configfile", "a.yaml", "-j", "2", "--directory", str(tmp_path),
                    "--snakefile", "/wf/Snakefile"]  # fmt: skip
    plan = rerun.RerunPlan([rerun.CellRerun(SFT, causes.Diagnosis("eval_failed", "evaluate"), ["t.json"], ["t.json"])],
                           {}, [], [])  # fmt: skip
    assert rerun.command_args(plan, ["-j", "1"]) == ["t.json", "-j", "1", "--rerun-incomplete", "--forcerun", "t.json"]


def test_the_report_names_a_cells_cause(tmp_path):
    from ptflow.results.cells import read_cell
    from ptflow.results.report_site import _state_of, cause_text

    path = tmp_path / "eval.json"
    run = {"exit_code": 1, "budget_exhausted": False, "time_taken": 3.0, "final_model": False,
           "api_error": {"http_status": 529, "type": "overloaded_error", "cli": "claude", "exit_code": 1}}  # fmt: skip
    path.write_text(json.dumps({**eval_json(SFT), "status": "no_model", "metrics": None, "agent_run": run}))
    cell = read_cell(path)
    assert cause_text(cell).startswith("overloaded: the agent's CLI gave up on an overloaded")
    assert _state_of(cell) == ("Done", "no final model (cause overloaded)")


def test_rerun_names_the_key_to_fix_leaves_accepted_cells_and_drops_the_latest_runs_double_dash(cfg, tmp_path):  # noqa: F811
    mine, sft = Cell("ptflow--tiny-llama-h64", "add", "my_agent_x"), Cell("ptflow--tiny-llama-h64", "add", "sft")
    refused = CellStatus(mine.model, mine.eval, mine.agent, "Error")
    refused.cause = causes.Diagnosis(
        "api_key_refused", "train", "seen", facts={"key_var": "OPENCODE_API_KEY"}
    ).to_dict()
    accepted = status_of(sft.key, "eval_failed", "evaluate")
    accepted.accepted = "the provider's limit (ops, 2026-11-29)"  # scoring.overrides' accepted, as status reads it
    plan = rerun.plan_rerun(cfg, LAYOUT, tmp_path, [refused, accepted], ["api_key_refused", "eval_failed"], [])
    assert plan.cells == [] and plan.accepted == [sft.key]
    text = "\n".join(rerun.describe(plan))
    assert (
        "refused: 1 cell(s) of cause api_key_refused: set a valid OPENCODE_API_KEY, then ptflow rerun --fixed" in text
    )
    assert f"accepted as failures, not rerun: {sft.key}" in text
    # a latest run whose targets followed "--" (as tests and scripts write it): the rerun's options stay options
    latest = ["/x/snakemake", "--configfile", "a.yaml", "--", "results/cells/m/add/sft/eval.json"]
    assert rerun.snakemake_args([], latest, tmp_path, Path("/wf/Snakefile"))[:2] == ["--configfile", "a.yaml"]
    assert "--" not in rerun.snakemake_args([], latest, tmp_path, Path("/wf/Snakefile"))
