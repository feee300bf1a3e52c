"""ptflow.cluster.limits: a user's caps from sacctmgr's parsable output and scontrol, a site's stated limits over them,
and what the driver and ``ptflow doctor`` make of them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from ptflow.cluster import limits, slurm
from ptflow.cluster.limits import ASSOC_FIELDS, QOS_FIELDS, Cap, Limits, LimitsError
from ptflow.config.matrix import build_config
from ptflow.config.sites import Site, load_site
from ptflow.config.validate import ConfigError
from ptflow.ops import doctor
from ptflow.ops.context import Context
from tests.conftest import REPO

SITE = REPO / "tests" / "slurm" / "localtest.yaml"
SCONTROL_CONFIG = (Path(__file__).parent / "data" / "scontrol_show_config.txt").read_text()


def row(fields: tuple[str, ...], **values: str) -> str:
    """One line of ``sacctmgr -nP``: the fields in the order asked for, '|'-separated, empty where unset."""
    assert set(values) <= set(fields)
    return "|".join(values.get(f, "") for f in fields)


# root's association with account ptflow, the account's own (group limits), one for a partition the site never uses,
# and another account's: as `sacctmgr -nP show assoc format=...` prints them
ASSOC = "\n".join(
    [
        row(ASSOC_FIELDS, Account="ptflow", GrpTRES="cpu=64,gres/gpu=8,mem=100G", GrpJobs="40"),
        row(ASSOC_FIELDS, Account="ptflow", User="root", QOS="capped,normal", DefaultQOS="capped", MaxSubmitJobs="10"),
        row(ASSOC_FIELDS, Account="ptflow", User="root", Partition="big", MaxJobs="1", QOS="normal"),
        row(ASSOC_FIELDS, Account="other", User="root", MaxSubmitJobs="2", QOS="normal"),
    ]
)
QOS = "\n".join(
    [
        row(QOS_FIELDS, Name="normal"),
        row(QOS_FIELDS, Name="capped", MaxSubmitJobsPU="4", MaxTRESPU="gres/gpu=2"),
        row(QOS_FIELDS, Name="gpuqos", MaxJobsPU="3", MaxTRESPU="cpu=32,gres/gpu:h100=6"),
        row(QOS_FIELDS, Name="unused", MaxSubmitJobsPU="1", MaxTRESPU="gres/gpu=1"),
    ]
)
PARTITIONS = "PartitionName=gpu AllowGroups=ALL QoS=gpuqos MaxTime=12:00:00\nPartitionName=debug QoS=N/A\n"


def fake_slurm(config: str = SCONTROL_CONFIG, assoc: str = ASSOC, qos: str = QOS):
    """Slurm's answers to exactly the commands read_limits asks, by argv; any other command fails the test."""
    answers = {
        ("scontrol", "show", "config"): config,
        ("sacctmgr", "-nP", "show", "assoc", "account=ptflow", f"format={','.join(ASSOC_FIELDS)}"): assoc,
        ("scontrol", "show", "partition", "-o"): PARTITIONS,
        ("sacctmgr", "-nP", "show", "qos", f"format={','.join(QOS_FIELDS)}"): qos,
    }
    asked: list[tuple[str, ...]] = []

    def run(argv: list[str]) -> str:
        asked.append(tuple(argv))
        return answers[tuple(argv)]

    run.asked = asked
    return run


def site_with(tmp_path: Path, **changes) -> Site:
    raw = yaml.safe_load(SITE.read_text())
    raw.update(changes)
    path = tmp_path / "localtest.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_site(str(path), REPO)


def site_requests(site) -> list:
    return [site.request(stage) for stage in ("cache", "train", "evaluate", "aggregate")]


def test_counts_and_tres_fields():
    assert [limits.parse_count(v) for v in ("", "UNLIMITED", "-1", "0", "12")] == [None, None, None, 0, 12]
    assert limits.parse_tres("cpu=64,gres/gpu=8,gres/gpu:h100=4,mem=100G,billing=") == {
        "cpu": 64,
        "gres/gpu": 8,
        "gres/gpu:h100": 4,
    }
    assert limits.tres_cap("cpu=64,gres/gpu=8,gres/gpu:h100=4", "gres/gpu") == 4  # a typed GPU cap is a GPU cap
    assert limits.tres_cap("cpu=64,mem=1G", "gres/gpu") is None
    assert limits.tres_cap("cpu=64", "cpu") == 64


def test_rows_follow_the_fields_asked_for():
    rows = limits.parse_rows(ASSOC + "\nshort|line\n", ASSOC_FIELDS)
    assert len(rows) == 4  # a line with fewer fields than asked is not a row
    assert rows[1] == dict.fromkeys(ASSOC_FIELDS, "") | {
        "Account": "ptflow",
        "User": "root",
        "QOS": "capped,normal",
        "DefaultQOS": "capped",
        "MaxSubmitJobs": "10",
    }
    (capped,) = [r for r in limits.parse_rows(QOS, QOS_FIELDS) if r["Name"] == "capped"]
    assert (capped["MaxSubmitJobsPU"], capped["MaxTRESPU"], capped["GrpTRES"]) == ("4", "gres/gpu=2", "")


