"""The static report built from hand-made cells and a real inspect log (mockllm): files, links, content, the bundled
log viewer, the atomic rebuild and the range-capable server. The browser test (tests/browser) opens the same site."""

import json
import re
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from ptflow.ops.report_server import serve
from ptflow.results.cells import read_cell
from ptflow.results.report_site import build_site
from ptflow.results.scoring import rescored_scores, score
from ptflow.results.settings import Settings
from ptflow.results.tables import score_text
from tests.support.inspect_log import make_inspect_log
from tests.support.report_matrix import AGENTS, REFERENCE, build_matrix


class Links(HTMLParser):
    """Every href/src of a page, and the rows of the score table as text."""

    def __init__(self):
        super().__init__()
        self.links, self.rows, self._in_score, self._row = [], [], False, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.links += [a[k] for k in ("href", "src") if k in a]
        if tag == "table" and a.get("id") == "score-table":
            self._in_score = True
        elif self._in_score and tag == "tr":
            self._row = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_score = False
        elif tag == "tr" and self._row is not None:
            self.rows.append(" ".join(t for t in self._row if t))
            self._row = None

    def handle_data(self, data):
        if self._row is not None:
            self._row.append(data.strip())


def parse(path: Path) -> Links:
    p = Links()
    p.feed(path.read_text())
    return p


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    log = make_inspect_log(root / "inspect_src")
    result, states = build_matrix(root / "results", log)
    index = build_site(result, root / "results" / "report", states=states, log=lambda *_: None)
    return index.parent, result


def test_every_link_is_relative_and_resolves_inside_the_site(site):
    out, _ = site
    pages = [out / "index.html", *sorted((out / "cells").glob("*.html"))]
    assert len(pages) == 1 + 16
    for page in pages:
        for link in parse(page).links:
            if link == "data:,":
                continue
            parts = urlsplit(link)
            assert not parts.scheme and not parts.netloc and not link.startswith("/"), f"{page.name}: {link}"
            target = (page.parent / unquote(parts.path)).resolve()
            assert target.is_relative_to(out.resolve()) and target.is_file(), f"{page.name}: {link} -> {target}"
            if parts.fragment.startswith("/logs/"):  # a viewer route: the log it names is in the bundle
                assert (out / "viewer" / "logs" / unquote(parts.fragment[len("/logs/") :])).is_file()


def test_score_table_rows_match_the_score(site):
    out, result = site
    rows = parse(out / "index.html").rows
    assert rows[0].startswith("rank agent score gsm8k")
    ranked = sorted(result.agents, key=lambda a: -a.score)
    assert [r.split()[1] for r in rows[1:]] == [a.agent_id for a in ranked]
    codex = result.agent("codex-gpt-5.1-codex-max")
    assert codex.runs == 2 and f"{codex.score:.3f} ± {codex.sd:.3f} sd (2 runs; stderr {codex.stderr:.3f})" in rows[2]
    claude = result.agent("claude-opus-4-5")
    assert rows[1].startswith(f"1 claude-opus-4-5 {claude.score:.3f} ± {claude.stderr:.3f}")
    assert "1/4" in rows[1] and "8:00:00" in rows[1] and "80.0%" in rows[1]


def test_cell_page_shows_metric_judge_trace_time_and_log(site):
    out, _ = site
    page = out / "cells" / "Qwen--Qwen3-1.7B-Base__gsm8k__claude-opus-4-5__run1.html"
    text = page.read_text()
    assert "accuracy 0.630 ± 0.020 (n=100)" in text
    assert "flagged — contamination: trained on the test split" in text
    assert "fallback to the base model's zero-shot score (baseline cell)" in text
    assert "8:00:00 of 10:00:00 (80.0%)" in text
    assert "<strong>tool call <code>Bash</code></strong>" in text, "the trace is rendered as markdown"
    assert "<script>" not in text and "&lt;script&gt;alert" in text, "trace text is escaped"
    href = re.search(r'id="log-link" href="([^"]+)"', text).group(1)
    assert href == "../viewer/index.html#/logs/Qwen--Qwen3-1.7B-Base/gsm8k/claude-opus-4-5/run1/gsm8k.eval"
    no_model = (out / "cells" / "google--gemma-3-4b-pt__humaneval__codex-gpt-5.1-codex-max__run2.html").read_text()
    assert "no final model (budget exhausted)" in no_model and 'id="log-link"' not in no_model


