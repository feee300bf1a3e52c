"""What the cluster lets one user have at once, read from Slurm (and a site file), and the driver kept under it.

Shared clusters cap a user's jobs and GPUs with QOS and association limits (``sacctmgr show qos`` / ``show assoc``):
``MaxSubmitJobs`` (queued + running), ``MaxJobs`` (running), ``GrpTRES=gres/gpu=N`` and ``MaxTRESPU`` (in use). An
sbatch past a submit cap is refused (exit 1), so a driver that ignores the caps loses jobs; one that keeps under them
never sees a refusal. Here:

- :func:`read_limits` asks Slurm: ``scontrol show config`` says whether the cluster keeps accounting and enforces
  limits (``AccountingStorageEnforce`` with ``limits`` or ``safe``); ``sacctmgr -nP`` gives the association of the
  user with the site's account (and the account's own, whose group limits the user's jobs count against), the QOS the
  jobs run under (the site's ``qos``, else the association's default QOS, else its only one, else ``normal``; and each
  partition's QOS from ``scontrol show partition``). Every limit is the smallest of those that apply; each keeps its
  source, so ``ptflow doctor`` and ``ptflow plan`` can say where it comes from.
- A site file may state ``limits:`` (where there is no accounting, or to stay below the cluster's caps): a stated value
  above what sacctmgr reports is refused in one line naming the key (:class:`LimitsError`).
- :func:`driver_caps` turns them into Snakemake's own mechanism: ``--jobs`` (``_nodes``) at most the submit cap, and
  global resources ``gpus_total`` / ``cpus_total`` (which every Slurm job declares, ``Site.request``) at most the
  GPU / CPU caps; :func:`apply` registers them on the workflow before it schedules anything.

Limits set per partition in an association are combined over the partitions the site uses (the smallest wins):
conservative where partitions differ. Limits of parent accounts are not followed (sacctmgr prints each association's
own values).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ptflow.cluster import slurm

DEFAULT_QOS = "normal"
# sacctmgr fields read (-nP: no header, '|'-separated), in this order.
ASSOC_FIELDS = ("Account", "User", "Partition", "QOS", "DefaultQOS", "MaxJobs", "MaxSubmitJobs", "GrpJobs",
                "GrpSubmitJobs", "GrpTRES")  # fmt: skip
QOS_FIELDS = ("Name", "MaxSubmitJobsPU", "MaxJobsPU", "MaxTRESPU", "MaxSubmitJobsPA", "MaxJobsPA", "MaxTRESPA",
              "GrpSubmitJobs", "GrpJobs", "GrpTRES")  # fmt: skip
# Which fields cap what: (limit, field, TRES name or None for a plain count).
_ASSOC_CAPS = (
    ("max_submit_jobs", "MaxSubmitJobs", None),
    ("max_submit_jobs", "GrpSubmitJobs", None),
    ("max_jobs", "MaxJobs", None),
    ("max_jobs", "GrpJobs", None),
    ("max_gpus", "GrpTRES", "gres/gpu"),
    ("max_cpus", "GrpTRES", "cpu"),
)
_QOS_CAPS = (
    ("max_submit_jobs", "MaxSubmitJobsPU", None),
    ("max_submit_jobs", "MaxSubmitJobsPA", None),
    ("max_submit_jobs", "GrpSubmitJobs", None),
    ("max_jobs", "MaxJobsPU", None),
    ("max_jobs", "MaxJobsPA", None),
    ("max_jobs", "GrpJobs", None),
    ("max_gpus", "MaxTRESPU", "gres/gpu"),
    ("max_gpus", "MaxTRESPA", "gres/gpu"),
    ("max_gpus", "GrpTRES", "gres/gpu"),
    ("max_cpus", "MaxTRESPU", "cpu"),
    ("max_cpus", "MaxTRESPA", "cpu"),
    ("max_cpus", "GrpTRES", "cpu"),
)
LIMIT_KEYS = ("max_submit_jobs", "max_jobs", "max_gpus", "max_cpus")
WHAT = {
    "max_submit_jobs": "jobs queued or running",
    "max_jobs": "jobs running",
    "max_gpus": "GPUs in use",
    "max_cpus": "CPUs in use",
}


class LimitsError(ValueError):
    """A site's stated limit is not usable; the message is one line naming the key."""


