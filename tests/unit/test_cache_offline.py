"""The HF cache stage without the network: offline marker from a pre-populated cache, every missing repo named."""

import json

import pytest

from ptflow.cluster import hfcache
from ptflow.cluster.preflight import check_hf_cache
from ptflow.config.layout import Layout
from ptflow.config.matrix import build_config
from ptflow.stages import cache


@pytest.fixture
def populated(tmp_path):
    """A cache holding org/model@main as the hub layout has it (pre-populated, as on a cluster's shared FS)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text('{"a": 1}')
    home = tmp_path / "hf"
    commit = hfcache.publish_local_repo(home, "org/model", "model", src)
    return home, commit


@pytest.fixture
def no_network(monkeypatch):
    """Stand-in for an unreachable hub: huggingface_hub's own offline switch (this machine may have internet)."""
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_marker_written_offline_from_populated_cache(populated, tmp_path, no_network, monkeypatch):
    home, commit = populated
    monkeypatch.setenv("HF_TOKEN", "hf_SECRETTOKEN")
    lines = []
    marker = tmp_path / "m.json"
    entry = cache.cache_model(home, {"id": "org/model", "source": "hub", "revision": "main"}, [], marker, lines.append)
    assert entry["commit"] == commit and entry["files"] == [{"path": "config.json", "bytes": 8}]
    assert json.loads(marker.read_text())["revision"] == "main"
    assert any("no network used" in line for line in lines)
    assert "SECRETTOKEN" not in marker.read_text() + "".join(lines)  # the token never reaches markers or logs


def test_missing_repo_fails_naming_it(populated, no_network, tmp_path):
    home, _ = populated
    with pytest.raises(cache.MissingReposError, match=r"model org/absent@v1 is not in .* could not be downloaded"):
        cache.fetch_hub_repo(home, "org/absent", "model", "v1", log=lambda _: None)


def test_preflight_lists_every_missing_repo_at_once(populated, default_raw):
    home, _ = populated
    default_raw["models"] = [
        {"id": "org/model", "source": "hub", "revision": "main"},
        {"id": "org/absent-a", "source": "hub", "revision": "main"},
        {"id": "org/absent-b", "source": "hub", "revision": "abc123"},
    ]
    default_raw["evals"][0]["dataset"] = {"source": "hub", "repo": "org/data", "revision": "main"}
    cfg = build_config(default_raw)
    layout = Layout("results", "scratch", str(home))
    (problem,) = check_hf_cache(cfg, layout, env={"HF_HUB_OFFLINE": "1"})
    assert "lacks 3 repo(s) and HF_HUB_OFFLINE is set" in problem
    for name in ("model org/absent-a@main", "model org/absent-b@abc123", "dataset org/data@main"):
        assert name in problem
    assert "org/model@" not in problem  # present repos are not listed
    (problem,) = check_hf_cache(cfg, layout, env={}, reachable=lambda: False)
    assert "the hub is unreachable" in problem
    assert check_hf_cache(cfg, layout, env={}, reachable=lambda: True) == []  # the cache rules will fetch them


def test_local_default_needs_no_hub(default_raw):
    assert hfcache.hub_repos_needed(build_config(default_raw)) == []
