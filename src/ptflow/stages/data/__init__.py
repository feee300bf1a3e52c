"""The data stage: evaluation datasets made or fetched (``synthetic`` GSM8K-format arithmetic for the embedded
default) and turned into verl's RL parquet (``verl_format``, ``preprocess``), the format trainers and agents read."""