@dataclass(frozen=True)
class Cap:
    value: int
    source: str  # e.g. "QOS capped MaxSubmitJobsPU", "association root@ptflow GrpTRES", "site localtest limits"
    # Slurm enforces it itself; False: a site's stated cap below anything Slurm enforces, which only ptflow keeps
    by_slurm: bool = True


@dataclass(frozen=True)
class Limits:
    """The smallest cap of each kind that applies to the user's jobs; None where nothing caps it."""

    max_submit_jobs: Cap | None = None
    max_jobs: Cap | None = None
    max_gpus: Cap | None = None
    max_cpus: Cap | None = None
    note: str = ""  # where they were read (or why not)

    def get(self, key: str) -> Cap | None:
        return getattr(self, key)

    @property
    def any(self) -> bool:
        return any(self.get(k) for k in LIMIT_KEYS)

    def lines(self) -> list[str]:
        """One line per cap, for ``ptflow doctor`` / ``ptflow plan`` / the driver's log."""
        out = [
            f"{key} = {cap.value} ({WHAT[key]} at once; {cap.source})" for key in LIMIT_KEYS if (cap := self.get(key))
        ]
        return out or [f"no caps ({self.note or 'none read'})"]

    def to_json(self) -> dict:
        return {
            "note": self.note,
            **{k: (dataclasses.asdict(c) if (c := self.get(k)) else None) for k in LIMIT_KEYS},
        }


# ---- parsing sacctmgr's parsable output ----


def parse_count(value: str) -> int | None:
    """A count field (MaxJobs …): empty or UNLIMITED is no limit."""
    value = (value or "").strip()
    if not value or not value.lstrip("-").isdigit():
        return None
    n = int(value)
    return n if n >= 0 else None


def parse_tres(value: str) -> dict[str, int]:
    """``cpu=64,gres/gpu=8,gres/gpu:h100=4,mem=100G`` → counts of the plain TRES (mem and the like are skipped)."""
    out: dict[str, int] = {}
    for item in (value or "").split(","):
        name, sep, count = item.partition("=")
        if sep and count.strip().isdigit():
            out[name.strip()] = int(count)
    return out


def tres_cap(value: str, name: str) -> int | None:
    """The cap on ``name`` (cpu, gres/gpu) in a TRES string; a typed GPU cap (gres/gpu:h100) counts as a GPU cap."""
    caps = [n for key, n in parse_tres(value).items() if key == name or key.startswith(name + ":")]
    return min(caps) if caps else None


def parse_rows(text: str, fields: tuple[str, ...]) -> list[dict[str, str]]:
    rows = []
    for line in text.splitlines():
        parts = line.rstrip("\n").split("|")
        if len(parts) >= len(fields):
            rows.append(dict(zip(fields, parts[: len(fields)], strict=True)))
    return rows


def enforced(config: dict[str, str]) -> bool:
    """Whether slurmctld enforces association and QOS limits (AccountingStorageEnforce has limits or safe)."""
    value = config.get("AccountingStorageEnforce", "").lower()
    return any(word in value.split(",") for word in ("limits", "safe"))


def _smaller(current: Cap | None, value: int | None, source: str) -> Cap | None:
    if value is None:
        return current
    if current is None or value < current.value:
        return Cap(value, source)
    return current


def combine(assoc_rows: list[dict[str, str]], qos_rows: list[dict[str, str]], *, user: str, account: str,
            partitions: set[str], qos_names: set[str]) -> dict[str, Cap | None]:  # fmt: skip
    """The smallest cap of each kind over the associations that apply (the user's with ``account``, and the
    account's own, for ``partitions`` or all) and the QOS in ``qos_names``."""
    caps: dict[str, Cap | None] = dict.fromkeys(LIMIT_KEYS)
    for row in assoc_rows:
        if row["Account"] != account or row["User"] not in ("", user):
            continue
        if row["Partition"] and row["Partition"] not in partitions:
            continue
        who = f"association {row['User'] + '@' if row['User'] else 'account '}{account}"
        who += f" partition {row['Partition']}" if row["Partition"] else ""
        for key, fieldname, tres in _ASSOC_CAPS:
            value = tres_cap(row[fieldname], tres) if tres else parse_count(row[fieldname])
            caps[key] = _smaller(caps[key], value, f"{who} {fieldname}")
    for row in qos_rows:
        if row["Name"] not in qos_names:
            continue
        for key, fieldname, tres in _QOS_CAPS:
            value = tres_cap(row[fieldname], tres) if tres else parse_count(row[fieldname])
            caps[key] = _smaller(caps[key], value, f"QOS {row['Name']} {fieldname}")
    return caps


