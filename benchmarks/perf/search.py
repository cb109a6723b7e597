"""`skyrl bench search`: BM25 index build time and query throughput on the bundled corpus.

Ours: the tantivy index (`tools.search.BM25Index`), queried one question at a time, in process
and through `skyrl search serve`'s app over HTTP on 127.0.0.1. Baseline, measured in the same
run: a plain-Python BM25 that scores every document for every query (same k1, b and title
boost; no stemming). Both also report recall@3: how often the question's gold document is
among the top 3 when the question itself is the query.
"""

from __future__ import annotations

import math
import re
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from skyrl_sdk.benchmarks.perf.report import BenchReport
from skyrl_sdk.tools.search.bm25 import TITLE_BOOST

_WORD = re.compile(r"[^\W_]+")
K1, B = 1.2, 0.75  # tantivy's BM25 constants


class BruteForceBM25:
    """The baseline: BM25 over in-memory term counts, every document scored per query."""

    def __init__(self, docs: Sequence[tuple[str, str, str]]):
        self.ids = [d[0] for d in docs]
        self.fields = [
            [Counter(_WORD.findall(title.lower())) for _, title, _ in docs],
            [Counter(_WORD.findall(text.lower())) for _, _, text in docs],
        ]
        self.stats = []
        for counts in self.fields:
            df: Counter[str] = Counter()
            for c in counts:
                df.update(c.keys())
            lengths = [sum(c.values()) for c in counts]
            self.stats.append((df, lengths, sum(lengths) / max(1, len(lengths))))

    def search(self, query: str, topk: int = 3) -> list[str]:
        terms = list(dict.fromkeys(_WORD.findall(query.lower())))
        n = len(self.ids)
        scores = [0.0] * n
        for boost, counts, (df, lengths, avg) in zip(
            (TITLE_BOOST, 1.0), self.fields, self.stats, strict=True
        ):
            for term in terms:
                if not df[term]:
                    continue
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                for i, c in enumerate(counts):
                    tf = c.get(term)
                    if tf:
                        norm = tf + K1 * (1 - B + B * lengths[i] / avg)
                        scores[i] += boost * idf * tf * (K1 + 1) / norm
        best = sorted(range(n), key=lambda i: -scores[i])[:topk]
        return [self.ids[i] for i in best if scores[i] > 0]


def _throughput(search: Callable[[str], object], queries: Sequence[str], min_s: float) -> float:
    done, started = 0, time.perf_counter()
    while True:
        for q in queries:
            search(q)
        done += len(queries)
        elapsed = time.perf_counter() - started
        if elapsed >= min_s:
            return done / elapsed


def _recall(search: Callable[[str], list[str]], tasks: Sequence[dict]) -> float:
    return sum(t["doc_id"] in search(t["question"]) for t in tasks) / len(tasks)


def run(builds: int = 3, min_s: float = 1.0, max_tasks: int | None = None) -> BenchReport:
    """Measure; `max_tasks` limits the questions used (tests), `min_s` the time per rate."""
    from skyrl_gym.envs.search.env import CORPUS_FILE, bundled_tasks
    from skyrl_sdk.tools.search import BM25Index, HttpRetriever, build_index, read_corpus

    docs = list(read_corpus(CORPUS_FILE))
    tasks = list(bundled_tasks())[:max_tasks]
    questions = [t["question"] for t in tasks]
    with tempfile.TemporaryDirectory() as tmp:
        build_times = []
        for i in range(builds):
            started = time.perf_counter()
            build_index(docs, Path(tmp) / f"idx{i}")
            build_times.append(time.perf_counter() - started)
        index_dir = Path(tmp) / "idx0"
        size_mb = sum(f.stat().st_size for f in index_dir.rglob("*") if f.is_file()) / 1e6
        index = BM25Index(index_dir)
        qps = _throughput(lambda q: index.search(q, 3), questions, min_s)
        recall = _recall(lambda q: [p.id for p in index.search(q, 3)], tasks)

        started = time.perf_counter()
        baseline = BruteForceBM25([(d.id, d.title, d.text) for d in docs])
        baseline_build_s = time.perf_counter() - started
        baseline_qps = _throughput(lambda q: baseline.search(q, 3), questions[:20], min_s)
        baseline_recall = _recall(baseline.search, tasks)

        http_qps: float | None = None
        try:
            from skyrl_sdk.tools.search.server import ServerThread, create_app

            app = create_app(index, documents=index.num_docs)
        except ImportError:
            app = None
        if app is not None:
            with ServerThread(app) as server, HttpRetriever(server.url) as client:
                http_qps = _throughput(lambda q: client.retrieve([q], 3), questions, min_s)

    build_s = statistics.median(build_times)
    rows = [
        ("documents", f"{len(docs)}", f"{len(docs)}"),
        (f"index build s (median of {builds})", f"{build_s:.3f}", f"{baseline_build_s:.3f}"),
        ("index size MB (incl. stored text)", f"{size_mb:.2f}", "in memory"),
        ("queries/s, in process", f"{qps:,.0f}", f"{baseline_qps:,.0f}"),
        ("speed-up", f"{qps / baseline_qps:.0f}x", "1x"),
        ("recall@3 (question as query)", f"{recall:.3f}", f"{baseline_recall:.3f}"),
        ("queries/s over HTTP (1 per request)", f"{http_qps:,.0f}" if http_qps else "-", "-"),
    ]
    return BenchReport(
        name="search",
        rows=rows,
        result={
            "queries_per_s": round(qps, 1),
            "index_build_s": round(build_s, 4),
            "documents": len(docs),
            "index_size_mb": round(size_mb, 3),
            "recall_at_3": round(recall, 4),
            "baseline_queries_per_s": round(baseline_qps, 1),
            "speedup_vs_baseline": round(qps / baseline_qps, 1),
            "http_queries_per_s": round(http_qps, 1) if http_qps else None,
        },
        notes=[
            "baseline: plain-Python BM25 scoring every document per query (same k1, b, boost)",
            f"queries: the {len(questions)} bundled questions, one per call, top 3",
        ],
    )
