"""Which files of a base model's tokenizer the Tinker server hands out, and their manifest.

Shared by the route that serves them (`routes.tokenizer`) and the client that stores them in
the Hugging Face cache (`tokenizer_pull`). Only the names in `TOKENIZER_FILES` are ever read:
a tokenizer directory may be the whole model directory, and weights or anything else in it
stay on the server. No HTTP here.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from skyrl_sdk.trainer.tinker import wire

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "chat_template.jinja",
    "chat_template.json",
    "config.json",
)
"""The file names served. `config.json` is there because `AutoTokenizer` reads it to pick the
tokenizer class when `tokenizer_config.json` does not name one: without it a client could
build a different tokenizer from the same files than the server does."""

MAX_FILE_BYTES = 64 * 1024 * 1024
"""Largest file served (and accepted by the client): the biggest `tokenizer.json` of common
models is about 35 MB; a larger file is not a tokenizer file."""

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
"""A Hugging Face repo id (`org/name` or `name`), the only base model names a client stores:
the name becomes a cache directory name, so `..` and separators beyond the one `/` are out."""


class TokenizerFile(wire.Reply):
    """One file of a tokenizer."""

    name: str
    """Its file name (one of `TOKENIZER_FILES`)."""
    size: int
    """Its length in bytes."""
    sha256: str
    """Hex SHA-256 of its bytes (the client checks what it downloaded)."""


class TokenizerManifest(wire.Reply):
    """`GET /api/v1/tokenizer?base_model=NAME`: the files of a base model's tokenizer."""

    base_model: str
    """The base model the tokenizer belongs to (the name clients load it by)."""
    revision: str
    """40 hex digits naming this exact set of files (SHA-1 over names and hashes): the
    snapshot directory a client stores them under, so a changed tokenizer is a new one."""
    files: list[TokenizerFile]
    """The files present, in `TOKENIZER_FILES` order."""


def is_repo_id(name: str) -> bool:
    """Whether `name` is a repo id safe to use as a cache directory name."""
    return bool(REPO_ID.match(name)) and ".." not in name


def file_path(directory: Path, name: str) -> Path:
    """The served file `name` of a tokenizer directory.

    Raises `KeyError` when `name` is not a tokenizer file name or the directory has no such
    regular file, `ValueError` when it is over `MAX_FILE_BYTES`. Symlinks are followed (a
    Hugging Face snapshot links to its blobs); the name itself can not leave the directory,
    since it must equal one of `TOKENIZER_FILES`."""
    if name not in TOKENIZER_FILES:
        raise KeyError(f"{name!r} is not a tokenizer file; served: {list(TOKENIZER_FILES)}")
    path = directory / name
    if not path.is_file():
        raise KeyError(f"the tokenizer has no {name}")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{name} is over {MAX_FILE_BYTES} bytes")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def manifest(base_model: str, directory: Path) -> TokenizerManifest:
    """The manifest of the tokenizer files in `directory` (files over the cap left out)."""
    files = []
    for name in TOKENIZER_FILES:
        try:
            path = file_path(directory, name)
        except (KeyError, ValueError):
            continue
        files.append(TokenizerFile(name=name, size=path.stat().st_size, sha256=_sha256(path)))
    revision = hashlib.sha1(
        "".join(f"{f.name}\0{f.sha256}\n" for f in files).encode(), usedforsecurity=False
    ).hexdigest()
    return TokenizerManifest(base_model=base_model, revision=revision, files=files)
