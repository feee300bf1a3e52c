"""tests/support/skip_guard.py in real pytest sessions, with and without pytest-xdist workers: a skip whose reason is
not on ALLOWED_SKIPS fails the session and is named, one that is on it does not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.skip_guard import ALLOWED_SKIPS

CONFTEST = """
from tests.support import skip_guard


def pytest_configure(config):
    skip_guard.register(config)
"""
ALLOWED = f"""
import pytest


def test_passes():
    pass


def test_needs_a_gpu():
    pytest.skip({ALLOWED_SKIPS[0] + ": the trainer's bf16 path"!r})
"""
NOT_ALLOWED = {
    "test_fixture.py": """
import pytest


@pytest.fixture(scope="module")
def daemon():
    pytest.skip("sshd unavailable: not installed")


def test_a(daemon):
    pass


def test_b(daemon):
    pass
""",
    "test_call.py": """
import pytest


def test_inside():
    pytest.skip("no accounting")


@pytest.mark.skipif(True, reason="not root")
def test_marked():
    pass
""",
    "test_module.py": """
import pytest

pytest.importorskip("ptflow_no_such_module_46")


def test_never_collected():
    pass
""",
}


def _session(tmp_path: Path, files: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    for name, text in {"conftest.py": CONFTEST, **files}.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(REPO)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_an_allowed_skip_keeps_the_session_green(tmp_path):
    run = _session(tmp_path, {"test_allowed.py": ALLOWED}, "-n", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed, 1 skipped" in run.stdout and "skips not allowed" not in run.stdout


@pytest.mark.parametrize("workers", [["-n", "2"], []], ids=["xdist", "one-process"])
def test_any_other_skip_fails_the_session_and_is_named(tmp_path, workers):
    run = _session(tmp_path, NOT_ALLOWED, *workers)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "skips not allowed (tests/support/skip_guard.py, ALLOWED_SKIPS)" in out
    for line in (
        "test_fixture.py::test_a: sshd unavailable: not installed",  # a fixture's skip: setup reports
        "test_fixture.py::test_b: sshd unavailable: not installed",
        "test_call.py::test_inside: no accounting",  # in the test itself: the call's report
        "test_call.py::test_marked: not root",  # a skipif mark
        "test_module.py: could not import 'ptflow_no_such_module_46'",  # a whole module: the collector's report
    ):
        assert line in out, out
    assert "5 skipped for a reason not on ALLOWED_SKIPS: the session fails" in out
