"""Search over a document collection: a local BM25 index, a Search-R1 API client and server,
and the `search` tool built on either.

`BM25Index` and `HttpRetriever` both implement `Retriever`, so the search env takes either.
The server (`tools.search.server`) needs the `server` extra and is imported only on use.
"""

from skyrl_sdk.tools.search.bm25 import (
    BM25Index,
    IndexManifest,
    SearchIndexError,
    build_index,
    query_terms,
)
from skyrl_sdk.tools.search.client import HttpRetriever, RetryPolicy
from skyrl_sdk.tools.search.tool import SearchOutcome, SearchResult, SearchTool
from skyrl_sdk.tools.search.types import (
    CorpusError,
    Document,
    Passage,
    RetrievalError,
    RetrievalFailure,
    Retriever,
    format_passages,
    read_corpus,
)

__all__ = [
    "BM25Index",
    "CorpusError",
    "Document",
    "HttpRetriever",
    "IndexManifest",
    "Passage",
    "RetrievalError",
    "RetrievalFailure",
    "Retriever",
    "RetryPolicy",
    "SearchIndexError",
    "SearchOutcome",
    "SearchResult",
    "SearchTool",
    "build_index",
    "format_passages",
    "query_terms",
    "read_corpus",
]
