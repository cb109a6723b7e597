"""What retrievers exchange: documents, retrieved passages, the `Retriever` protocol, failures."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypedDict, runtime_checkable


@dataclass(frozen=True)
class Document:
    """One entry of a corpus (a JSONL row `{"id", "title", "text"}`)."""

    id: str
    """Stable document id, unique in the corpus."""
    title: str
    """Short title, shown to the model with the passage (may be empty)."""
    text: str
    """The passage text."""


class PassageJSON(TypedDict):
    """`Passage.to_json()`: a retrieved passage as a JSON object."""

    id: str
    """The document's id."""
    title: str
    """The document's title."""
    text: str
    """The document's text."""
    score: float
    """Retriever score; higher is more relevant."""


@dataclass(frozen=True)
class Passage:
    """One retrieved document with its relevance score."""

    id: str
    """The document's id."""
    title: str
    """The document's title."""
    text: str
    """The document's text."""
    score: float
    """Retriever score; higher is more relevant. Only comparable within one result list."""

    def to_json(self) -> PassageJSON:
        """The passage as a JSON object."""
        return {"id": self.id, "title": self.title, "text": self.text, "score": self.score}


class RetrievalFailure(enum.Enum):
    """Why a retrieval call failed."""

    UNREACHABLE = "unreachable"
    """The server could not be connected to (refused, DNS, reset), after all retries."""
    TIMEOUT = "timeout"
    """The server did not answer within the timeout, after all retries."""
    SERVER_ERROR = "server_error"
    """The server kept answering with a 5xx/429 status."""
    BAD_REQUEST = "bad_request"
    """The server rejected the request (4xx): wrong URL, bad arguments."""
    BAD_RESPONSE = "bad_response"
    """The server's answer is not the Search-R1 response shape."""
    INDEX_ERROR = "index_error"
    """The local index could not be read or queried."""


class RetrievalError(RuntimeError):
    """A retrieval call failed; `kind` says how, the message says where and why."""

    def __init__(self, kind: RetrievalFailure, message: str):
        super().__init__(message)
        self.kind = kind


@runtime_checkable
class Retriever(Protocol):
    """Anything that answers a batch of queries with ranked passages."""

    def retrieve(self, queries: Sequence[str], topk: int) -> list[list[Passage]]:
        """For each query, up to `topk` passages, best first. Raises `RetrievalError`."""
        ...

    def close(self) -> None:
        """Release connections or file handles (idempotent)."""
        ...


class CorpusError(ValueError):
    """A corpus file is malformed; the message names the file and line."""


def document_from_json(row: object) -> Document:
    """A `Document` from `{"id", "title", "text"}`, or Search-R1's `{"id", "contents"}`
    (whose first line is the quoted title)."""
    if not isinstance(row, dict):
        raise CorpusError(f"a document must be a JSON object, got {type(row).__name__}")
    doc_id = row.get("id")
    if not isinstance(doc_id, str | int) or isinstance(doc_id, bool) or doc_id == "":
        raise CorpusError(f"document has no usable 'id' (got {doc_id!r})")
    if isinstance(row.get("text"), str):
        title = row.get("title", "")
        if not isinstance(title, str):
            raise CorpusError(f"document {doc_id!r}: 'title' must be a string")
        return Document(str(doc_id), title, row["text"])
    if isinstance(row.get("contents"), str):
        head, _, body = row["contents"].partition("\n")
        return Document(str(doc_id), head.strip().strip('"'), body)
    raise CorpusError(f"document {doc_id!r} has neither a 'text' nor a 'contents' string")


def read_corpus(path: str | Path) -> Iterator[Document]:
    """Stream the documents of a JSONL corpus; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus not found: {path}")
    with path.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield document_from_json(json.loads(line))
            except json.JSONDecodeError as e:
                raise CorpusError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            except CorpusError as e:
                raise CorpusError(f"{path}:{lineno}: {e}") from None


def format_passages(passages: Sequence[Passage], max_chars: int = 1000) -> str:
    """Passages as the model reads them: `Doc 1 (Title: ...) text`, one per line block."""
    blocks = []
    for i, p in enumerate(passages, 1):
        text = " ".join(p.text.split())
        if len(text) > max_chars:
            text = text[:max_chars].rstrip() + " ..."
        blocks.append(f"Doc {i} (Title: {p.title}) {text}")
    return "\n".join(blocks)