def test_viewer_bundle_lists_every_log_and_names_no_local_path(site):
    out, result = site
    listing = json.loads((out / "viewer" / "logs" / "listing.json").read_text())
    assert len(listing) == sum(1 for c in result.cells if c.inspect_log) == 15
    assert {v["status"] for v in listing.values()} == {"success"}
    context = re.search(r'<script id="log_dir_context" type="application/json">(.*?)</script>',
                        (out / "viewer" / "index.html").read_text()).group(1)  # fmt: skip
    assert json.loads(context) == {"log_dir": "logs"}


def test_state_grid_shows_the_given_states(site):
    out, _ = site
    text = (out / "index.html").read_text()
    running = re.search(r'<td class="state state-running" title="([^"]*)"><a href="([^"]+)">Running</a>', text)
    assert running and running.group(1) == "evaluate attempt 1 on node002"
    assert running.group(2) == "cells/google--gemma-3-4b-pt__humaneval__codex-gpt-5.1-codex-max__run2.html"


def test_rebuild_replaces_the_site_whole(site, tmp_path):
    _, result = site
    out = tmp_path / "report"
    build_site(result, out, viewer=False, log=lambda *_: None)
    (out / "stale.html").write_text("from an older build")
    build_site(result, out, viewer=False, log=lambda *_: None)
    assert not (out / "stale.html").exists() and not (out / "viewer").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["report"], "no partial or old copies left beside it"
    assert "inspect log" not in (out / "index.html").read_text().split('id="cells"')[1].split("<footer>")[0]


def test_server_answers_range_requests(site):
    out, _ = site
    log = next((out / "viewer" / "logs").rglob("*.eval"))
    body = log.read_bytes()
    server = serve(out)
    url = f"http://127.0.0.1:{server.server_address[1]}/" + log.relative_to(out).as_posix()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD")) as r:
            assert r.headers["Accept-Ranges"] == "bytes" and int(r.headers["Content-Length"]) == len(body)
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Range": "bytes=0-9"})) as r:
            assert r.status == 206 and r.read() == body[:10]
            assert r.headers["Content-Range"] == f"bytes 0-9/{len(body)}"
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Range": "bytes=-22"})) as r:
            assert r.status == 206 and r.read() == body[-22:]  # a zip's end record, as the viewer reads it first
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(url, headers={"Range": f"bytes={len(body)}-"}))
        assert err.value.code == 416
    finally:
        server.shutdown()
        server.server_close()


def test_rescored_values_show_where_there_are_any(site, tmp_path):
    """Rule rescore's results (rescore/<scorer>.json beside eval.json, here the gsm8k cells'): the score table gets
    a column per scorer with each agent's rescored score, each rescored cell's page its rescored value beside the
    stored metric; a humaneval cell (not rescored) and the site without any rescoring show neither."""
    out, _ = site
    assert "rescored" not in (out / "index.html").read_text()
    assert not [p.name for p in (out / "cells").glob("*.html") if 'id="rescored"' in p.read_text()]

    result, _ = build_matrix(tmp_path / "results", make_inspect_log(tmp_path / "inspect_src"))
    for c in result.cells:
        if c.eval == "gsm8k" and c.metric is not None:
            (Path(c.cell_dir) / "rescore").mkdir()
            metrics = {"name": "accuracy", "value": round(c.metric.value - 0.03, 6), "stderr": 0.02, "n": 100}
            (Path(c.cell_dir) / "rescore" / "exact_numeric.json").write_text(json.dumps({"metrics": metrics}))
    settings = Settings(reference=REFERENCE, agent_order=AGENTS, gpus={"train": 1, "eval": 1})
    again = score([read_cell(c.eval_json, settings) for c in result.cells], settings)
    again.rescored = rescored_scores(again.cells, settings)
    index = build_site(again, tmp_path / "report", viewer=False, log=lambda *_: None)

    rows = parse(index).rows
    assert rows[0].startswith("rank agent score exact_numeric rescored gsm8k")
    rescored = again.rescored["exact_numeric"]
    for row in rows[1:]:
        agent = row.split()[1]
        assert f"{score_text(again.agent(agent))} {score_text(rescored[agent])} " in row, row
    assert rescored["claude-opus-4-5"].score < again.agent("claude-opus-4-5").score  # lower by the 0.03 on gsm8k
    assert 'id="rescored-note"' in index.read_text()
    cell = (index.parent / "cells" / "Qwen--Qwen3-1.7B-Base__gsm8k__claude-opus-4-5__run1.html").read_text()
    assert re.search(r'<td id="rescored">exact_numeric 0\.600 \(stored 0\.630\)', cell)
    assert "accuracy 0.630 ± 0.020 (n=100)" in cell, "the stored metric stays"
    other = (index.parent / "cells" / "Qwen--Qwen3-1.7B-Base__humaneval__claude-opus-4-5__run1.html").read_text()
    assert 'id="rescored"' not in other
