"""`skyrl tinker tokenizer pull`: store a Tinker server's tokenizers in the local Hugging Face
cache under their base model names.

The `tinker` SDK's `TrainingClient.get_tokenizer()`, `SamplingClient.get_tokenizer()` and
tinker-cookbook's `tokenizer_utils.get_tokenizer(model_name)` all call
`AutoTokenizer.from_pretrained(base_model)`. Once the files sit in the cache in the hub's
layout (`hub/models--ORG--NAME/snapshots/REVISION/...` and `refs/main`), that call loads them
on any machine, with `HF_HUB_OFFLINE=1` too, and nothing in the client or the recipes changes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

from skyrl_sdk.trainer.tinker.tokenizer_files import (
    MAX_FILE_BYTES,
    TOKENIZER_FILES,
    TokenizerManifest,
    is_repo_id,
)

API = "/api/v1"
"""Prefix of the server's endpoints."""


LLAMA3_TOKENIZER = "thinkingmachineslabinc/meta-llama-3-instruct-tokenizer"
"""Where the `tinker` SDK's `SamplingClient.get_tokenizer()` loads a Llama 3 tokenizer from
(it avoids the gated meta-llama repos)."""


class PullError(Exception):
    """The server refused, or sent something that is not a tokenizer of a base model."""


@dataclass(frozen=True)
class PulledTokenizer:
    """A tokenizer stored in the cache."""

    base_model: str
    """The name it loads by (`AutoTokenizer.from_pretrained(base_model)`)."""
    snapshot: Path
    """The snapshot directory holding its files."""
    files: tuple[str, ...]
    """The file names stored."""


def hub_cache(cache_dir: Path | None = None) -> Path:
    """The hub cache `from_pretrained` reads: `cache_dir`, else `$HF_HUB_CACHE`, else
    `$HF_HOME/hub`, else `~/.cache/huggingface/hub` (huggingface_hub's own order)."""
    if cache_dir is not None:
        return cache_dir
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "huggingface"
    )
    return Path(home) / "hub"


def repo_dir(cache: Path, base_model: str) -> Path:
    """The hub cache's directory of a model repo (`models--ORG--NAME`)."""
    if not is_repo_id(base_model):
        raise PullError(f"{base_model!r} is not a Hugging Face repo id; not stored")
    return cache / ("models--" + base_model.replace("/", "--"))


def _get(client: httpx.Client, path: str, **params: str) -> httpx.Response:
    reply = client.get(API + path, params=params)
    if reply.status_code != 200:
        raise PullError(f"GET {path} {params}: {reply.status_code} {reply.text[:300]}")
    return reply


def _served_models(client: httpx.Client) -> list[str]:
    body = _get(client, "/get_server_capabilities").json()
    return [m["model_name"] for m in body["supported_models"]]


def _download(client: httpx.Client, base_model: str, manifest: TokenizerManifest, into: Path):
    for entry in manifest.files:
        if entry.name not in TOKENIZER_FILES or entry.size > MAX_FILE_BYTES:
            raise PullError(f"the server listed {entry.name!r} ({entry.size} bytes)")
        data = _get(client, "/tokenizer/file", base_model=base_model, name=entry.name).content
        if len(data) > MAX_FILE_BYTES or hashlib.sha256(data).hexdigest() != entry.sha256:
            raise PullError(f"{entry.name} of {base_model} does not match its manifest")
        (into / entry.name).write_bytes(data)


def _mark_absent(repo: Path, manifest: TokenizerManifest) -> None:
    """Record the files the tokenizer does not have as the hub cache does (an empty file under
    `.no_exist/REVISION/`): offline, `from_pretrained` can not tell a file the repo lacks from
    one not downloaded yet and fails on the first optional file it looks for, unless the cache
    says it does not exist."""
    present = {f.name for f in manifest.files}
    marks = repo / ".no_exist" / manifest.revision
    marks.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if name not in present:
            (marks / name).touch()


def sdk_names(base_model: str) -> tuple[str, ...]:
    """The names the `tinker` SDK loads `base_model`'s tokenizer by: the name itself, and for
    `meta-llama/Llama-3*` the ungated copy `SamplingClient.get_tokenizer()` asks for instead."""
    if base_model.startswith("meta-llama/Llama-3"):
        return (base_model, LLAMA3_TOKENIZER)
    return (base_model,)


def _store(cache: Path, name: str, manifest: TokenizerManifest, files: Path) -> Path:
    """Copy the downloaded `files` into `name`'s repo as the snapshot `refs/main` names."""
    repo = repo_dir(cache, name)
    snapshots = repo / "snapshots"
    snapshots.mkdir(parents=True, exist_ok=True)
    # Copied beside the snapshot and renamed into place, so a reader never sees half a set.
    staging = Path(tempfile.mkdtemp(prefix=".pull-", dir=snapshots))
    try:
        shutil.copytree(files, staging, dirs_exist_ok=True)
        snapshot = snapshots / manifest.revision
        if snapshot.exists():
            shutil.rmtree(snapshot)
        staging.rename(snapshot)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _mark_absent(repo, manifest)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(manifest.revision)
    return snapshot


def pull_one(client: httpx.Client, base_model: str, cache: Path) -> PulledTokenizer:
    """Store one base model's tokenizer in `cache` under each of its `sdk_names`."""
    names = sdk_names(base_model)
    for name in names:
        repo_dir(cache, name)  # refuse a name that is no repo id before downloading
    manifest = TokenizerManifest.model_validate(
        _get(client, "/tokenizer", base_model=base_model).json()
    )
    if len(manifest.revision) != 40 or not all(c in "0123456789abcdef" for c in manifest.revision):
        raise PullError(f"bad revision {manifest.revision!r}")
    if not any(f.name in ("tokenizer.json", "tokenizer_config.json") for f in manifest.files):
        raise PullError(f"the server has no tokenizer files for {base_model}")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".skyrl-pull-", dir=cache) as downloaded:
        _download(client, base_model, manifest, Path(downloaded))
        stored = [_store(cache, name, manifest, Path(downloaded)) for name in names]
    return PulledTokenizer(base_model, stored[0], tuple(f.name for f in manifest.files))


def pull(
    base_url: str,
    api_key: str | None,
    model: str | None = None,
    cache_dir: Path | None = None,
    timeout_s: float = 60.0,
) -> list[PulledTokenizer]:
    """Store the tokenizer of `model` (None: of every base model the server serves) in the
    local hub cache (`hub_cache(cache_dir)`)."""
    headers = {"X-API-Key": api_key} if api_key else {}
    cache = hub_cache(cache_dir)
    try:
        with httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s) as client:
            names = [model] if model else _served_models(client)
            return [pull_one(client, name, cache) for name in names]
    except httpx.HTTPError as e:
        raise PullError(f"{base_url}: {e}") from e
