"""ptflow.warmstart: a local run's jobs continue in processes forked from warm zygotes, and behave as if cold.

Real processes throughout: a broker started as the driver starts it, jobs run as the workflow runs them (a script
that calls hand_over(), a script started through script_argv), signals and kills from outside.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ptflow import warmstart

SRC = str(Path(warmstart.__file__).resolve().parents[1])

# A module the zygotes preload: it records, at import time, a variable of the environment it was imported in.
PRELOADED = """
import os
SEEN_AT_IMPORT = os.environ.get("WARM_TEST_VALUE")
"""

# A job: says whether it started warm (its preloaded module already there) and what that module saw at import.
JOB = """
import atexit, os, sys
warm = "warm_test_preloaded" in sys.modules
import warm_test_preloaded
print(json.dumps({"warm": warm, "seen": warm_test_preloaded.SEEN_AT_IMPORT, "env": os.environ.get("WARM_TEST_VALUE"),
                  "path0": sys.path[0], "argv": sys.argv, "pid": os.getpid()}), flush=True)
atexit.register(lambda: print("atexit ran", file=sys.stderr, flush=True))
action = sys.argv[1] if len(sys.argv) > 1 else "ok"
if action == "exit3":
    sys.exit(3)
if action == "raise":
    raise RuntimeError("job failed on purpose")
if action == "message":
    sys.exit("a message instead of a status")
if action == "wait-term":
    import signal, time
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
    Path(sys.argv[2]).write_text("ready")
    time.sleep(60)
if action == "sleep":
    import time
    Path(sys.argv[2]).write_text(str(os.getpid()))
    time.sleep(60)
"""


@pytest.fixture
def lib(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "warm_test_preloaded.py").write_text(PRELOADED)
    job = tmp_path / "job.py"
    job.write_text("import json\nfrom pathlib import Path\n" + JOB)
    return tmp_path


@pytest.fixture
def broker(lib, monkeypatch):
    """A broker as a local run's driver starts it; jobs find it through the environment."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, str(lib / "lib")]))
    proc = warmstart.start(["warm_test_preloaded"], log=lib / "broker.log")
    yield lib / "broker.log"
    warmstart.stop(proc)
    assert proc.returncode is not None


def run_job(lib, *args, value="a", **kw):
    env = {**os.environ, "WARM_TEST_VALUE": value}
    argv = warmstart.script_argv(lib / "job.py", list(args), env)
    return subprocess.run(argv, env=env, capture_output=True, text=True, cwd=lib, timeout=120, **kw)


def report(proc) -> dict:
    return json.loads(proc.stdout.splitlines()[0])


def test_jobs_run_warm_with_modules_imported_under_their_own_environment(lib, broker):
    first, again, other = run_job(lib, value="a"), run_job(lib, value="a"), run_job(lib, value="b")
    for proc, value in ((first, "a"), (again, "a"), (other, "b")):
        assert proc.returncode == 0, proc.stderr
        seen = report(proc)
        assert seen["warm"] is True
        # imported in a zygote whose environment was the job's own: what the module read is what a cold job reads
        assert seen["seen"] == value and seen["env"] == value
        assert seen["path0"] == str(lib)  # as `python job.py` has it: the script's directory first
        assert seen["argv"] == [str(lib / "job.py")]
        assert "atexit ran" in proc.stderr
    log = broker.read_text()
    assert log.count("for a new job environment") == 2  # a and b; the second a reused the first zygote
    assert "differs in: WARM_TEST_VALUE" in log and "b'" not in log  # names in the log, never values
    assert log.count("job.py runs warm") == 3


def test_exit_status_and_errors_are_the_jobs_own(lib, broker):
    assert run_job(lib, "exit3").returncode == 3
    failed = run_job(lib, "raise")
    assert failed.returncode == 1 and "RuntimeError: job failed on purpose" in failed.stderr
    message = run_job(lib, "message")
    assert message.returncode == 1 and "a message instead of a status" in message.stderr


