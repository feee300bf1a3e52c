"""Checkpoints on scratch and their manifests: which files are weights, their hashes, and the check before use.

A manifest (``checkpoint.json`` in results) records the sha256 of every weight file of a finished checkpoint;
evaluation and dependent trainings verify those before trusting the directory (scratch may be purged or changed).
"""

from __future__ import annotations

from pathlib import Path

from ptflow.files import sha256_file

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


def weight_files(checkpoint: Path) -> list[Path]:
    return sorted(p for p in Path(checkpoint).rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)


def has_weights(path: Path) -> bool:
    return Path(path).is_dir() and bool(weight_files(path))


def describe_checkpoint(checkpoint: Path) -> dict:
    weights = weight_files(checkpoint)
    if not weights:
        raise RuntimeError(f"trainer finished but {checkpoint} holds no weight files ({', '.join(WEIGHT_SUFFIXES)})")
    return {
        "bytes": sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file()),
        "weights": [{"path": p.relative_to(checkpoint).as_posix(), "sha256": sha256_file(p)} for p in weights],
    }


def verify_checkpoint(manifest: dict) -> Path:
    """The checkpoint a manifest names, after checking its weights are those that were written."""
    ckpt = Path(manifest["checkpoint"])
    for w in manifest["weights"]:
        p = ckpt / w["path"]
        if not p.is_file():
            raise FileNotFoundError(
                f"checkpoint file {p} named in the manifest is missing (scratch purged?); "
                "delete the manifest to retrain this cell"
            )
        if sha256_file(p) != w["sha256"]:
            raise RuntimeError(
                f"checkpoint file {p} differs from the manifest's sha256; it was changed after "
                "training — delete the manifest to retrain this cell"
            )
    return ckpt
