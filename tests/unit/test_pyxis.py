"""ptflow.cluster.infra_retry: rendezvous env, the pyxis srun command line (checked as text: no pyxis here),
status.json, failure classification and the resubmission policy.
Real-cluster proof: tests/slurm/test_pyxis_env_and_retry.py."""

from __future__ import annotations

import json

import pytest

from ptflow.cluster import infra_retry as pyxis
from ptflow.cluster import multinode, slurm
from ptflow.config.sites import load_site
from tests.conftest import REPO

SITES = REPO / "config" / "sites"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("PTFLOW_ACCOUNT", "acct")
    monkeypatch.setenv("USER", "alice")


@pytest.mark.parametrize(
    ("state", "log", "kind", "nodes"),
    [
        ("NODE_FAIL", "", "infra", ["n1", "n2"]),
        ("BOOT_FAIL", "", "infra", ["n1", "n2"]),
        ("FAILED", "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus on node n2", "infra", ["n2"]),
        ("FAILED", "srun: error: Node failure on n1", "infra", ["n1"]),
        ("FAILED", "RuntimeError: CUDA error: uncorrectable ECC error encountered", "infra", ["n1", "n2"]),
        ("FAILED", "pyxis: couldn't start container", "infra", ["n1", "n2"]),
        ("FAILED", "Traceback (most recent call last):\nValueError: bad learning rate", "training", []),
        ("OUT_OF_MEMORY", "", "training", []),
        ("COMPLETED", "", "ok", []),
    ],
)
def test_classify(state, log, kind, nodes):
    v = pyxis.classify(state, log, ["n1", "n2"])
    assert v.kind == kind and v.nodes == nodes


def test_rendezvous_env():
    envs = multinode.rendezvous_env(["a", "b"], {"a": "10.0.0.1", "b": "10.0.0.2"}, 8, 1234)
    assert envs[0] == {"WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": str(20000 + 1234),
                       "NUM_GPU_PER_NODE": "8", "NODE_RANK": "0"}  # fmt: skip
    assert envs[1]["NODE_RANK"] == "1" and envs[1]["MASTER_ADDR"] == "10.0.0.1"
    assert all(20000 <= multinode.master_port(j) < 32768 for j in (0, 11999, 10**9))


def test_pyxis_command_line_text():
    site = load_site("pyxis", SITES)
    envs = multinode.rendezvous_env(["a", "b"], {"a": "a", "b": "b"}, 8, 7)
    argvs = multinode.node_argvs(site.runtime, ["a", "b"], envs, ["python", "train.py"], image="/lustre/img/x.sqsh")
    assert argvs[1] == [
        "srun", "--nodes=1", "--nodelist=b",
        "--export=ALL,WORLD_SIZE=2,MASTER_ADDR=a,MASTER_PORT=20007,NUM_GPU_PER_NODE=8,NODE_RANK=1",
        "--overlap", "--ntasks=1", "--container-image=/lustre/img/x.sqsh", "--container-mounts=/lustre",
        "python", "train.py",
    ]  # fmt: skip


def test_status_json(tmp_path):
    pyxis.write_status(tmp_path, "failed", failure="training")
    data = json.loads((tmp_path / "status.json").read_text())
    assert data["status"] == "failed" and data["failure"] == "training" and "time" in data


def _policy(tmp_path, outcomes):
    """Run the loop over scripted (state, log, nodes) outcomes, recording the excludes of each submission."""
    subs = []

    def submit(attempt, exclude):
        subs.append(exclude)
        return str(attempt)

    def wait(job_id):
        state, _, nodes = outcomes[min(int(job_id), len(outcomes)) - 1]
        return slurm.JobRecord(id=job_id, state=state, nodes=",".join(nodes))

    def log_of(job_id):
        return outcomes[min(int(job_id), len(outcomes)) - 1][1]

    return subs, submit, wait, log_of


def test_infra_failures_retried_with_accumulated_excludes(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "hostnames", lambda s: s.split(","))  # no scontrol in unit tests
    outcomes = [("NODE_FAIL", "", ["n1"]), ("FAILED", "Xid 79 on node n2", ["n2"]), ("COMPLETED", "", ["n3"])]
    subs, submit, wait, log_of = _policy(tmp_path, outcomes)
    res = pyxis.run_with_retries(submit, log_of, tmp_path, wait=wait, log=lambda m: None)
    assert res["status"] == "succeeded" and res["attempts"] == 3
    assert subs == [[], ["n1"], ["n1", "n2"]]


def test_training_error_not_retried_and_cap_of_ten(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "hostnames", lambda s: s.split(","))
    subs, submit, wait, log_of = _policy(tmp_path, [("FAILED", "ValueError: x", ["n1"])])
    with pytest.raises(pyxis.TrainingFailed):
        pyxis.run_with_retries(submit, log_of, tmp_path, wait=wait, log=lambda m: None)
    assert len(subs) == 1
    subs, submit, wait, log_of = _policy(tmp_path, [("NODE_FAIL", "", ["n1"])])
    with pytest.raises(pyxis.RetriesExhausted, match="10 resubmissions"):
        pyxis.run_with_retries(submit, log_of, tmp_path, wait=wait, log=lambda m: None)
    assert len(subs) == 11  # the first try plus 10 retries
    assert json.loads((tmp_path / "status.json").read_text())["failure"] == "infra"


def test_saved_stops_are_resubmitted_without_excludes_up_to_max_resumes(tmp_path, monkeypatch):
    """A job that saved and stopped (its stop marker: internal timeout, warning) is resubmitted to resume; that is
    counted apart from infra retries, bounded by max_resumes and visible in status.json."""
    monkeypatch.setattr(slurm, "hostnames", lambda s: s.split(","))
    outcomes = [("FAILED", "", ["n1"]), ("TIMEOUT", "", ["n2"]), ("COMPLETED", "", ["n1"])]
    subs, submit, wait, log_of = _policy(tmp_path, outcomes)
    stopped = {"1": {"step": 40, "reason": "the time-limit warning"}, "2": {"step": 80, "reason": "SIGTERM"}}
    res = pyxis.run_with_retries(submit, log_of, tmp_path, wait=wait, stopped=stopped.get, log=lambda m: None)
    assert res["status"] == "succeeded" and res["resumes"] == 2 and res["retries"] == 0
    assert subs == [[], [], []]  # a saved stop blames no node
    assert [h["kind"] for h in res["history"]] == ["resume", "resume", "ok"]
    assert "saved step 40 and stopped (the time-limit warning)" in res["history"][0]["reason"]
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["resumes"] == 2 and status["max_resumes"] == pyxis.MAX_RESUMES
    subs, submit, wait, log_of = _policy(tmp_path, [("FAILED", "", ["n1"])])
    with pytest.raises(pyxis.ResumesExhausted, match="raise max_resumes"):
        pyxis.run_with_retries(submit, log_of, tmp_path, wait=wait, stopped=lambda j: {"step": 1}, max_resumes=2,
                               log=lambda m: None)  # fmt: skip
    assert len(subs) == 3 and json.loads((tmp_path / "status.json").read_text())["failure"] == "resumes"
