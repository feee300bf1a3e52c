import pytest

from ptflow.config import naming


@pytest.mark.parametrize(
    "repo_id",
    ["Qwen/Qwen3-1.7B-Base", "google/gemma-3-4b-pt", "HuggingFaceTB/SmolLM3-3B-Base", "gpt2", "a_b/c.d-e"],
)
def test_model_names_round_trip(repo_id):
    name = naming.model_to_path(repo_id)
    assert "/" not in name
    assert naming.path_to_model(name) == repo_id


def test_model_name_matches_wildcard_pattern():
    import re

    assert re.fullmatch(naming.MODEL_NAME_PATTERN, naming.model_to_path("Qwen/Qwen3-1.7B-Base"))
    assert not re.fullmatch(naming.MODEL_NAME_PATTERN, "Qwen/Qwen3")


@pytest.mark.parametrize("bad", ["a--b/c", "a/b..c", "a/b/c", "/abc", "a b/c", "", "org/name.git"])
def test_bad_repo_ids_are_refused(bad):
    with pytest.raises(naming.NameError_, match="repo id"):
        naming.model_to_path(bad)


@pytest.mark.parametrize("bad", ["with/slash", "-dash", "sp ace", "x" * 65, ""])
def test_unsafe_agent_ids_are_refused(bad):
    with pytest.raises(naming.NameError_, match="path-safe"):
        naming.check_safe_id("agent", bad)
