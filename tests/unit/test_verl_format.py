import pandas as pd
import pytest

from ptflow.stages.data.synthetic import generate_arithmetic
from ptflow.stages.data.verl_format import (
    INSTRUCTION,
    VERL_COLUMNS,
    ground_truth_of,
    to_verl_frame,
    validate_verl_frame,
    write_parquet,
)


@pytest.fixture
def frame():
    return to_verl_frame(generate_arithmetic("sub", 1, 20, 0), "synthetic/sub", "test")


def test_schema(frame):
    assert list(frame.columns) == VERL_COLUMNS
    row = frame.iloc[0]
    q = row.extra_info["question"]
    assert row.prompt == [{"role": "user", "content": q + " " + INSTRUCTION}]
    assert row.ability == "math" and row.data_source == "synthetic/sub"
    assert row.reward_model == {"style": "rule", "ground_truth": ground_truth_of(row.extra_info["answer"])}
    assert row.extra_info["split"] == "test" and row.extra_info["index"] == 0
    assert list(frame.extra_info.map(lambda e: e["index"])) == list(range(20))
    validate_verl_frame(frame)


def test_ground_truth_strips_commas():
    assert ground_truth_of("so\n#### 1,234") == "1234"
    assert ground_truth_of("#### -3") == "-3"
    with pytest.raises(ValueError):
        ground_truth_of("no answer")


def test_parquet_round_trip(frame, tmp_path):
    path = tmp_path / "sub" / "test.parquet"
    write_parquet(frame, path)
    assert [p.name for p in path.parent.iterdir()] == ["test.parquet"]  # no temp file left
    back = pd.read_parquet(path)
    validate_verl_frame(back)
    assert list(back.columns) == VERL_COLUMNS
    for a, b in zip(frame.to_dict("records"), back.to_dict("records"), strict=True):
        assert [dict(m) for m in b["prompt"]] == a["prompt"]
        assert b["reward_model"] == a["reward_model"] and b["extra_info"] == a["extra_info"]


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda df: df.drop(columns=["ability"]), "missing column"),
        (lambda df: df.assign(data_source=[""] * len(df)), "row 0, column 'data_source'"),
        (lambda df: df.assign(prompt=[[]] * len(df)), "row 0, column 'prompt'"),
        (lambda df: df.assign(prompt=[[{"role": "assistant", "content": "x"}]] * len(df)), "'prompt'"),
        (lambda df: df.assign(reward_model=[{"style": "model", "ground_truth": "1"}] * len(df)), "reward_model"),
        (lambda df: df.head(0), "no rows"),
    ],
)
def test_validation_errors(frame, mutate, match):
    with pytest.raises(ValueError, match=match):
        validate_verl_frame(mutate(frame))


def test_validation_names_the_bad_row(frame):
    extra = list(frame.extra_info)
    extra[3] = {k: v for k, v in extra[3].items() if k != "answer"}
    with pytest.raises(ValueError, match="row 3, column 'extra_info'"):
        validate_verl_frame(frame.assign(extra_info=extra))
    extra[3] = dict(frame.extra_info[3], answer="#### 999")
    with pytest.raises(ValueError, match="row 3, column 'extra_info'"):
        validate_verl_frame(frame.assign(extra_info=extra))
