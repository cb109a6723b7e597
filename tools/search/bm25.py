"""A BM25 index on disk, built with tantivy (a Lucene-like engine in Rust).

Why tantivy: measured on the bundled corpus (2,453 documents, 0.8 MB) and on a 10x copy of it
against bm25s and SQLite FTS5, it builds fastest at scale, queries within 15% of bm25s and 5-50x
faster than FTS5, and its index also stores the documents, so one directory is the whole
artefact (bm25s needs scipy and a separate document store). Scoring is BM25 (k1=1.2, b=0.75)
over `title` and `text`, both lower-cased and English-stemmed.

An index directory holds tantivy's segment files plus `skyrl-index.json` (`IndexManifest`).
Queries are reduced to their alphanumeric words before parsing, so no user text is ever read
as query syntax, and an empty or all-punctuation query returns no passages.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from skyrl_sdk.tools.search.types import (
    CorpusError,
    Document,
    Passage,
    RetrievalError,
    RetrievalFailure,
    read_corpus,
)

MANIFEST = "skyrl-index.json"
FORMAT_VERSION = 1
TITLE_BOOST = 1.0
"""Weight of title matches relative to text matches (recall@3 on the bundled questions:
0.977 at 1.0, 0.954 at 2.0, 0.885 at 3.0)."""
MAX_QUERY_TERMS = 64
"""Longer queries keep their first 64 words: bounds the cost of a pathological query."""
_WORD = re.compile(r"[^\W_]+")


class SearchIndexError(RuntimeError):
    """An index directory is missing, not an index, or was built by an incompatible version."""


@dataclass(frozen=True)
class IndexManifest:
    """What `skyrl-index.json` records about an index."""

    format_version: int
    """Layout version of our index directory; bumped on incompatible changes."""
    backend: str
    """Engine that wrote the segments (`tantivy`)."""
    backend_version: str
    """Version string of that engine."""
    documents: int
    """Number of indexed documents."""
    corpus_sha256: str
    """Hash of the indexed documents (ids, titles, texts, in order)."""
    build_s: float
    """Seconds the build took."""

    @classmethod
    def read(cls, index_dir: Path) -> IndexManifest:
        path = index_dir / MANIFEST
        if not path.is_file():
            raise SearchIndexError(
                f"{index_dir} is not a search index (no {MANIFEST}); "
                "build one with `skyrl search index CORPUS --out DIR`"
            )
        data = json.loads(path.read_text())
        if data.get("format_version") != FORMAT_VERSION:
            raise SearchIndexError(
                f"{index_dir}: index format {data.get('format_version')} is not supported "
                f"(this version reads {FORMAT_VERSION}); rebuild it"
            )
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def _tantivy() -> Any:
    try:
        import tantivy
    except ImportError as e:  # a core dependency; only a broken install gets here
        raise ImportError(
            "the search index needs the 'tantivy' package: pip install tantivy"
        ) from e
    return tantivy


def _schema(tantivy: Any) -> Any:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    builder.add_text_field("title", stored=True, tokenizer_name="en_stem")
    builder.add_text_field("text", stored=True, tokenizer_name="en_stem")
    return builder.build()


def _backend_version() -> str:
    try:
        return importlib.metadata.version("tantivy")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def build_index(
    documents: Iterable[Document] | str | Path,
    out: str | Path,
    *,
    overwrite: bool = False,
    num_threads: int = 1,
) -> IndexManifest:
    """Index `documents` (or a JSONL corpus path) into the directory `out`.

    The index is written next to `out` and renamed into place, so a reader never sees a half
    built one. An existing index at `out` is replaced only with `overwrite=True`; a directory
    that is not an index is never touched. `num_threads=1` keeps the segment layout, and so the
    order of equal-score hits, reproducible.
    """
    tantivy = _tantivy()
    out = Path(out)
    if out.exists():
        if not (out / MANIFEST).is_file() and (not out.is_dir() or any(out.iterdir())):
            raise SearchIndexError(f"{out} exists and is not a search index; choose another --out")
        if (out / MANIFEST).is_file() and not overwrite:
            raise SearchIndexError(
                f"{out} already holds an index; pass overwrite=True (`--overwrite`) to replace it"
            )
    docs = read_corpus(documents) if isinstance(documents, str | Path) else documents
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        started = time.perf_counter()
        index = tantivy.Index(_schema(tantivy), path=str(tmp))
        writer = index.writer(heap_size=max(15_000_000, 15_000_000 * num_threads),
                              num_threads=num_threads)  # fmt: skip
        digest = hashlib.sha256()
        seen: set[str] = set()
        count = 0
        for doc in docs:
            if doc.id in seen:
                raise CorpusError(f"duplicate document id {doc.id!r}")
            seen.add(doc.id)
            writer.add_document(tantivy.Document(id=doc.id, title=doc.title, text=doc.text))
            for part in (doc.id, doc.title, doc.text):
                digest.update(part.encode("utf-8", "replace") + b"\0")
            count += 1
        writer.commit()
        writer.wait_merging_threads()
        manifest = IndexManifest(
            FORMAT_VERSION,
            "tantivy",
            _backend_version(),
            count,
            digest.hexdigest(),
            round(time.perf_counter() - started, 4),
        )
        (tmp / MANIFEST).write_text(json.dumps(asdict(manifest), indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out) if (out / MANIFEST).is_file() else out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def query_terms(query: str) -> list[str]:
    """The words of a query as the index sees them: lower-cased alphanumeric runs, deduplicated."""
    return list(dict.fromkeys(_WORD.findall(query.lower())))[:MAX_QUERY_TERMS]


class BM25Index:
    """A read-only, thread-safe handle on an index directory; a `Retriever`."""

    def __init__(self, index_dir: str | Path):
        tantivy = _tantivy()
        self.path = Path(index_dir)
        self.manifest = IndexManifest.read(self.path)
        try:
            self._index = tantivy.Index.open(str(self.path))
        except (OSError, ValueError) as e:
            raise SearchIndexError(f"{self.path}: cannot open the index ({e})") from e
        self._searcher = self._index.searcher()

    @property
    def num_docs(self) -> int:
        return int(self._searcher.num_docs)

    def search(self, query: str, topk: int = 3) -> list[Passage]:
        """Up to `topk` passages for one query, best first (empty for a query with no words)."""
        if topk < 1:
            raise ValueError(f"topk must be at least 1, got {topk}")
        terms = query_terms(query)
        if not terms:
            return []
        try:
            parsed = self._index.parse_query(
                " ".join(terms), ["title", "text"], field_boosts={"title": TITLE_BOOST}
            )
            hits = self._searcher.search(parsed, topk, count=False).hits
            passages = []
            for score, address in hits:
                doc = self._searcher.doc(address)
                passages.append(
                    Passage(doc["id"][0], doc["title"][0], doc["text"][0], round(float(score), 6))
                )
        except ValueError as e:
            raise RetrievalError(RetrievalFailure.INDEX_ERROR, f"{self.path}: {e}") from e
        return passages

    def retrieve(self, queries: Sequence[str], topk: int = 3) -> list[list[Passage]]:
        """`search` for each query (the `Retriever` protocol)."""
        return [self.search(q, topk) for q in queries]

    def close(self) -> None:
        """Nothing to release: tantivy maps the files read-only. Kept for the protocol."""
