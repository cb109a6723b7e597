"""The `search` env: Search-R1 style question answering over a BM25 index or a retrieval server."""
