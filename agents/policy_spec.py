"""Policy specs: the one parser of `--policy SPEC` for `skyrl eval`, `skyrl serve` and the runners.

A spec names one of:

- `tiny`: the tiny local model (built on first use, never downloaded);
- a model directory, or `local:DIR`: a `LocalEngine` on that checkpoint;
- `scripted:FILE`: `ScriptedPolicy.from_file` (JSON actions, replayed per task or session);
- `http://...` / `https://...`: an OpenAI-compatible server (`skyrl serve`, vLLM, SGLang).

`parse_policy_spec` reads a spec into a typed `PolicySpec` without loading anything (a bad
spec fails at once, naming the spec and what is accepted); `load_policy` builds the policy.
Both commands accept the same specs with the same errors; what differs is only what the
policy is for (`PolicyUse`): `skyrl eval` plays episodes with it, `skyrl serve` renders
OpenAI requests for it (so the tiny tokenizer renders with `TOOLS_TEMPLATE`, a scripted
policy gets a tokenizer by default, and the server's own key is never sent upstream).

The API key sent to a URL is the first variable of `KEY_ENVS` that is set:
`$SKYRL_UPSTREAM_API_KEY`, then `$SKYRL_API_KEY` (the key `skyrl serve --api-key` reads, so
`skyrl eval` reaches a keyed `skyrl serve`; skipped when serving, since there it is the key the
server's own clients send), then `$OPENAI_API_KEY`.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from skyrl_sdk.http_guard import API_KEY_ENV

if TYPE_CHECKING:
    from skyrl_sdk.agents.chat import ChatRenderer
    from skyrl_sdk.agents.engine.fairness import FairnessLimits
    from skyrl_sdk.agents.openai_client import ApiMode
    from skyrl_sdk.agents.policy import Policy

__all__ = [
    "KEY_ENVS",
    "POLICY_SPEC_HELP",
    "UPSTREAM_KEY_ENV",
    "LoadedPolicy",
    "PolicyKind",
    "PolicySpec",
    "PolicySpecError",
    "PolicyUse",
    "load_error",
    "load_policy",
    "load_renderer",
    "parse_policy_spec",
    "url_api_key",
]

POLICY_SPEC_HELP = (
    "tiny (a tiny model built locally), a model directory (or local:DIR), an "
    "OpenAI-compatible URL (http://host:port/v1), or scripted:FILE (JSON actions)."
)
"""What a spec may be, as every error about one says."""

UPSTREAM_KEY_ENV = "SKYRL_UPSTREAM_API_KEY"
"""The API key of the server a URL spec names, first of `KEY_ENVS`."""
OPENAI_KEY_ENV = "OPENAI_API_KEY"
"""The openai SDK's own key variable, last of `KEY_ENVS`."""
KEY_ENVS = (UPSTREAM_KEY_ENV, API_KEY_ENV, OPENAI_KEY_ENV)
"""The variables a URL spec's API key is read from, first set wins (`API_KEY_ENV` is skipped
when serving: see the module docstring)."""

TINY = "tiny"
SCRIPTED_PREFIX = "scripted:"
LOCAL_PREFIX = "local:"
URL_SCHEMES = ("http://", "https://")


class PolicySpecError(ValueError):
    """A policy spec (or its tokenizer) names nothing that can be loaded; the message names
    the spec and what is accepted."""


class PolicyKind(enum.Enum):
    """What a spec names."""

    TINY = "tiny"
    """The tiny local model."""
    LOCAL = "local"
    """A model directory, loaded in a `LocalEngine`."""
    SCRIPTED = "scripted"
    """A JSON file of scripted actions."""
    URL = "url"
    """An OpenAI-compatible server."""


class PolicyUse(enum.Enum):
    """What the loaded policy is for: the only thing the two commands load differently."""

    PLAY = "play"
    """The SDK plays episodes with it (`skyrl eval`, Harbor, SWE-bench, Text-to-SQL)."""
    SERVE = "serve"
    """`skyrl serve` answers OpenAI requests with it, rendered to token ids by the server."""


@dataclass(frozen=True)
class PolicySpec:
    """A parsed policy spec (nothing loaded yet)."""

    text: str
    """The spec as given, for messages."""
    kind: PolicyKind
    """What it names."""
    target: str
    """The URL, the model directory or the scripted file ("tiny" for the tiny model)."""


@dataclass(frozen=True)
class LoadedPolicy:
    """A policy and what its requests are rendered with."""

    policy: Policy
    """The policy."""
    renderer: ChatRenderer | None
    """What `skyrl serve` renders chat requests with (None: text only; for a URL without a
    tokenizer, or a scripted policy played without one)."""
    model_name: str
    """The name clients use by default."""


def _spec_error(spec: str, problem: str) -> PolicySpecError:
    return PolicySpecError(f"policy spec {spec!r}: {problem}; accepted: {POLICY_SPEC_HELP}")


def parse_policy_spec(spec: str) -> PolicySpec:
    """The spec read (see `POLICY_SPEC_HELP`), or `PolicySpecError` naming it: an empty spec,
    a URL without a host, a scripted file or a model directory that does not exist."""
    if not isinstance(spec, str) or not spec.strip():
        raise _spec_error(str(spec), "empty")
    if spec.startswith(URL_SCHEMES):
        if not urlsplit(spec).netloc:
            raise _spec_error(spec, "the URL has no host")
        return PolicySpec(spec, PolicyKind.URL, spec)
    if spec.startswith(SCRIPTED_PREFIX):
        path = spec.removeprefix(SCRIPTED_PREFIX)
        if not path or not Path(path).is_file():
            raise _spec_error(spec, f"no such file: {path!r}")
        return PolicySpec(spec, PolicyKind.SCRIPTED, path)
    if spec == TINY:
        return PolicySpec(spec, PolicyKind.TINY, TINY)
    path = spec.removeprefix(LOCAL_PREFIX)
    if not path or not Path(path).is_dir():
        what = f"no such model directory: {path!r}" if spec.startswith(LOCAL_PREFIX) else None
        raise _spec_error(spec, what or "not 'tiny', a model directory, scripted:FILE or a URL")
    return PolicySpec(spec, PolicyKind.LOCAL, path)


