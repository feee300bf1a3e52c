import json

import pytest

from ptflow.files import atomic_path, write_json_atomic


def test_failed_write_leaves_old_content_and_no_temp(tmp_path):
    target = tmp_path / "eval.json"
    write_json_atomic(target, {"v": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text('{"v": 2, "trunc')  # a writer killed half-way
            raise RuntimeError("killed")
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["eval.json"]


def test_failed_first_write_leaves_nothing(tmp_path):
    target = tmp_path / "sub" / "eval.json"
    with pytest.raises(ValueError):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise ValueError
    assert not target.exists() and list(target.parent.iterdir()) == []
