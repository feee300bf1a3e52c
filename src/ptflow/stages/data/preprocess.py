"""Preprocessing: a GSM8K-format dataset from the HF cache -> verl RL parquet (train and test)."""

from __future__ import annotations

from pathlib import Path

from ptflow.files import atomic_path

GSM8K_SPLIT_FILE = "main/{split}-00000-of-00001.parquet"  # the layout of openai/gsm8k on the hub (cache writes it)


def preprocess_gsm8k(
    snapshot: str | Path, data_source: str, out_train: str | Path, out_test: str | Path, log=print
) -> dict:
    """Write verl-format parquet for both splits; return row counts."""
    import pandas as pd

    from ptflow.stages.data.verl_format import to_verl_frame, validate_verl_frame

    counts = {}
    for split, out in (("train", out_train), ("test", out_test)):
        src = Path(snapshot) / GSM8K_SPLIT_FILE.format(split=split)
        if not src.is_file():
            raise FileNotFoundError(f"{src} is missing: a gsm8k-format dataset needs {GSM8K_SPLIT_FILE}")
        records = pd.read_parquet(src).to_dict("records")
        frame = to_verl_frame(records, data_source, split)
        validate_verl_frame(frame)
        with atomic_path(out) as tmp:
            frame.to_parquet(tmp, index=False)
        counts[split] = len(frame)
        log(f"{split}: {len(frame)} rows from {src.name} -> {out}")
    return counts