def job_qos(assoc_rows: list[dict[str, str]], *, user: str, account: str, requested: set[str]) -> set[str]:
    """The QOS the user's jobs run under: those the site requests, else the association's default, else its only
    one, else ``normal`` (Slurm's own default QOS)."""
    if requested:
        return set(requested)
    mine = [r for r in assoc_rows if r["Account"] == account and r["User"] == user]
    for row in mine:
        if row["DefaultQOS"]:
            return {row["DefaultQOS"]}
    allowed = {q for r in mine for q in r["QOS"].split(",") if q}
    return allowed if len(allowed) == 1 else {DEFAULT_QOS}


# ---- the site's requests and statement ----


def site_partitions(site, requests) -> set[str]:
    return {p for req in requests for p in (req.get("partition") or "").split(",") if p}


def merge_stated(site, read: dict[str, Cap | None], note: str) -> Limits:
    """The site's stated limits (``limits:``, integers >= 1 by the site schema) over those read: each at most the read
    one (else :class:`LimitsError`)."""
    caps = dict(read)
    for key, value in site.limits.items():
        have = caps.get(key)
        if have is not None and value > have.value:
            raise LimitsError(
                f"site {site.name} limits.{key}: {value} is above the cluster's cap of {have.value} ({have.source}); "
                f"lower it to at most {have.value} or leave it out"
            )
        caps[key] = Cap(value, f"site {site.name} limits.{key}", by_slurm=have is not None and value == have.value)
    return Limits(**caps, note=note)


def read_limits(site, requests, user: str, run=slurm._run) -> Limits:
    """The user's caps on this cluster for the site's account, partitions and QOS: from sacctmgr where the cluster
    keeps accounting and enforces limits, then the site's stated ones (each not above the cluster's)."""
    if site.scheduler != "slurm":
        return merge_stated(site, {}, "not a Slurm site")
    config = slurm.parse_config(run(["scontrol", "show", "config"]))
    if not slurm.accounting_enabled(config):
        return merge_stated(site, {}, "this cluster keeps no accounting: sacctmgr has no limits to give")
    if not enforced(config):
        note = f"AccountingStorageEnforce={config.get('AccountingStorageEnforce') or 'none'} enforces no limits"
        return merge_stated(site, {}, note)
    account = site.account
    if not account:
        out = run(["sacctmgr", "-nP", "show", "user", user, "format=DefaultAccount"]).split()
        account = out[0] if out else ""
    assoc_rows = parse_rows(
        run(["sacctmgr", "-nP", "show", "assoc", f"account={account}", f"format={','.join(ASSOC_FIELDS)}"]),
        ASSOC_FIELDS,
    )
    parts = site_partitions(site, requests)
    qos_names = job_qos(assoc_rows, user=user, account=account, requested={r["qos"] for r in requests if r.get("qos")})
    for line in run(["scontrol", "show", "partition", "-o"]).splitlines():
        f = slurm._fields(line)
        if f.get("PartitionName") in parts and f.get("QoS") not in (None, "", "N/A", "(null)"):
            qos_names.add(f["QoS"])
    qos_rows = parse_rows(run(["sacctmgr", "-nP", "show", "qos", f"format={','.join(QOS_FIELDS)}"]), QOS_FIELDS)
    caps = combine(assoc_rows, qos_rows, user=user, account=account, partitions=parts, qos_names=qos_names)
    note = f"sacctmgr: user {user}, account {account}, QOS {', '.join(sorted(qos_names))}"
    return merge_stated(site, caps, note)


