"""`skyrl_sdk.agents.policy_spec`: one parser of policy specs for `skyrl eval` and `skyrl serve`,
with one set of errors (naming the spec and what is accepted) and one set of key variables."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from skyrl_sdk.agents.policy_spec import (
    POLICY_SPEC_HELP,
    LoadedPolicy,
    PolicyKind,
    PolicySpec,
    PolicySpecError,
    PolicyUse,
    load_error,
    load_policy,
    load_renderer,
    parse_policy_spec,
    url_api_key,
)

ACCEPTED = f"; accepted: {POLICY_SPEC_HELP}"


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scripted file `script.json` and a (weightless) model directory `model/`, in the cwd."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "script.json").write_text(json.dumps({"t0": ["hi"]}))
    (tmp_path / "model").mkdir()
    return tmp_path


def test_every_accepted_spec_parses_to_its_kind(files: Path) -> None:
    assert parse_policy_spec("tiny") == PolicySpec("tiny", PolicyKind.TINY, "tiny")
    assert parse_policy_spec("model") == PolicySpec("model", PolicyKind.LOCAL, "model")
    assert parse_policy_spec("local:model") == PolicySpec("local:model", PolicyKind.LOCAL, "model")
    assert parse_policy_spec("scripted:script.json") == PolicySpec(
        "scripted:script.json", PolicyKind.SCRIPTED, "script.json"
    )
    url = "https://example.org:8000/v1"
    assert parse_policy_spec(url) == PolicySpec(url, PolicyKind.URL, url)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("no-such-thing", "not 'tiny', a model directory, scripted:FILE or a URL"),
        ("local:no-such-dir", "no such model directory: 'no-such-dir'"),
        ("local:", "no such model directory: ''"),
        ("script.json", "not 'tiny', a model directory, scripted:FILE or a URL"),  # a file
        ("scripted:missing.json", "no such file: 'missing.json'"),
        ("scripted:model", "no such file: 'model'"),  # a directory
        ("scripted:", "no such file: ''"),
        ("http://", "the URL has no host"),
        ("https:///v1", "the URL has no host"),
    ],
)
@pytest.mark.parametrize("use", list(PolicyUse))
def test_a_bad_spec_is_one_error_naming_it_and_what_is_accepted(
    files: Path, spec: str, problem: str, use: PolicyUse
) -> None:
    """Both uses refuse the same specs with the same message, before anything loads."""
    message = f"policy spec {spec!r}: {problem}{ACCEPTED}"
    with pytest.raises(PolicySpecError) as raised:
        parse_policy_spec(spec)
    assert str(raised.value) == message
    with pytest.raises(PolicySpecError) as raised:
        load_policy(spec, use=use)
    assert str(raised.value) == message


@pytest.mark.parametrize("use", list(PolicyUse))
def test_a_bad_api_mode_and_a_missing_tokenizer_are_named(files: Path, use: PolicyUse) -> None:
    url = "http://127.0.0.1:9/v1"
    with pytest.raises(PolicySpecError, match=r"policy spec 'http://127.0.0.1:9/v1': api 'fast' "):
        load_policy(url, api="fast", use=use)
    missing = "tokenizer 'no-such-dir': not a directory; give a tokenizer directory or 'tiny'"
    with pytest.raises(PolicySpecError, match=re.escape(missing)):
        load_policy(url, tokenizer="no-such-dir", use=use)
    with pytest.raises(PolicySpecError, match=re.escape(missing)):
        load_renderer("no-such-dir", use=use)


_KEYS = ("SKYRL_UPSTREAM_API_KEY", "SKYRL_API_KEY", "OPENAI_API_KEY")


@pytest.mark.parametrize(
    ("use", "set_", "sent"),
    [
        (PolicyUse.PLAY, _KEYS, "SKYRL_UPSTREAM_API_KEY"),
        (PolicyUse.PLAY, _KEYS[1:], "SKYRL_API_KEY"),  # a keyed `skyrl serve`, as before
        (PolicyUse.PLAY, _KEYS[2:], "OPENAI_API_KEY"),
        (PolicyUse.SERVE, _KEYS, "SKYRL_UPSTREAM_API_KEY"),
        (PolicyUse.SERVE, _KEYS[1:], "OPENAI_API_KEY"),  # the server's own key stays home
        (PolicyUse.SERVE, _KEYS[1:2], None),
        (PolicyUse.PLAY, (), None),
    ],
)
def test_one_set_of_key_variables(
    monkeypatch: pytest.MonkeyPatch, use: PolicyUse, set_: tuple[str, ...], sent: str | None
) -> None:
    for name in _KEYS:
        monkeypatch.delenv(name, raising=False)
    for name in set_:
        monkeypatch.setenv(name, f"key-of-{name}")
    expected = f"key-of-{sent}" if sent else None
    assert url_api_key(use) == expected
    loaded = load_policy("http://127.0.0.1:9/v1", use=use, model="m")
    try:
        header = loaded.policy._http.headers.get("Authorization")
        assert header == (f"Bearer {expected}" if expected else None)
        assert loaded.model_name == "m" and loaded.renderer is None
    finally:
        asyncio.run(loaded.policy.aclose())


def test_scripted_renders_with_tiny_only_when_served(files: Path) -> None:
    """Serving needs token ids for every captured turn; playing a scripted policy does not."""
    played = load_policy("scripted:script.json")
    served = load_policy("scripted:script.json", use=PolicyUse.SERVE)
    assert isinstance(played, LoadedPolicy) and played.renderer is None
    assert played.model_name == served.model_name == "scripted"
    assert served.renderer is not None and served.policy.renderer is served.renderer


def test_load_error_prefixes_only_what_does_not_name_the_spec() -> None:
    refused = PolicySpecError(f"policy spec 'x': empty{ACCEPTED}")
    assert load_error("x", refused) == str(refused)
    assert (
        load_error("ckpt", OSError("no config.json")) == "cannot load policy 'ckpt': no config.json"
    )


def _skyrl(*args: str, cwd: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "skyrl_gym.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert out.returncode != 0
    return " ".join((out.stdout + out.stderr).split())  # rich wraps long lines


def test_eval_and_serve_refuse_a_bad_spec_with_the_same_message(tmp_path: Path) -> None:
    message = f"policy spec 'no-such-thing': not 'tiny', a model directory, scripted:FILE or a URL{ACCEPTED}"
    said_eval = _skyrl("eval", "math", "-p", "no-such-thing", "-n", "1", "-o", "run", cwd=tmp_path)
    said_serve = _skyrl("serve", "--policy", "no-such-thing", "--port", "0", cwd=tmp_path)
    assert message in said_eval, said_eval
    assert message in said_serve, said_serve


def test_the_old_names_still_load_with_a_deprecation_warning(files: Path) -> None:
    from skyrl_sdk.agents.evaluate import EvalError

    with pytest.warns(DeprecationWarning, match="evaluate.load_policy is deprecated"):
        from skyrl_sdk.agents.evaluate import load_policy as old_eval_load
    with pytest.warns(DeprecationWarning, match="serving.policies.load_policy is deprecated"):
        from skyrl_sdk.agents.serving.policies import load_policy as old_serve_load
    policy = old_eval_load("scripted:script.json")
    assert policy.renderer is None and not isinstance(policy, LoadedPolicy)  # the bare Policy
    with pytest.raises(EvalError, match=r"policy spec 'nope': "):  # its old error type
        old_eval_load("nope")
    loaded = old_serve_load("http://127.0.0.1:9/v1", upstream_model="up")
    try:
        assert loaded.model_name == "up"
    finally:
        asyncio.run(loaded.policy.aclose())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the other names are plain re-exports, no warning
        from skyrl_sdk.agents.evaluate import POLICY_SPEC_HELP as help_text
        from skyrl_sdk.agents.serving.policies import PolicySpecError as error_type
    assert help_text is POLICY_SPEC_HELP and error_type is PolicySpecError
