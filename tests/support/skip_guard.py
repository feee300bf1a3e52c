"""No silent skips: a test session that skipped a test for a reason not on ALLOWED_SKIPS ends non-zero, and says which
tests and why (tests/conftest.py registers it in the session's controller; under pytest-xdist every worker's reports
reach it there).

Only what this kind of machine cannot have may skip a test: the suite runs as root on a Debian machine that installs
what a test needs (Slurm, munge, MariaDB, podman, chromium, openssh-server: tests/support/apt.py), so a package, a
daemon or a cluster missing here is a fault of the machine or of the suite, and the test fails saying so. A new reason
to skip goes here, where it is read, not into a fixture.
"""

from __future__ import annotations

import pytest

# The reasons a test may skip for: the start of its skip reason. One entry per thing this kind of machine cannot have.
# No test skips for one today; a GPU check (bench/gpu_check.py) runs where there is a GPU, outside the suite.
ALLOWED_SKIPS = ("no GPU on this machine",)  # the suite's machines (the 2-core test machine, CI) have none


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """Why a report (a test's phase, or a collector) skipped; None if it did not. An xfail is a proof not made
    either: it reads ``xfail: <reason>``."""
    if not report.skipped:
        return None
    if hasattr(report, "wasxfail"):
        return f"xfail: {report.wasxfail}".rstrip(": ")
    longrepr = report.longrepr
    # (path, lineno, "Skipped: reason"); through pytest-xdist the tuple may come back as a list
    message = longrepr[2] if isinstance(longrepr, (tuple, list)) and len(longrepr) == 3 else str(longrepr)
    return str(message).removeprefix("Skipped: ")


def allowed(reason: str) -> bool:
    return reason.startswith(ALLOWED_SKIPS)


class SkipGuard:
    def __init__(self) -> None:
        self.unexpected: dict[str, str] = {}  # node id -> reason, in the order they came

    def _see(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        reason = skip_reason(report)
        if reason is not None and not allowed(reason):
            self.unexpected.setdefault(report.nodeid or "<session>", reason)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._see(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._see(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.unexpected and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.unexpected:
            return
        terminalreporter.section("skips not allowed (tests/support/skip_guard.py, ALLOWED_SKIPS)", red=True)
        for nodeid, reason in self.unexpected.items():
            terminalreporter.line(f"{nodeid}: {reason}")
        terminalreporter.line(
            f"{len(self.unexpected)} skipped for a reason not on ALLOWED_SKIPS: the session fails",
            red=True,
        )


def register(config: pytest.Config) -> None:
    """In the session's controller (or a run without workers): every report of the session reaches it."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(SkipGuard(), "ptflow-skip-guard")
