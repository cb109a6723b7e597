"""The `search` tool: a query in, formatted passages out, with a typed outcome per call."""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass

from skyrl_sdk.tools.core import Tool
from skyrl_sdk.tools.search.types import Passage, RetrievalError, Retriever, format_passages


class SearchOutcome(enum.Enum):
    """How one search call ended."""

    OK = "ok"
    """At least one passage came back."""
    NO_RESULTS = "no_results"
    """The retriever found nothing for the query."""
    EMPTY_QUERY = "empty_query"
    """The query had no words; nothing was sent."""
    FAILED = "failed"
    """The retriever raised `RetrievalError` (server down, timeout, bad index)."""


@dataclass(frozen=True)
class SearchResult:
    """The result of one search call, as the env reports it."""

    query: str
    """The query as the model wrote it."""
    outcome: SearchOutcome
    """How the call ended."""
    passages: tuple[Passage, ...]
    """Retrieved passages, best first (empty unless `outcome` is OK)."""
    message: str
    """The text shown to the model: the passages, or why there are none."""
    duration_s: float
    """Wall time of the retrieval."""

    def to_json(self) -> dict[str, object]:
        return {
            "query": self.query,
            "outcome": self.outcome.value,
            "doc_ids": [p.id for p in self.passages],
            "duration_s": round(self.duration_s, 6),
        }


class SearchTool:
    """Runs batches of queries against a `Retriever`; never raises on bad input or failures."""

    def __init__(self, retriever: Retriever, topk: int = 3, max_passage_chars: int = 1000):
        if topk < 1:
            raise ValueError(f"topk must be at least 1, got {topk}")
        self.retriever = retriever
        self.topk = topk
        self.max_passage_chars = max_passage_chars
        self.tool = Tool(
            name="search",
            description=(
                f"Search the document collection; returns the {topk} most relevant passages."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Keywords or a question."}
                },
                "required": ["query"],
            },
            fn=lambda query: self.run([query])[0].message,
        )

    def run(self, queries: Sequence[str]) -> list[SearchResult]:
        """One `SearchResult` per query; the ones with words go to the retriever in one batch."""
        unique = list(dict.fromkeys(q for q in queries if _has_words(q)))
        started = time.perf_counter()
        error: RetrievalError | None = None
        found: dict[str, list[Passage]] = {}
        if unique:
            try:
                found = dict(zip(unique, self.retriever.retrieve(unique, self.topk), strict=True))
            except RetrievalError as e:
                error = e
        elapsed = time.perf_counter() - started
        return [self._result(q, found.get(q, []), error, elapsed) for q in queries]

    def _result(
        self, query: str, passages: list[Passage], error: RetrievalError | None, elapsed: float
    ) -> SearchResult:
        if not _has_words(query):
            message = "Search error: the query is empty; put keywords inside the search call."
            return SearchResult(query, SearchOutcome.EMPTY_QUERY, (), message, 0.0)
        if error is not None:
            message = f"Search error ({error.kind.value}): {error}"
            return SearchResult(query, SearchOutcome.FAILED, (), message, elapsed)
        if not passages:
            message = f"No documents match {query!r}; try other keywords."
            return SearchResult(query, SearchOutcome.NO_RESULTS, (), message, elapsed)
        text = format_passages(passages, self.max_passage_chars)
        return SearchResult(query, SearchOutcome.OK, tuple(passages), text, elapsed)


def _has_words(text: str) -> bool:
    return any(c.isalnum() for c in text)