def load_error(spec: str, error: Exception) -> str:
    """The one-line message for a spec that failed to load: a `PolicySpecError` already names
    the spec and what is accepted; anything else (a broken checkpoint) is prefixed with it."""
    if isinstance(error, PolicySpecError):
        return str(error)
    return f"cannot load policy {spec!r}: {error}"


def url_api_key(use: PolicyUse) -> str | None:
    """The API key sent to a URL spec: the first of `KEY_ENVS` that is set (see the module
    docstring for why serving skips `$SKYRL_API_KEY`)."""
    for name in KEY_ENVS:
        if use is PolicyUse.SERVE and name == API_KEY_ENV:
            continue
        if value := os.environ.get(name):
            return value
    return None


def load_renderer(tokenizer: str | None, *, use: PolicyUse = PolicyUse.PLAY) -> ChatRenderer | None:
    """A renderer from a tokenizer directory or `tiny` (None for None). The tiny tokenizer
    renders with its own ChatML template when played and with `TOOLS_TEMPLATE` when served
    (requests carry OpenAI tool calls and tool results)."""
    if tokenizer is None:
        return None
    if tokenizer == TINY:
        from skyrl_sdk.agents.tiny import tiny_model_dir, tiny_renderer

        if use is PolicyUse.SERVE:
            return tiny_renderer()
        path = tiny_model_dir()
    else:
        path = Path(tokenizer)
        if not path.is_dir():
            raise PolicySpecError(
                f"tokenizer {tokenizer!r}: not a directory; give a tokenizer directory or 'tiny'"
            )
    from transformers import AutoTokenizer

    from skyrl_sdk.agents.chat import ChatRenderer

    return ChatRenderer(AutoTokenizer.from_pretrained(path))


def load_policy(
    spec: str,
    *,
    use: PolicyUse = PolicyUse.PLAY,
    tokenizer: str | None = None,
    api: ApiMode | str | None = None,
    model: str | None = None,
    device: str = "cpu",
    max_batch_size: int = 16,
    fairness: FairnessLimits | None = None,
) -> LoadedPolicy:
    """Load what `spec` names (see the module docstring), or raise `PolicySpecError`.

    `tokenizer`: a directory or `tiny`, for URL and scripted policies (serving defaults a
    scripted one to `tiny`); `api`: a URL's endpoint (`auto`, `tokens`, `chat`; default `auto`
    when played, and when served `tokens` with a tokenizer, else `chat`); `model`: a URL's
    model name; `device`, `max_batch_size`, `fairness`: a local engine's (fairness: its caps
    per session on rows of the batch and waiting requests, default half the batch, 64).
    """
    parsed = parse_policy_spec(spec)
    if parsed.kind is PolicyKind.URL:
        return _load_url(parsed, use, tokenizer, api, model)
    if parsed.kind is PolicyKind.SCRIPTED:
        from skyrl_sdk.agents.scripted import ScriptedPolicy

        if tokenizer is None and use is PolicyUse.SERVE:
            tokenizer = TINY  # the server needs token ids for every turn it captures
        renderer = load_renderer(tokenizer, use=use)
        return LoadedPolicy(ScriptedPolicy.from_file(parsed.target, renderer), renderer, "scripted")
    from skyrl_sdk.agents.engine import LocalEngine

    engine_args = {"device": device, "max_batch_size": max_batch_size, "fairness": fairness}
    if parsed.kind is PolicyKind.TINY:
        from skyrl_sdk.agents.tiny import tiny_model_dir, tiny_renderer

        directory = tiny_model_dir()
        # One decoding thread: see `LocalEngine.num_threads` (a second one only loses time).
        engine = LocalEngine.from_pretrained(directory, name=TINY, num_threads=1, **engine_args)
        served = tiny_renderer(directory) if use is PolicyUse.SERVE else engine.renderer
        return LoadedPolicy(engine, served, TINY)
    engine = LocalEngine.from_pretrained(parsed.target, **engine_args)
    return LoadedPolicy(engine, engine.renderer, Path(parsed.target).name)


def _load_url(
    parsed: PolicySpec,
    use: PolicyUse,
    tokenizer: str | None,
    api: ApiMode | str | None,
    model: str | None,
) -> LoadedPolicy:
    from skyrl_sdk.agents.openai_client import ApiMode, OpenAIClient

    renderer = load_renderer(tokenizer, use=use)
    if api is None:
        if use is PolicyUse.SERVE:
            api = ApiMode.TOKENS if renderer is not None else ApiMode.CHAT
        else:
            api = ApiMode.AUTO
    try:
        mode = ApiMode(api)
    except ValueError:
        accepted = ", ".join(m.value for m in ApiMode)
        raise PolicySpecError(
            f"policy spec {parsed.text!r}: api {api!r} is not one of {accepted}"
        ) from None
    client = OpenAIClient(
        parsed.target, model=model, renderer=renderer, api=mode, api_key=url_api_key(use)
    )
    return LoadedPolicy(client, renderer, model or "default")
