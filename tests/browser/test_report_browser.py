"""The report in a real headless Chromium (Debian's package, driven by Playwright): the page loads without console
errors, the score table has the right rows, and a cell's log link opens inspect's bundled viewer showing the log.

Screenshots go to ``$PTFLOW_TEST_ARTIFACTS`` (if set) or the test's tmp dir. As root the test installs Debian's
chromium when it is missing (playwright comes with envs/requirements-dev.txt; never ``playwright install``: it
downloads a browser). Without them the test fails (with or without CI): this kind of machine has them.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ptflow.ops.report_server import serve
from ptflow.results.report_site import build_site
from tests.support.inspect_log import make_inspect_log
from tests.support.report_matrix import build_matrix

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
INSTALL = "apt-get install -y chromium && pip install playwright"


def _unavailable(reason: str):
    pytest.fail(f"{reason}; the browser test must run: {INSTALL}", pytrace=False)


@pytest.fixture(scope="module")
def chromium_path() -> str:
    path = os.environ.get("PTFLOW_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path and os.geteuid() == 0:  # as the Slurm and podman tests install theirs: Debian's package
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], env=env, capture_output=True)
        path = shutil.which("chromium")
    if not path or not Path(path).is_file():
        _unavailable("no chromium executable on PATH (or in $PTFLOW_CHROMIUM)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("the playwright Python package is not installed")
    return path


@pytest.fixture
def artifacts(tmp_path) -> Path:
    out = Path(os.environ.get("PTFLOW_TEST_ARTIFACTS") or tmp_path / "artifacts")
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def browser_context(chromium_path, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # a fresh profile per test: nothing cached from an earlier run can make the viewer work by accident
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=chromium_path,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


def watch(page) -> list[str]:
    """Console errors and uncaught exceptions of a page, collected as they happen."""
    errors = []
    page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    return errors


@pytest.fixture(scope="module")
def site(chromium_path, tmp_path_factory):
    """Built before Playwright starts: inspect-ai runs its own event loop, which Playwright's sync API forbids.
    (Asks for chromium_path first, so a missing browser fails before any build.)"""
    root = tmp_path_factory.mktemp("browser")
    log = make_inspect_log(root / "inspect_src")
    result, states = build_matrix(root / "results", log)
    return build_site(result, root / "results" / "report", states=states, log=lambda *_: None).parent, result


def test_report_in_chromium(site, browser_context, artifacts):
    out, result = site

    # the report itself needs no server
    page = browser_context.new_page()
    errors = watch(page)
    page.goto((out / "index.html").as_uri())
    assert page.locator("#score-table tbody tr").count() == len(result.agents)
    assert errors == [], errors

    server = serve(out)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        page = browser_context.new_page()
        errors = watch(page)
        page.goto(base + "index.html")
        ranked = [a.agent_id for a in sorted(result.agents, key=lambda a: -a.score)]
        rows = page.locator("#score-table tbody tr")
        assert [rows.nth(i).get_attribute("data-agent") for i in range(rows.count())] == ranked
        claude = result.agent("claude-opus-4-5")
        first = rows.nth(0).locator("td")
        assert first.nth(1).inner_text() == "claude-opus-4-5"
        assert first.nth(2).inner_text() == f"{claude.score:.3f} ± {claude.stderr:.3f}"
        assert page.locator("figure.heatmap").count() == len(result.agents)
        page.screenshot(path=str(artifacts / "report-index.png"), full_page=True)
        assert errors == [], errors

        # a cell: its page, then its log in the viewer
        page.locator("a.cell-link", has_text="Qwen--Qwen3-1.7B-Base/gsm8k/claude-opus-4-5").click()
        page.wait_for_load_state()
        assert "trained on the test split" in page.locator("#judge").inner_text()
        assert page.locator("#trace").get_by_text("python train.py --epochs 2").count() == 1
        page.screenshot(path=str(artifacts / "report-cell.png"), full_page=True)
        page.locator("#log-link").click()
        # the viewer renders the log's samples: the mock model's answers and the wrong one
        page.get_by_text("The answer is 9").wait_for()
        assert page.url.endswith("#/logs/Qwen--Qwen3-1.7B-Base/gsm8k/claude-opus-4-5/run1/gsm8k.eval")
        assert page.get_by_text("The answer is 2").count() >= 1
        page.screenshot(path=str(artifacts / "report-viewer.png"))
        assert errors == [], errors
    finally:
        server.shutdown()
        server.server_close()
    assert (artifacts / "report-viewer.png").stat().st_size > 0
