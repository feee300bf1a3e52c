"""The pinned requirements bench/gpu_check.py needs on the device machine beyond its image's packages
(bench/device_packages.txt, as the device's KINDS.md listed them): the closure of trl, datasets, inspect-ai and
jsonschema at the versions this venv resolved, without the AWS stack inspect-ai declares (not imported on the
check's path; 20 MB the 64 MiB limit cannot spare). One ``name==version`` per line, for ``pip download``."""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
from pathlib import Path

TOP = ("trl", "datasets", "inspect-ai", "jsonschema")
SKIP = {"aiobotocore", "botocore", "boto3", "s3transfer", "jmespath", "s3fs", "aioitertools", "debugpy"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(top=TOP, provided: set[str] | None = None) -> list[str]:
    provided = provided if provided is not None else {norm(x) for x in Path(__file__).with_name(
        "device_packages.txt").read_text().split()}  # fmt: skip
    seen: set[str] = set()
    out: list[str] = []

    def walk(name: str) -> None:
        n = norm(name)
        if n in seen or n in provided or n in SKIP:
            return
        seen.add(n)
        dist = md.distribution(name)
        out.append(f"{dist.metadata['Name']}=={dist.version}")
        for req in dist.requires or []:
            marker = req.split(";", 1)[1].replace("'", '"') if ";" in req else ""
            if "extra ==" in marker or 'sys_platform == "win32"' in marker or 'python_version < "3.1' in marker:
                continue
            walk(re.match(r"\s*([A-Za-z0-9_.\-]+)", req).group(1))

    for name in top:
        walk(name)
    return out


if __name__ == "__main__":
    sys.stdout.write("\n".join(closure()) + "\n")