def test_a_signal_to_the_job_reaches_the_warm_child(lib, broker):
    ready = lib / "ready"
    env = {**os.environ, "WARM_TEST_VALUE": "a"}
    argv = warmstart.script_argv(lib / "job.py", ["wait-term", str(ready)], env)
    proc = subprocess.Popen(argv, env=env, cwd=lib, stdout=subprocess.PIPE, text=True)
    wait_for(ready.is_file, timeout=60, what="the warm job to start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 7  # the child's own handler ran and chose the status


def test_a_killed_job_takes_its_warm_child_with_it(lib, broker):
    pid_file = lib / "pid"
    env = {**os.environ, "WARM_TEST_VALUE": "a"}
    argv = warmstart.script_argv(lib / "job.py", ["sleep", str(pid_file)], env)
    proc = subprocess.Popen(argv, env=env, cwd=lib, stdout=subprocess.DEVNULL)
    wait_for(pid_file.is_file, timeout=60, what="the warm job to start")
    child = int(pid_file.read_text())
    assert child != proc.pid  # the work runs in the forked child, not the job's own process
    proc.kill()  # SIGKILL: nothing to forward; the child's watchdog sees the job gone
    proc.wait()
    wait_for(lambda: not _alive(child), timeout=30, what=f"the warm child {child} to be killed")


def test_a_script_that_hands_over_runs_once_and_warm(lib, broker):
    """The workflow scripts' way: hand_over() as the first statement; in the child the same call returns."""
    script = lib / "adapter.py"
    script.write_text(
        "import sys\nfrom ptflow.warmstart import hand_over\nhand_over()\n"
        "print('warm' if 'warm_test_preloaded' in sys.modules else 'cold')\n"
    )
    env = {**os.environ, "WARM_TEST_VALUE": "a"}
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "warm\n"), proc.stderr
    assert broker.read_text().count("adapter.py runs warm") == 1  # no second hand-over from inside the child


def test_without_a_broker_jobs_run_cold_and_unchanged(lib, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, str(lib / "lib")]))
    monkeypatch.delenv(warmstart.SOCKET_ENV, raising=False)
    assert warmstart.script_argv(lib / "job.py", ["x"]) == [sys.executable, str(lib / "job.py"), "x"]
    proc = run_job(lib)
    assert proc.returncode == 0 and report(proc)["warm"] is False
    # a broker that has gone away: the launcher runs the script cold, the same way
    env = {**os.environ, "WARM_TEST_VALUE": "a", warmstart.SOCKET_ENV: str(lib / "gone" / "socket")}
    argv = warmstart.script_argv(lib / "job.py", [], env)
    assert argv[1:3] == ["-m", "ptflow.warmstart"]
    gone = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=lib, timeout=120)
    assert gone.returncode == 0 and report(gone) | {"pid": 0} == report(proc) | {"pid": 0}


def test_another_python_is_declined(broker):
    message = {"prefix": "/elsewhere/conda-env", "executable": "/elsewhere/conda-env/bin/python", "env": {}, "path": []}
    assert warmstart._ask(os.environ[warmstart.SOCKET_ENV], message) == "decline"


def test_the_broker_stops_when_its_driver_is_gone(lib, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, str(lib / "lib")]))
    code = (
        "import time\nfrom ptflow import warmstart\n"
        f"warmstart.start(['warm_test_preloaded'], log={str(lib / 'b.log')!r})\n"
        "print('up', flush=True)\ntime.sleep(600)"
    )
    driver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert driver.stdout.readline() == "up\n"
    brokers = _brokers_of(driver.pid)
    assert len(brokers) == 1
    driver.kill()
    driver.wait()
    wait_for(lambda: not _alive(brokers[0]), timeout=30, what="the orphaned broker to exit")


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _brokers_of(parent: int) -> list[int]:
    found = []
    deadline = time.monotonic() + 30
    while not found and time.monotonic() < deadline:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"ptflow.warmstart" in cmd and b"serve" in cmd and str(parent).encode() in cmd:
                found.append(int(proc.name))
        time.sleep(0.1)
    return found


