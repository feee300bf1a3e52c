"""The ``ptflow`` command's help says what its commands show and take, read from where those are defined: ``status``
from ``ptflow.ops.status`` (``SHOWS``, ``COLUMNS``, the cell states) and checked against the text it prints,
``rerun --cause`` from the causes' one vocabulary (``ptflow.results.causes.CAUSES``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ptflow.ops import cli, status
from ptflow.ops.spend_view import SpendView
from ptflow.results.causes import CAUSES, Diagnosis
from ptflow.results.cell_state import DONE, ERROR, STATES, CellStatus


def _help(command: str) -> str:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return " ".join(sub.format_help().split())  # wrapping undone


def test_status_help_says_what_it_shows():
    text = _help("status")
    for line in status.SHOWS:
        assert " ".join(line.split()) in text
    assert all(column in text for column in status.COLUMNS) and all(state in text for state in STATES)
    assert all(key in text for key in cli.STATUS_JSON)


# the lines ptflow status prints besides the rows and the counts, each kind with the words its help uses for it
PRINTED = {
    "API spend of": "API spend",
    "override ": "verdict override",
    "accepted ": "accepted failure",
    "verdict ": "one verdict",
    "cause ": "grouped by cause",
    "  ": "each cell with what was seen",  # a cause's cells
    "spend so far:": "spend so far against the caps",
    "not started:": "matrix spend cap left unstarted",
}


def test_every_kind_of_line_status_prints_is_in_its_help():
    cause = Diagnosis("rate_limited", "train", "train job 7: HTTP 429").to_dict()
    failed = CellStatus("m", "e", "a", ERROR, cause=cause)
    done = CellStatus("m", "e", "b", DONE, api_usage={"input_tokens": 10, "output_tokens": 2, "usd": 0.5},
                      override="contamination=false (J. Doe, 2026-11-30): reads test.jsonl to count rows",
                      accepted="no GPU that week (J. Doe, 2026-11-30)", judge="clean — gpt 0/1")  # fmt: skip
    snap = status.Snapshot([failed, done], {}, {}, [], False)
    spend = SpendView(spent_usd=0.5, priced_cells=1, agent_cells=2, not_started=["m/e/c"])
    printed = status.table(snap).splitlines()[len(snap.cells) + 3 :] + spend.status_lines()
    kinds = {next((k for k in PRINTED if line.startswith(k)), line) for line in printed}
    assert kinds == set(PRINTED), "a kind of line ptflow status prints that its help (status.SHOWS) does not name"
    text = _help("status")
    assert [words for words in PRINTED.values() if words not in text] == []


def test_status_json_holds_what_its_help_names(tmp_path, capsys):
    assert cli.main(["status", "-d", str(tmp_path), "--json", "--no-png"]) == 0
    assert tuple(json.loads(capsys.readouterr().out)) == cli.STATUS_JSON


def test_rerun_help_lists_every_cause_from_the_one_vocabulary():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["rerun"]
    listed = dict(re.findall(r"^  (\w+) +(\w+(?:, --fixed)?):", sub.format_help(), flags=re.M))
    assert listed == {c.name: c.step + ("" if c.rerun else ", --fixed") for c in CAUSES.values()}
    text = _help("rerun")
    assert all(" ".join(c.meaning.split()) in text for c in CAUSES.values())
    # read from CAUSES, never written again in the command's source (the names that are not plain words)
    source = Path(cli.__file__).read_text()
    assert [name for name in CAUSES if "_" in name and name in source] == []
