"""One run of a real agent CLI against the provider stand-in, as a cell runs it (a fresh private HOME written by
the CLI's ``write_home``, its fixed env, only the key it reads, the task dir as its working directory): the harness
of tests/integration/test_real_cli_*.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ptflow.stages.train.agent.clis import CLIS
from ptflow.stages.train.agent.clis.base import CellHome
from tests.support.providers import Faults, ProviderStandIn, Step

# The wall-clock limit of the stalled-stream tests: the stall comes at the second request, so the CLI must start and
# run its first step within it. 20 s sufficed alone but not with four workers on CI's 2 cores (gemini never reached
# its first step); a stalled stream is waited out whole, so this is also what each of those tests costs.
STALL_TIMEOUT = 60


@dataclass
class Run:
    rc: int
    seconds: float
    stdout: str
    stderr: str
    home: Path
    task: Path
    tmp: Path
    records: list[dict]
    started: float
    env: dict = field(default_factory=dict)
    key: str = ""

    def events(self) -> list[dict]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip().startswith("{")]

    def api_records(self, api: str) -> list[dict]:
        """The generation requests of one protocol (not its other calls)."""
        return [r for r in self.records if r.get("api") == api and not r.get("other")]

    def assert_spend_read_back(self, cli: str, api: str) -> None:
        """What ptflow reads of the CLI's stream output (``AgentCli.usage``) is what the provider stand-in served:
        each completed response costs 100 prompt and 10 output tokens (tests/support/providers)."""
        from ptflow.stages.train.agent.clis import CLIS

        served = [r for r in self.api_records(api) if r.get("status") == 200]
        spent = CLIS[cli].usage(self.events())
        assert served and spent is not None, (cli, served, spent)
        assert (spent.input_tokens, spent.output_tokens) == (100 * len(served), 10 * len(served)), (spent, served)

    def assert_key_nowhere(self) -> None:
        for top in (self.home, self.task, self.tmp):
            for path in top.rglob("*"):
                if path.is_file() and not path.is_symlink():
                    assert self.key.encode() not in path.read_bytes(), f"the API key was written to {path}"


def run_cli(
    cli: str,
    root: Path,
    bin_dir: Path,
    *,
    key: str,
    model: str,
    prompt: str,
    trajectory: list[Step],
    faults: Faults | None = None,
    timeout: int | None = None,
    argv: list[str] | None = None,
    url_suffix: str = "",
    as_root: bool | None = None,
    limit: int = 180,
) -> Run:
    """``timeout``: under timeout(1); ``argv``: another template than the CLI's command; ``url_suffix``: appended to
    the stand-in's URL for ``base_url``. Each run is its own session: claude 2.0.55 can signal its whole process
    group on the way out (kill(0, SIGTERM) seen under strace when it refuses root), which would take pytest along."""
    spec = CLIS[cli]
    home, task, tmp = root / "home", root / "task", root / "tmp"
    for d in (home, task, tmp):
        d.mkdir(parents=True)
    (task / "prompt.md").write_text(prompt + "\n")
    root_flag = os.geteuid() == 0 if as_root is None else as_root
    with ProviderStandIn(trajectory, faults=faults, expected_key=key) as api:
        cli_env = spec.write_home(
            CellHome(host_home=home, home=str(home), task_dir=str(task)),
            {"model": model, "task_dir": str(task), "base_url": api.url + url_suffix, "root": root_flag},
        )
        node_dir = str(Path(shutil.which("node") or "/usr/bin/node").parent)
        env = {
            "PATH": os.pathsep.join([str(bin_dir), node_dir, "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(home),
            "TMPDIR": str(tmp),  # gemini-cli writes its error reports to os.tmpdir()
            "LANG": "C.UTF-8",
            spec.key_var: key,
            **spec.env,
            **cli_env,
        }
        command = [part.format(model=model, prompt=prompt) for part in (argv or spec.command)]
        if timeout is not None:
            command = ["timeout", str(timeout), *command]
        started = time.time()
        proc = subprocess.run(  # stdin: nothing, as a cell runs it (opencode reads a stdin not a TTY as prompt)
            command, cwd=task, env=env, capture_output=True, text=True, timeout=limit, start_new_session=True,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        seconds = time.time() - started
        records = list(api.records)
    return Run(proc.returncode, seconds, proc.stdout, proc.stderr, home, task, tmp, records, started, env, key)
