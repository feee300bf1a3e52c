"""Path URIs in configuration: which ones name a cluster path, and the plain path each stands for.

TAO's SLURM platform names inputs on the cluster's shared storage as ``lustre:///abs/path`` (and ``slurm://`` in its
job metadata); both are accepted wherever ptflow takes a path (``paths.*``, site paths, checkouts) and become the
absolute path. ``file://`` names one machine's disk: it stays as it is here, and preflight and ``ptflow remote``
refuse it for Slurm sites, as TAO refuses local paths for remote backends.
"""

from __future__ import annotations

from urllib.parse import urlparse

CLUSTER_SCHEMES = ("lustre", "slurm")


class PathURIError(ValueError):
    """A path value that is not a path ptflow can use; the message names the setting."""


def cluster_path(value: str, where: str = "path") -> str:
    """``lustre:///abs`` and ``slurm://[cluster]/abs`` -> ``/abs``; other values unchanged."""
    if not isinstance(value, str) or "://" not in value:
        return value
    parsed = urlparse(value)
    if parsed.scheme == "file":
        return value  # refused for Slurm sites by preflight / ptflow remote, with the reason
    if parsed.scheme not in CLUSTER_SCHEMES:
        raise PathURIError(
            f"{where} = {value!r}: scheme {parsed.scheme}:// is not a filesystem path; use an absolute path on the "
            "cluster's shared storage (or lustre:///abs/path)"
        )
    if parsed.scheme == "lustre" and parsed.netloc:
        raise PathURIError(
            f"{where} = {value!r}: write lustre:///absolute/path (three slashes: no host part), e.g. lustre:///lustre/fsw/me/data"
        )
    if not parsed.path.startswith("/"):
        raise PathURIError(f"{where} = {value!r}: the path after {parsed.scheme}:// must be absolute")
    return parsed.path


def is_file_uri(value: str) -> bool:
    return isinstance(value, str) and value.startswith("file:")
