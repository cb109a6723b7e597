"""`skyrl serve --policy SPEC`: what a spec names, loaded with the renderer requests use.

- `tiny`: the tiny local model (built on first use, never downloaded), rendered with
  `TOOLS_TEMPLATE` (ChatML with Qwen/Hermes tools);
- a model directory: a `LocalEngine`, rendered with the model's own chat template;
- `scripted:FILE`: `ScriptedPolicy.from_file`, replayed per session, tokenized with the tiny
  byte-level tokenizer and `TOOLS_TEMPLATE` unless `--tokenizer DIR` names another;
- `http://...` / `https://...`: an upstream OpenAI-compatible server (vLLM, SGLang) that we
  proxy; with `--tokenizer DIR` (the upstream model's tokenizer) requests go to its
  `/completions` as token ids and the capture is token-exact; without one, to its chat
  endpoint, text only (captured turns are then marked `text_only`, not trainable).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skyrl_sdk.agents.chat import ChatRenderer
    from skyrl_sdk.agents.fairness import FairnessLimits
    from skyrl_sdk.agents.policy import Policy

UPSTREAM_KEY_ENV = "SKYRL_UPSTREAM_API_KEY"
"""The upstream server's API key (else `$OPENAI_API_KEY`)."""


class PolicySpecError(ValueError):
    """The spec names nothing `skyrl serve` can load."""


@dataclass(frozen=True)
class LoadedPolicy:
    """A policy ready to serve."""

    policy: Policy
    """The policy."""
    renderer: ChatRenderer | None
    """What chat requests are rendered with (None: text-only upstream)."""
    model_name: str
    """The name clients use by default."""


def _renderer(tokenizer: str | None) -> ChatRenderer:
    from skyrl_sdk.agents.tiny import tiny_renderer

    if tokenizer is None or tokenizer == "tiny":
        return tiny_renderer()
    from transformers import AutoTokenizer

    from skyrl_sdk.agents.chat import ChatRenderer

    path = Path(tokenizer)
    if not path.is_dir():
        raise PolicySpecError(f"--tokenizer {tokenizer!r}: not a directory")
    return ChatRenderer(AutoTokenizer.from_pretrained(path))


def load_policy(
    spec: str,
    *,
    tokenizer: str | None = None,
    device: str = "cpu",
    max_batch_size: int = 16,
    upstream_model: str | None = None,
    fairness: FairnessLimits | None = None,
) -> LoadedPolicy:
    """Load what `spec` names (see the module docstring). `fairness`: a local engine's caps
    per session on rows of the batch and waiting requests (default: half the batch, 64)."""
    if spec.startswith(("http://", "https://")):
        from skyrl_sdk.agents.openai_client import ApiMode, OpenAIClient

        renderer = _renderer(tokenizer) if tokenizer is not None else None
        key = os.environ.get(UPSTREAM_KEY_ENV) or os.environ.get("OPENAI_API_KEY")
        client = OpenAIClient(
            spec,
            model=upstream_model,
            renderer=renderer,
            api=ApiMode.TOKENS if renderer is not None else ApiMode.CHAT,
            api_key=key,
        )
        return LoadedPolicy(client, renderer, upstream_model or "default")
    if spec.startswith("scripted:"):
        from skyrl_sdk.agents.scripted import ScriptedPolicy

        path = Path(spec.removeprefix("scripted:"))
        if not path.is_file():
            raise PolicySpecError(f"no such file: {path}")
        renderer = _renderer(tokenizer)
        return LoadedPolicy(ScriptedPolicy.from_file(path, renderer), renderer, "scripted")
    from skyrl_sdk.agents.local_engine import LocalEngine

    if spec == "tiny":
        from skyrl_sdk.agents.tiny import tiny_model_dir, tiny_renderer

        directory = tiny_model_dir()
        engine = LocalEngine.from_pretrained(
            directory,
            device=device,
            name="tiny",
            max_batch_size=max_batch_size,
            fairness=fairness,
            num_threads=1,  # see `LocalEngine.num_threads`
        )
        return LoadedPolicy(engine, tiny_renderer(directory), "tiny")
    path = Path(spec.removeprefix("local:"))
    if not path.is_dir():
        raise PolicySpecError("not 'tiny', a model directory, scripted:FILE or a URL")
    engine = LocalEngine.from_pretrained(
        path, device=device, max_batch_size=max_batch_size, fairness=fairness
    )
    return LoadedPolicy(engine, engine.renderer, path.name)
