"""The pinned requirements bench/gpu_check.py needs on the device machine beyond its image's packages
(bench/device_packages.txt, as the device's KINDS.md listed them): the closure of trl, datasets, inspect-ai and
jsonschema at the versions this venv resolved, without the parts of the AWS stack inspect-ai declares that the
check's path does not import (aiobotocore, boto3, s3fs: MBs the 64 MiB limit cannot spare). botocore stays:
``inspect_ai.log._file`` imports ``botocore.exceptions`` at module level (the first GPU run failed on its absence).
One ``name==version`` per line, for ``pip download``.

``--trim DIR`` then rewrites the inspect-ai wheel in DIR without ``inspect_ai/binaries/`` (the sandbox-tools
executables inspect copies into docker sandboxes, 29 MB unpacked; the check runs no sandbox): with botocore in, the
wheels and the working tree are otherwise over the 64 MiB a device call carries."""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

TOP = ("trl", "datasets", "inspect-ai", "jsonschema", "botocore")  # botocore: inspect-ai reaches it via aiobotocore
SKIP = {"aiobotocore", "boto3", "s3transfer", "s3fs", "aioitertools", "debugpy"}


# The device's interpreter, for requirement markers (a text match dropped zipfile-zstd, `python_version < "3.14"`,
# which inspect-ai imports on 3.12: the second GPU run failed on it).
DEVICE = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "extra": "",
}


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
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(DEVICE):
                walk(req.name)

    for name in top:
        walk(name)
    return out


def trim_wheel(wheel: Path, prefix: str) -> int:
    """Rewrite ``wheel`` without the members under ``prefix`` (and their RECORD lines); returns bytes saved."""
    before = wheel.stat().st_size
    tmp = wheel.with_suffix(".trim")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            if item.filename.startswith(prefix):
                continue
            data = src.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(x for x in lines if not x.startswith(prefix)).encode()
            dst.writestr(item, data)
    tmp.replace(wheel)
    return before - wheel.stat().st_size


if __name__ == "__main__":
    if sys.argv[1:2] == ["--trim"]:
        for whl in Path(sys.argv[2]).glob("inspect_ai-*.whl"):
            print(f"trimmed {whl.name}: {trim_wheel(whl, 'inspect_ai/binaries/') / 1e6:.1f} MB less", file=sys.stderr)
    else:
        sys.stdout.write("\n".join(closure()) + "\n")
