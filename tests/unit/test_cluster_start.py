"""The test cluster's start waits on slurmctld's facts about each node (issue 56): what ``scontrol show node -o`` says,
and a slurmd whose node does not come up is restarted once, then named with its log. No Slurm here: ``sleep``
processes stand in for the slurmd, and slurmctld's node list is a function of which of them run."""

from __future__ import annotations

import pytest

from tests.support import local_slurm
from tests.support.local_slurm import LocalSlurmCluster, NodeState, SlurmClusterError, parse_nodes

# Slurm 22.05's lines (trimmed): a registered node, one that never registered, one slurmctld gave up on.
SHOW_NODE = """\
NodeName=vm NodeAddr=127.0.0.1 NodeHostName=vm State=IDLE ThreadsPerCore=1 SlurmdStartTime=2026-12-07T16:40:04
NodeName=node2 NodeAddr=127.0.0.2 NodeHostName=vm State=UNKNOWN ThreadsPerCore=1 SlurmdStartTime=None
NodeName=spare1 State=DOWN+NOT_RESPONDING SlurmdStartTime=None Reason=Not responding [slurm@2026-12-07T16:45:05]
"""


def test_parse_nodes_reads_state_reason_and_registration():
    nodes = parse_nodes(SHOW_NODE)
    assert nodes["vm"] == NodeState("vm", "IDLE", "", "2026-12-07T16:40:04")
    assert nodes["vm"].ready and not nodes["node2"].ready and not nodes["spare1"].ready
    assert nodes["node2"].describe() == "State=UNKNOWN SlurmdStartTime=None"
    assert nodes["spare1"].reason == "Not responding [slurm@2026-12-07T16:45:05]"  # spaces kept, next field not
    assert not NodeState("x", "IDLE+DRAIN").ready and not NodeState("x", "IDLE+NOT_RESPONDING").ready
    assert parse_nodes("") == {} and parse_nodes("Slurmctld(primary) at vm is DOWN") == {}


def _cluster(tmp_path, monkeypatch, ready_after_restart: set[str]) -> tuple[LocalSlurmCluster, dict[str, int]]:
    """A cluster object whose daemons are ``sleep`` processes. Every node is IDLE at once, except those in
    ``ready_after_restart``: UNKNOWN until their slurmd stand-in runs as a new process (was restarted)."""
    monkeypatch.setattr(local_slurm, "REREGISTER_AFTER", 0.5)
    cluster = LocalSlurmCluster(tmp_path / "w", install=False)
    (cluster.workdir / "log").mkdir(parents=True)
    cluster._spawn("slurmctld", ["sleep", "60"])
    first_pid = {}
    for i, node in enumerate(cluster.all_nodes, start=1):
        (cluster.workdir / "log" / f"slurmd-{node}.log").write_text(f"[t] {node}: slurmd version 22.05.8 started\n")
        first_pid[node] = cluster._spawn(f"slurmd-{i}", ["sleep", "60"]).pid

    def node_states():
        out = {}
        for i, node in enumerate(cluster.all_nodes, start=1):
            restarted = cluster._procs[f"slurmd-{i}"].pid != first_pid[node]
            up = node not in ready_after_restart or restarted
            out[node] = NodeState(node, "IDLE" if up else "UNKNOWN")
        return out

    monkeypatch.setattr(cluster, "node_states", node_states)
    monkeypatch.setattr(cluster, "_ctld_answers", lambda: True)
    return cluster, first_pid


def _kill(cluster: LocalSlurmCluster) -> None:
    """Not stop(): it would ask squeue for the stand-in slurmctld's jobs."""
    for proc in cluster._procs.values():
        proc.kill()
        proc.wait()


def test_a_node_that_did_not_register_gets_its_slurmd_restarted_once(tmp_path, monkeypatch):
    cluster, first_pid = _cluster(tmp_path, monkeypatch, {"node2"})
    try:
        cluster._wait_nodes_ready(local_slurm.time.monotonic() + 20)
        assert cluster.slurmd_restarts == ["node2"]  # only the stuck one, once
        assert cluster._procs["slurmd-2"].pid != first_pid["node2"]
        assert cluster._argv["slurmd-2"] == ["sleep", "60"]  # the same command again
        assert cluster._read_state()["procs"]["slurmd-2"][0] == cluster._procs["slurmd-2"].pid  # stop() finds it
        assert cluster._procs["slurmd-1"].pid == first_pid[cluster.all_nodes[0]]
    finally:
        _kill(cluster)


def test_a_node_that_never_comes_up_is_named_with_its_state_and_log(tmp_path, monkeypatch):
    cluster, _ = _cluster(tmp_path, monkeypatch, set())
    monkeypatch.setattr(
        cluster,
        "node_states",
        lambda: {n: NodeState(n, "IDLE" if n != "spare1" else "UNKNOWN") for n in cluster.all_nodes},
    )
    try:
        with pytest.raises(SlurmClusterError) as err:
            cluster._wait_nodes_ready(local_slurm.time.monotonic() + 1.5)
    finally:
        _kill(cluster)
    msg = str(err.value)
    assert cluster.slurmd_restarts == ["spare1"]
    assert "node spare1: State=UNKNOWN SlurmdStartTime=None (its slurmd was restarted once)" in msg
    assert "slurmd-3 (running); log" in msg and "spare1: slurmd version 22.05.8 started" in msg
    assert "node node2" not in msg and "slurmctld answers" in msg


def test_a_slurmd_that_exits_fails_the_start_at_once_with_its_log(tmp_path, monkeypatch):
    cluster, _ = _cluster(tmp_path, monkeypatch, {"node2"})
    cluster._procs["slurmd-2"].kill()
    cluster._procs["slurmd-2"].wait()
    try:
        with pytest.raises(SlurmClusterError, match=r"slurmd-2 exited during start-up: slurmd-2 \(exited -9\)"):
            cluster._wait_nodes_ready(local_slurm.time.monotonic() + 20)
    finally:
        _kill(cluster)
    assert cluster.slurmd_restarts == []
