"""What the Slurm benches share: the test cluster, Snakemake runs that always end, and slurmctld's job records.

Every bench run leaves the cluster as it found it: Snakemake is stopped with SIGINT (it ignores SIGTERM while it
waits on jobs), killed if it does not stop, and every job the run submitted is cancelled (the plugin's by the run id,
ptflow's own by their working directory), so a shared cluster never keeps a bench's held or retried jobs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
WORK_ROOT = Path("/var/lib/ptflow-tests")  # shared with the compute "nodes"; preflight refuses node-local /tmp
_FIELD = re.compile(r"(\w[\w:/]*)=(\S*)")


def attach():
    """The running test cluster (PTFLOW_SLURM_EXISTING=1: the one configured here), else one started for the bench.
    Returns (cluster, started_here)."""
    sys.path.insert(0, str(REPO))
    from tests.support.local_slurm import LocalSlurmCluster

    if os.environ.get("PTFLOW_SLURM_EXISTING") == "1":
        return LocalSlurmCluster.existing().start(), False
    cluster = LocalSlurmCluster()
    if cluster.is_running():
        return LocalSlurmCluster.existing().start(), False
    return cluster.start(), True


def scontrol_jobs(env: dict) -> list[dict[str, str]]:
    """Every job slurmctld still holds (MinJobAge keeps finished ones), as Key=Value dicts."""
    out = subprocess.run(
        ["scontrol", "show", "job", "-o"], capture_output=True, text=True, env={**os.environ, **env}
    ).stdout
    return [dict(_FIELD.findall(line)) for line in out.splitlines() if line.startswith("JobId=")]


def run_id_of(work: Path) -> str | None:
    """The plugin names every job of a run after the run's UUID, which Snakemake logs."""
    for log in sorted((work / ".snakemake" / "log").glob("*.log")):
        m = re.search(r"SLURM run ID: (\S+)", log.read_text(errors="replace"))
        if m:
            return m.group(1)
    return None


class SnakemakeRun:
    """One Snakemake run in ``work`` (output to a file, never an unread pipe: a full pipe blocks Snakemake's
    logging and with it every submission)."""

    def __init__(self, work: Path, env: dict, args: list[str], snakefile: Path = REPO / "Snakefile"):
        self.work, self.env = work, {**os.environ, **env}
        cmd = [SNAKEMAKE, "-s", str(snakefile), "--directory", str(work), "--profile", str(REPO / "profiles/slurm")]
        self.out_path = work / "snakemake.out"
        self._out = open(self.out_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([*cmd, *args], cwd=work, env=self.env, stdout=self._out, stderr=subprocess.STDOUT)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop Snakemake (SIGINT, then SIGKILL) and cancel whatever this run submitted."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()
        self.cancel_leftovers()

    def cancel_leftovers(self) -> None:
        run_id = run_id_of(self.work)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            live = [
                j["JobId"]
                for j in scontrol_jobs(self.env)
                if (j.get("JobName") == run_id or j.get("WorkDir", "").startswith(str(self.work)))
                and j.get("JobState") in ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED", "CONFIGURING")
            ]
            if not live:
                return
            subprocess.run(["scancel", *live], env=self.env, capture_output=True)
            time.sleep(1)
        print(f"warning: jobs of {self.work} still live after scancel", file=sys.stderr)

    def tail(self, n: int = 3000) -> str:
        return self.out_path.read_text(errors="replace")[-n:]
