import os
import signal
import uuid
from pathlib import Path

import pytest

from ptflow.config.load import merged_config
from tests.support import skip_guard
from tests.support.slurm_session import SESSION_ENV, stop_if_ours

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).parent


# The signal dispositions this test process started with. Job code run in-process (ptflow.jobenv.rule_log) ignores
# Slurm's warning for the whole process, as it should in a job; an ignored signal stays ignored in every child, and a
# bash that starts with USR1 ignored cannot trap it. Left over, it made a later test's supervised batch script deaf to
# the warning (tests/unit/test_supervise.py failed in CI with exit 0, on whichever worker ran such a test first).
_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_STARTED_WITH = {sig: signal.getsignal(sig) for sig in _SIGNALS}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each test, and the fixtures it sets up first (a Slurm cluster's daemons), start with the session's signal
    dispositions, whatever an earlier test's in-process job code set."""
    for sig, handler in _STARTED_WITH.items():
        if handler is not None:
            signal.signal(sig, handler)


@pytest.fixture
def default_raw() -> dict:
    """The embedded default config as a fresh dict, to mutate in a test."""
    return merged_config(REPO)


def pytest_configure(config: pytest.Config) -> None:
    """The test session's id, for every pytest-xdist worker (they inherit this environment): a Slurm cluster a worker
    starts belongs to it (tests/slurm/conftest.py). A skip for a reason not on the short allowed list fails the
    session (tests/support/skip_guard.py)."""
    if not hasattr(config, "workerinput"):
        os.environ.setdefault(SESSION_ENV, uuid.uuid4().hex)
    skip_guard.register(config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller (or a run without workers)
        stop_if_ours(os.environ.get(SESSION_ENV, ""))


def pytest_itemcollected(item: pytest.Item) -> None:
    if item.path.relative_to(TESTS).parts[0] == "slurm":
        item.add_marker(pytest.mark.slurm)


# Unit modules whose module-scoped fixture is worth keeping on one worker: the contract module's tiny Snakemake runs
# and the plan module's `ptflow plan` runs, read by several tests each, and the golden params module's warm-up (one
# plan before its 49 forked plans), the one-verdict matrix (196 cells scored, reported, exported and read by status,
# 10 s alone; built on two workers in a five-worker `make test`) and the report site's matrix. Spread one test per
# scope, each worker that drew one of their tests built the fixture again. Modules that run real evaluations, trainings
# or workflow jobs are not unit tests (they would keep `make check` past its two minutes): they live in
# tests/integration, one scope each.
UNIT_MODULE_SCOPES = (  # the longest first (LONG_FIRST)
    "tests/unit/test_job_params.py",
    "tests/unit/test_plan.py",
    "tests/unit/test_snakemake_contract.py",
    "tests/unit/test_one_verdict.py",
    "tests/unit/test_report_site.py",
)


@pytest.fixture(scope="module")
def warm_kit(tmp_path_factory):
    """The module's evaluations start their kit runs warm, as on the local profile (ptflow.warmstart, the default's
    `warm_start`): still one process per run, forked from a zygote that imported inspect-ai and torch once for the
    module, not once per run. Runs share that zygote only when their environments are equal (so, e.g., not
    PYTEST_CURRENT_TEST). A module that uses it runs on one worker (tests/integration: one scope per module)."""
    from ptflow import warmstart
    from ptflow.stages import WARM_IMPORTS

    proc = warmstart.start(list(WARM_IMPORTS), log=tmp_path_factory.mktemp("warm") / "broker.log")
    yield
    warmstart.stop(proc)


def suite_scope(nodeid: str) -> str:
    """What must run on one pytest-xdist worker: each module that runs the workflow or uses the Slurm cluster (its
    module-scoped run is made once; the cluster itself is shared by all workers), and UNIT_MODULE_SCOPES; any other
    unit test is a scope of its own."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/unit/") and path not in UNIT_MODULE_SCOPES:
        return nodeid
    return path


# The modules whose module-scoped workflow runs take minutes (`--durations` of `make test`). They start first, so
# that the short scopes fill the workers at the end instead of one long module running alone in the tail. The suite is
# CPU-bound on 2 cores, so the modules that mostly wait go out where their waits overlap CPU-bound work:
# - The controller outage takes the whole cluster (EXCLUSIVE_CLUSTER: the other Slurm modules wait for it) and sleeps
#   through a 90-s outage. First, beside the three local workflow modules (no cluster, all CPU), its wait is filled;
#   last, it ran alone in the suite's tail for four minutes with the CPUs mostly idle.
# - Then the Slurm modules that wait on time limits, requeue holds and Ray start-up (the Ray launcher's and the status
#   commands'); last in the run, the Ray module left the CPUs 6-68 % busy for its final 80 s.
LONG_FIRST = (
    "tests/slurm/test_controller_outage_on_slurm.py",
    "tests/e2e/test_default_matrix.py",
    "tests/e2e/test_agent_cells.py",
    "tests/e2e/test_posttrainbench_offline.py",
    # the local workflow modules of issues 48-50 (45-110 s each, CPU-bound)
    "tests/e2e/test_repeats.py",
    "tests/e2e/test_judge_panel.py",
    "tests/e2e/test_spend_budget.py",
    "tests/e2e/test_seeds_in_train_job.py",
    "tests/slurm/test_workflow_on_slurm.py",
    "tests/slurm/test_resume_on_slurm.py",
    "tests/slurm/test_ray_launcher.py",
    "tests/slurm/test_cli_status.py",
    # after the status test has made its queue: its "Pending" wait timed out once beside this module's jobs
    "tests/slurm/test_real_agent_clis_on_slurm.py",
    "tests/slurm/test_posttrainbench_checkout_on_slurm.py",
    # issue 58: a main checkout end to end (22 jobs, 19 of them on Slurm; ~165 s alone, mostly waiting on them)
    "tests/slurm/test_posttrainbench_main_on_slurm.py",
    # issues 48 and 50: 2.5-4 minutes each, mostly waiting on their Slurm jobs (a repeated cell's seeds, five cells
    # failing for their causes and one rerun); in the tail they ran alone
    "tests/slurm/test_repeats_and_seeds_on_slurm.py",
    "tests/slurm/test_failure_causes_on_slurm.py",
    # 3-4 minutes of waiting on its caps: not in the tail (it ended the first full run of issue 34's second cut alone,
    # 160 s after the other three workers had finished)
    "tests/slurm/test_cluster_limits_on_slurm.py",
    # the PostTrainBench cache module (90-108 CPU-s over 190-260 s on one worker): dealt out in collection order, it
    # ended three five-worker runs of issue 56's tree alone, one core idle for its last 15-55 s; here it goes out while
    # the Slurm modules above wait on their jobs (the CPUs dipped to 8-50 % busy there, every worker in such a wait)
    "tests/integration/test_posttrainbench_cache.py",
    "tests/integration/test_agent_cli_faults.py",
    # each real CLI's stalled stream waits out its 60-s timeout at next to no CPU: in the tail, the three of them left
    # the CPUs 50-87 % busy for the run's last two minutes
    "tests/integration/test_real_cli_claude.py",
    "tests/integration/test_real_cli_codex.py",
    "tests/integration/test_real_cli_gemini.py",
    "tests/slurm/test_documents_on_slurm.py",
    # the unit modules that are one scope each (UNIT_MODULE_SCOPES, 30-60 s on one worker): first among the unit
    # tests, or `make check`'s other worker idles while one of them ends the run
    *UNIT_MODULE_SCOPES,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """LONG_FIRST's modules first, in its order; every other test keeps its place (a stable sort)."""
    rank = {path: i for i, path in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(LONG_FIRST)))


def pytest_xdist_make_scheduler(config, log):
    """`make test` runs the suite on several workers (-n). pytest-xdist 3.8's --dist loadgroup does not group under
    pytest 9 (it rewrites a node id attribute pytest 9 no longer reads), so scopes are given by the documented
    LoadScopeScheduling._split_scope hook instead. Scopes go out in collection order (pytest_collection_modifyitems),
    not xdist's default of the most tests first."""
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return suite_scope(nodeid)

    config.option.loadscopereorder = False
    return SuiteScheduling(config, log)
