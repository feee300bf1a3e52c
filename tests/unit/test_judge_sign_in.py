"""A judge's subscription sign-in (config ``judge``'s ``sign_in: {credentials: <file>}``): what the config accepts and
refuses in one line, preflight asking for the file, and how the vote mounts it (``ptflow.stages.judge.sign_in``).
The REAL codex signed in this way judges a cell in tests/integration/test_judge_sign_in.py."""

from __future__ import annotations

import os

import pytest

from ptflow.config.judges import panel_of
from ptflow.config.validate import ConfigError
from ptflow.keys import Masker
from ptflow.stages.judge import sign_in
from tests.conftest import REPO
from tests.support.codex_sign_in import write_codex_sign_in

ACCESS, REFRESH = "fixture-access-0123456789abcdef", "rt-fixture-0123456789abcdef"


def test_a_judge_signs_in_with_its_credentials_file_as_an_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    panel = panel_of({"judges": [
        {"id": "gpt", "agent": "codex", "model": "gpt-5.4", "sign_in": {"credentials": "auth/auth.json"}},
        {"id": "kimi", "agent": "opencode", "model": "kimi-k2.6", "keys": ["OPENCODE_API_KEY"]},
    ]})  # fmt: skip
    gpt = panel.judge("gpt")
    assert gpt.sign_in == str(tmp_path / "auth/auth.json") and gpt.keys == []
    assert gpt.settings == {"agent": "codex", "model": "gpt-5.4", "sign_in": {"credentials": gpt.sign_in}}
    assert panel.sign_ins == {"gpt": gpt.sign_in} and panel.keys == ["OPENCODE_API_KEY"]
    home = panel_of({"agent": "codex", "model": "m", "sign_in": {"credentials": "~/.codex/auth.json"}})
    assert home.judges[0].sign_in == os.path.expanduser("~/.codex/auth.json")


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"agent": "claude", "model": "m", "sign_in": {"credentials": "x"}},
         "config error at judge.sign_in: ptflow knows no subscription sign-in of claude (it knows codex's); give "
         "claude an API key in keys instead"),
        ({"agent": "codex", "model": "m", "keys": ["OPENAI_API_KEY"], "sign_in": {"credentials": "x"}},
         "config error at judge: keys and sign_in together; codex signed in uses the subscription with its API key "
         "variables emptied: remove keys or sign_in"),
        ({"cli": ["python", "judge.py"], "sign_in": {"credentials": "x"}},
         "config error at judge.sign_in: only an agent judge signs in (its CLI reads the credentials file); a cli "
         "judge gets its key through keys"),
        ({"judges": [{"id": "g", "agent": "codex", "model": "m", "sign_in": {}}]},
         "config error at judge.judges[0].sign_in: give sign_in: {credentials: <path of codex's auth.json>}"),
    ],
)  # fmt: skip
def test_a_sign_in_that_cannot_work_is_refused_in_one_line(raw, message):
    with pytest.raises(ConfigError) as exc:
        panel_of(raw)
    assert str(exc.value) == message


def test_the_schema_takes_sign_in_in_both_forms(default_raw, tmp_path):
    from ptflow.config.load import build_config

    default_raw["judge"] = {"agent": "codex", "model": "m", "sign_in": {"credentials": str(tmp_path / "a.json")}}
    assert build_config(default_raw).judge_panel.judges[0].sign_in == str(tmp_path / "a.json")
    default_raw["judge"] = {"judges": [{"id": "g", "agent": "codex", "model": "m", "sign_in": {"file": "x"}}]}
    with pytest.raises(ConfigError, match="sign_in"):
        build_config(default_raw)


def test_preflight_asks_for_the_credentials_file(tmp_path):
    from ptflow.cluster.preflight import check_secrets
    from ptflow.config.load import load

    cfg = load(REPO, ["config/posttrainbench-ptflow.yaml"], base_dir=REPO).cfg
    auth = tmp_path / "auth.json"
    cfg.raw["judge"] = {"agent": "codex", "model": "gpt-5.4", "sign_in": {"credentials": str(auth)}}
    env = {"OPENAI_API_KEY": "x", "ANTHROPIC_API_KEY": "y", "GEMINI_API_KEY": "z", "HF_TOKEN": "t"}
    assert check_secrets(cfg, env=env) == [
        f"judge codex's sign_in.credentials: no credentials file at {auth}; sign its CLI in (codex login writes "
        "~/.codex/auth.json) and name that file there, or give the judge keys instead"
    ]
    write_codex_sign_in(auth, ACCESS, REFRESH)
    assert check_secrets(cfg, env=env) == []  # and no key asked of the signed-in judge


def test_the_sign_in_is_mounted_never_copied_and_its_tokens_masked(tmp_path):
    auth = write_codex_sign_in(tmp_path / "user" / "auth.json", ACCESS, REFRESH)
    host = tmp_path / "home"
    assert sign_in.mount("codex", auth, host, str(host), container=False) == [str(auth)]  # enroot-edf: its own path
    assert (host / ".codex/auth.json").is_symlink() and (host / ".codex/auth.json").resolve() == auth
    binds = sign_in.mount("codex", auth, host, "/home/ben", container=True)
    assert binds == [f"{auth}:/home/ben/.codex/auth.json"] and (host / ".codex/auth.json").read_bytes() == b""
    assert sign_in.emptied_keys("codex") == {"CODEX_API_KEY": "", "OPENAI_API_KEY": ""}  # as run_judge.sh
    masker = sign_in.masking(Masker(["sk-some-key-0123456789"]), auth)
    assert masker.mask(f"{ACCESS} {REFRESH} sk-some-key-0123456789") == "*** *** ***"
    assert sign_in.masking(masker, None) is masker
