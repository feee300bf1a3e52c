"""Files written whole or not at all, and their hashes.

Atomic writes: a temp file in the target's directory, fsync, then rename, so a job killed mid-write leaves either
the old file or none, never a truncated one that looks valid. Directories (checkpoints, models) are built under a
temp sibling and swapped in with :func:`promote_dir`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _default_mode() -> int:
    """What open() would give a new file under this process's umask (mkstemp's 600 would hide results)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path: str | Path, mode: int | None = None) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success it gets ``mode`` (default: as under the umask) and is renamed
    onto ``path``, on error removed. The temp file is created with mode 600: a secret is never readable while it is
    being written."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, _default_mode() if mode is None else mode)
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text_atomic(path: str | Path, text: str, mode: int | None = None) -> None:
    with atomic_path(path, mode) as tmp:
        tmp.write_text(text)


def write_json_atomic(path: str | Path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def staged_dir(path: str | Path) -> Iterator[Path]:
    """Yield an empty temp dir beside ``path``; on success it replaces ``path`` (whatever was there), on error it is
    removed and ``path`` is left as it was."""
    target = Path(path).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        promote_dir(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def promote_dir(src: str | Path, dest: str | Path) -> None:
    """Move the finished directory ``src`` onto ``dest`` (same filesystem), replacing what was there. Between the
    removal and the rename a crash leaves no ``dest`` — never a half-written one."""
    dest = Path(dest)
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    elif dest.exists() or dest.is_symlink():
        dest.unlink()
    os.replace(src, dest)


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def link_or_copy(src: str | Path, dest: str | Path, counts: dict | None = None) -> None:
    """``dest`` as a hard link to ``src`` (same file, no bytes copied), or a copy where the filesystem refuses the link
    (another filesystem, one without hard links, the link-count limit). ``counts`` tallies ``linked``/``copied``."""
    try:
        os.link(src, dest, follow_symlinks=False)
        kind = "linked"
    except OSError:
        shutil.copy2(src, dest)
        kind = "copied"
    if counts is not None:
        counts[kind] = counts.get(kind, 0) + 1


def link_tree(src: str | Path, dest: str | Path, counts: dict | None = None) -> None:
    """``src`` rebuilt at ``dest`` (new directories, symlinks as symlinks) with every regular file hard-linked
    (:func:`link_or_copy`): ``cp -al`` with a copy where a link cannot be made."""
    shutil.copytree(src, dest, symlinks=True, copy_function=lambda s, d: link_or_copy(s, d, counts))