def test_a_companion_zygote_is_started_ahead_and_its_scripts_run_warm_in_it(lib, monkeypatch):
    """The evaluation kit's way: a job starts a script with changes to its own environment (changed_env); the broker
    forks that script's zygote together with the job's, so the script finds it imported already."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, str(lib / "lib")]))
    changes = {"set": {"WARM_TEST_VALUE": "kit"}, "prepend": {"PATH": str(lib / "kit-bin")}}
    log = lib / "broker.log"
    proc = warmstart.start(["warm_test_preloaded"], log=log, companions=[{"name": "the test kit", "changes": changes}])
    try:
        script = lib / "adapter.py"
        script.write_text("from ptflow.warmstart import hand_over\nhand_over()\nprint('job done')\n")
        job_env = {**os.environ, "WARM_TEST_VALUE": "a"}
        job = subprocess.run([sys.executable, str(script)], env=job_env, capture_output=True, text=True, timeout=120)
        assert (job.returncode, job.stdout) == (0, "job done\n"), job.stderr
        # the broker's lines only: a zygote's own lines (its imports) interleave with them in any order
        forks = [line for line in log.read_text().splitlines() if line.startswith("warm start: zygote ")]
        assert forks[0].startswith("warm start: zygote 1 for a new job environment"), forks
        # forked at once with the job's zygote, before any script of the companion asked for it
        assert forks[1].startswith("warm start: zygote 2 for the test kit") and "WARM_TEST_VALUE" in forks[1], forks
        kit_env = warmstart.changed_env(job_env, changes)
        assert kit_env["PATH"].split(os.pathsep)[0] == str(lib / "kit-bin")
        kit = subprocess.run(
            warmstart.script_argv(lib / "job.py", [], kit_env), env=kit_env, capture_output=True, text=True, cwd=lib
        )
        seen = report(kit)
        assert kit.returncode == 0 and seen["warm"] is True and seen["seen"] == "kit", kit.stderr
        text = log.read_text()
        assert "zygote 3" not in text  # the companion's script went to the zygote started ahead, not a new one
        assert text.count("job.py runs warm") == 1
    finally:
        warmstart.stop(proc)


def test_the_driver_presets_what_torch_sets_at_import(tmp_path):
    """warm_import_env: torch sets TORCHINDUCTOR_CACHE_DIR when first asked for its cache (during the zygote's
    imports); with the driver's value set beforehand the job's environment stays as it was, so the kit's companion
    zygote, predicted from it, is the one the kit asks for."""
    from ptflow.stages import warm_import_env

    code = (
        "import json, os\nbefore = dict(os.environ)\nfrom torch._inductor.runtime.cache_dir_utils import cache_dir\n"
        "cache_dir()\nprint(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    unset = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(unset.stdout) == warm_import_env()  # what torch sets, by name and value
    preset = subprocess.run(
        [sys.executable, "-c", code], env={**env, **warm_import_env()}, capture_output=True, text=True, check=True
    )
    assert json.loads(preset.stdout) == {}


def test_jobs_differing_only_in_their_own_facts_file_share_a_zygote():
    """Each job exports its facts file (ptflow.jobenv.FACTS_ENV) to its children: a per-job value, which must not
    fork a zygote per job (each imports torch for seconds); another variable still does."""
    from ptflow.jobenv import FACTS_ENV
    from ptflow.warmstart import environment_key

    def message(**env):
        return {"prefix": "/venv", "env": {"PATH": "/bin", **env}, "path": ["/src"]}

    one, two = message(**{FACTS_ENV: "a.log.facts.json"}), message(**{FACTS_ENV: "b.log.facts.json"})
    assert environment_key(one) == environment_key(two) == environment_key(message())
    assert environment_key(message(HF_HUB_OFFLINE="1")) != environment_key(message())