def test_combine_takes_the_smallest_cap_that_applies_and_names_it():
    caps = limits.combine(
        limits.parse_rows(ASSOC, ASSOC_FIELDS),
        limits.parse_rows(QOS, QOS_FIELDS),
        user="root",
        account="ptflow",
        partitions={"gpu", "debug"},
        qos_names={"capped"},
    )
    assert caps == {
        "max_submit_jobs": Cap(4, "QOS capped MaxSubmitJobsPU"),  # below the association's 10
        "max_jobs": Cap(40, "association account ptflow GrpJobs"),  # partition big's MaxJobs=1 does not apply
        "max_gpus": Cap(2, "QOS capped MaxTRESPU"),  # below the account's GrpTRES gres/gpu=8
        "max_cpus": Cap(64, "association account ptflow GrpTRES"),
    }
    # another user's association rows and another account's never count
    other = limits.combine(limits.parse_rows(ASSOC, ASSOC_FIELDS), [], user="alice", account="other",
                           partitions={"gpu"}, qos_names=set())  # fmt: skip
    assert other == dict.fromkeys(limits.LIMIT_KEYS)


def test_job_qos_choice():
    assoc = limits.parse_rows(ASSOC, ASSOC_FIELDS)
    pick = limits.job_qos
    assert pick(assoc, user="root", account="ptflow", requested={"gpuqos"}) == {"gpuqos"}  # the site's qos wins
    assert pick(assoc, user="root", account="ptflow", requested=set()) == {"capped"}  # the association's default
    one = [dict(r, QOS="gpuqos", DefaultQOS="") for r in assoc if r["User"] == "root" and r["Account"] == "ptflow"]
    assert pick(one, user="root", account="ptflow", requested=set()) == {"gpuqos"}  # its only QOS
    several = [dict(r, DefaultQOS="") for r in assoc]
    assert pick(several, user="root", account="ptflow", requested=set()) == {"normal"}  # Slurm's default QOS


def test_enforced_reads_accounting_storage_enforce():
    assert limits.enforced(slurm.parse_config(SCONTROL_CONFIG))  # associations,limits
    assert limits.enforced({"AccountingStorageEnforce": "associations,safe"})
    assert not limits.enforced({"AccountingStorageEnforce": "associations"})
    assert not limits.enforced({"AccountingStorageEnforce": "none"})
    assert not limits.enforced({})


def test_read_limits_from_sacctmgr_and_the_partitions_qos():
    site = load_site(str(SITE), REPO)
    run = fake_slurm()
    found = limits.read_limits(site, site_requests(site), "root", run=run)
    # QOS capped (the association's default) and gpuqos (partition gpu's QoS); account ptflow's group limits
    assert found.note == "sacctmgr: user root, account ptflow, QOS capped, gpuqos"
    assert found.max_submit_jobs == Cap(4, "QOS capped MaxSubmitJobsPU")
    assert found.max_jobs == Cap(3, "QOS gpuqos MaxJobsPU")
    assert found.max_gpus == Cap(2, "QOS capped MaxTRESPU")
    assert found.max_cpus == Cap(32, "QOS gpuqos MaxTRESPU")
    assert found.lines() == [
        "max_submit_jobs = 4 (jobs queued or running at once; QOS capped MaxSubmitJobsPU)",
        "max_jobs = 3 (jobs running at once; QOS gpuqos MaxJobsPU)",
        "max_gpus = 2 (GPUs in use at once; QOS capped MaxTRESPU)",
        "max_cpus = 32 (CPUs in use at once; QOS gpuqos MaxTRESPU)",
    ]
    assert found.to_json()["max_gpus"] == {"value": 2, "source": "QOS capped MaxTRESPU", "by_slurm": True}
    assert len(run.asked) == 4


def test_no_accounting_or_no_enforcement_reads_no_caps():
    site = load_site(str(SITE), REPO)
    no_accounting = SCONTROL_CONFIG.replace("accounting_storage/slurmdbd", "accounting_storage/none")
    run = fake_slurm(config=no_accounting)
    found = limits.read_limits(site, site_requests(site), "root", run=run)
    assert not found.any and run.asked == [("scontrol", "show", "config")]  # sacctmgr is never asked
    assert found.lines() == ["no caps (this cluster keeps no accounting: sacctmgr has no limits to give)"]
    not_enforced = SCONTROL_CONFIG.replace("associations,limits", "associations")
    found = limits.read_limits(site, site_requests(site), "root", run=fake_slurm(config=not_enforced))
    assert not found.any and found.note == "AccountingStorageEnforce=associations enforces no limits"