def for_matrix(cfg, site, user: str | None = None) -> Limits | None:
    """The caps for this matrix's requests, as the driver (at its start), ``ptflow plan`` and ``ptflow doctor`` read
    them; None on a site that is not Slurm. Where Slurm does not answer (no Slurm here, a plan made off the cluster):
    the site's stated limits only, saying why. A stated limit above the cluster's raises :class:`LimitsError`."""
    from ptflow.cluster.preflight import requests_in_use
    from ptflow.jobenv import user_name

    if site.scheduler != "slurm":
        return None
    requests = [req for _label, req in requests_in_use(cfg, site)]
    try:
        return read_limits(site, requests, user or user_name())
    except slurm.SlurmUnavailable as exc:
        said = " ".join(str(exc).split())  # scontrol's stderr may run over lines; the note is one
        return merge_stated(site, {}, f"not read from Slurm: {said}; the site's stated limits only")


# ---- the driver under them ----


def driver_caps(limits: Limits, jobs: int | None) -> dict[str, int]:
    """Snakemake's global resources that keep a run under ``limits``: ``_nodes`` (``--jobs``, only where lower than
    the given ``jobs``) for the submit cap, which sbatch enforces by refusing. Running caps (MaxJobs, GPUs and CPUs
    in use) are Slurm's to keep: it holds a job past them pending, in its queue, where the job ages in priority and
    starts the moment a GPU frees; ptflow holding it back instead would keep one of its slots for the whole queue
    wait and submit the next job only after one ended. Only a site's stated GPU/CPU cap that Slurm does not enforce
    (``Cap.by_slurm`` False: no accounting, or stated below the cluster's) is kept here, as ``gpus_total`` and
    ``cpus_total``, which every Slurm job declares."""
    out = {}
    if limits.max_submit_jobs and (jobs is None or limits.max_submit_jobs.value < jobs):
        out["_nodes"] = limits.max_submit_jobs.value
    for key, resource in (("max_gpus", "gpus_total"), ("max_cpus", "cpus_total")):
        cap = limits.get(key)
        if cap and not cap.by_slurm:
            out[resource] = cap.value
    return out


def request_problems(limits: Limits, labelled_requests, site) -> list[str]:
    """Requests that could never start under the caps (more GPUs or CPUs in one job than the user may use)."""
    problems = []
    for label, req in labelled_requests:
        held = req.snakemake_resources()
        for key, res in (("max_gpus", "gpus_total"), ("max_cpus", "cpus_total")):
            cap = limits.get(key)
            if cap and held.get(res, 0) > cap.value:
                problems.append(
                    f"site {site.name} resources.{label}: one job holds {held[res]} {WHAT[key].split()[0]}, but "
                    f"{key} is {cap.value} ({cap.source}); ask for fewer in {site.path}"
                )
    return problems


def apply(workflow, caps: dict[str, int]) -> None:
    """What ``--jobs N --resources gpus_total=G cpus_total=C`` would have done, from the driver's start (``onstart``:
    real runs only, before the scheduler has started any job). ``Workflow.register_resource`` records each cap as a
    global resource (``--jobs`` is ``_nodes``) and hands it to the scheduler's free pool; the scheduler's copy of the
    global table (what it checks jobs against and gives back to when a job ends) gets it too. Snakemake 9's
    ``JobScheduler`` keeps both as dicts; a Snakemake without them is refused in one line rather than run uncapped."""
    for name, value in caps.items():
        workflow.register_resource(name, value)
    scheduler = getattr(workflow, "scheduler", None)
    if scheduler is None or not caps:
        return  # not started yet: it copies workflow.global_resources when it starts
    table, pool = getattr(scheduler, "global_resources", None), getattr(scheduler, "resources", None)
    if not isinstance(table, dict) or not isinstance(pool, dict):
        raise LimitsError(
            "this Snakemake's scheduler keeps no global_resources/resources tables: ptflow cannot cap the run to the "
            f"cluster's limits ({', '.join(f'{k}={v}' for k, v in caps.items())}); pass --jobs and --resources yourself"
        )
    for name, value in caps.items():
        table[name] = value
        pool[name] = value  # nothing runs yet: the whole cap is free