def test_stated_limits_below_one_are_refused_by_the_schema(tmp_path):
    for value in (0, -3):
        with pytest.raises(ConfigError, match=r"site error in .*localtest.yaml at limits.max_submit_jobs: .*too small"):
            site_with(tmp_path, limits={"max_submit_jobs": value})


def test_a_stated_limit_above_the_clusters_is_refused_naming_the_key(tmp_path):
    site = site_with(tmp_path, limits={"max_gpus": 3, "max_jobs": 2})
    with pytest.raises(LimitsError) as err:
        limits.read_limits(site, site_requests(site), "root", run=fake_slurm())
    assert str(err.value) == (
        "site localtest limits.max_gpus: 3 is above the cluster's cap of 2 (QOS capped MaxTRESPU); "
        "lower it to at most 2 or leave it out"
    )
    # at or below the cluster's, a stated limit holds and says where it comes from; the others stay as read
    site = site_with(tmp_path, limits={"max_gpus": 2, "max_jobs": 2})
    found = limits.read_limits(site, site_requests(site), "root", run=fake_slurm())
    assert found.max_gpus == Cap(2, "site localtest limits.max_gpus")  # the cluster's own: Slurm keeps it
    assert found.max_jobs == Cap(2, "site localtest limits.max_jobs", by_slurm=False)  # below its 3: ptflow's
    assert found.max_submit_jobs == Cap(4, "QOS capped MaxSubmitJobsPU")
    # with nothing read (no Slurm, no accounting) the stated ones are the caps
    stated = limits.merge_stated(site, {}, "not read")
    assert (stated.max_gpus, stated.max_submit_jobs, stated.note) == (
        Cap(2, "site localtest limits.max_gpus", by_slurm=False), None, "not read")  # fmt: skip


def test_driver_caps_keep_the_submit_cap_and_leave_running_caps_to_slurm():
    found = Limits(max_submit_jobs=Cap(100, "q"), max_jobs=Cap(5, "q"), max_gpus=Cap(8, "a"), max_cpus=Cap(64, "a"))
    # --jobs only where the submit cap is below the driver's own; a running cap makes Slurm hold jobs, never refuse:
    # jobs past it wait in Slurm's queue (ageing in priority), not in ptflow's
    assert limits.driver_caps(found, 250) == {"_nodes": 100}
    assert limits.driver_caps(found, 50) == {}
    assert limits.driver_caps(found, None) == {"_nodes": 100}
    assert limits.driver_caps(Limits(), 250) == {}
    # a site's own cap that Slurm does not enforce (no accounting, or below the cluster's) is ptflow's to keep
    site = SimpleNamespace(name="s", limits={"max_gpus": 4, "max_cpus": 64})
    stated = limits.merge_stated(site, {"max_gpus": Cap(8, "QOS q MaxTRESPU"), "max_cpus": Cap(64, "a")}, "read")
    assert (stated.max_gpus.by_slurm, stated.max_cpus.by_slurm) == (False, True)
    assert limits.driver_caps(stated, 250) == {"gpus_total": 4}
    unread = limits.merge_stated(site, {}, "no accounting")
    assert limits.driver_caps(unread, 250) == {"gpus_total": 4, "cpus_total": 64}


def test_doctor_shows_the_caps_and_the_requests_that_never_start(tmp_path, monkeypatch):
    """doctor's limit findings are the lines plan prints, read the way the driver reads them; the GRPO agent's
    2-GPU training under a stated max_gpus of 1 is a FAIL."""
    site = site_with(tmp_path, limits={"max_gpus": 1})
    cfg = build_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    ctx = Context(cfg, site, None, tmp_path, REPO / "Snakefile")
    real = limits.read_limits
    monkeypatch.setattr(limits, "read_limits", lambda site, requests, _user: real(site, requests, "root", fake_slurm()))
    found = doctor.limits_findings(ctx)
    assert [(f.check, f.status) for f in found] == [("cluster limits", "info")] * 5 + [("cluster limits", "FAIL")]
    assert [f.detail for f in found[:5]] == [
        "read: sacctmgr: user root, account ptflow, QOS capped, gpuqos",
        "max_submit_jobs = 4 (jobs queued or running at once; QOS capped MaxSubmitJobsPU)",
        "max_jobs = 3 (jobs running at once; QOS gpuqos MaxJobsPU)",
        "max_gpus = 1 (GPUs in use at once; site localtest limits.max_gpus)",
        "max_cpus = 32 (CPUs in use at once; QOS gpuqos MaxTRESPU)",
    ]
    assert found[5].detail.startswith("site localtest resources.train[grpo]: one job holds 2 GPUs, but max_gpus is 1")
    # a stated limit above the cluster's is doctor's FAIL, in the same one line
    ctx.site = site_with(tmp_path, limits={"max_gpus": 3})
    (fail,) = doctor.limits_findings(ctx)
    assert fail.status == "FAIL" and fail.detail.startswith(
        "site localtest limits.max_gpus: 3 is above the cluster's cap of 2"
    )
