"""`search`: answer a question by searching a document collection (Search-R1 style).

The model searches with `<search>query</search>` (or a native `search` tool call in the Hermes
or OpenAI format) and reads the passages inside `<information>...</information>`; it ends the
episode with `<answer>...</answer>` (the `answer` tool). The reward is exact match or F1 of the
answer against the task's gold answers, after QA-style normalisation (`scoring.py`).

Where passages come from is one constructor argument: the bundled index of Python's
standard-library docstrings (default, built once into the cache), any index directory built
with `skyrl search index`, or a retrieval server speaking the Search-R1 API (`search_url`),
e.g. a dense retriever or `skyrl search serve`. A failed retrieval (server down, timeout) is an
observation that says so, never an exception that ends the episode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from skyrl_gym.cache import build_once, cache_dir
from skyrl_gym.core import Messages
from skyrl_gym.envs.search.scoring import RewardKind, exact_match, f1_score, score_answer
from skyrl_gym.tasks import TaskError, TaskRow, load_tasks
from skyrl_gym.tool_env import EpisodeMetrics, ToolEnv, Tooling
from skyrl_sdk.tools import ToolCall, ToolFormat, ToolResult, XMLTagFormat
from skyrl_sdk.tools.search import (
    BM25Index,
    HttpRetriever,
    Retriever,
    RetryPolicy,
    SearchOutcome,
    SearchTool,
    build_index,
)

DATA_DIR = Path(__file__).parent
CORPUS_FILE = DATA_DIR / "corpus.jsonl"
TASKS_FILE = DATA_DIR / "tasks.jsonl"
RESULT_TAG = "information"

DEFAULT_SYSTEM_PROMPT = (
    "Answer the question. You can search a collection of documents: the docstrings of the "
    "Python standard library (modules, functions, classes and methods). Search as often as you "
    "need, read the passages, then give the final answer, as short as possible (a single name "
    "or value), with the answer tool."
)


def bundled_index_dir() -> Path:
    """Build the bundled corpus's index once (keyed by the corpus hash) and return its path."""
    digest = hashlib.sha256(CORPUS_FILE.read_bytes()).hexdigest()[:12]
    target = cache_dir() / "search" / f"stdlib-docs-{digest}"
    return build_once(target, lambda staging: build_index(CORPUS_FILE, staging))


@cache
def bundled_index() -> BM25Index:
    """The bundled index, opened once per process (read-only and thread-safe, so shared)."""
    return BM25Index(bundled_index_dir())


@cache
def bundled_tasks() -> tuple[TaskRow, ...]:
    """The 130 bundled questions (read once per process)."""
    return tuple(load_tasks(TASKS_FILE, SearchEnv.required_fields))


def gold_answers(task: TaskRow) -> list[str]:
    """A task's gold answers: `answers` (list), or Search-R1's `golden_answers`, or `answer`."""
    for key in ("answers", "golden_answers", "answer"):
        value = task.get(key)
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return list(value)
    raise TaskError(
        f"search task {task.get('task_id')!r} needs gold answers in 'answers' (a list of strings)"
    )


class SearchEpisodeMetrics(EpisodeMetrics):
    """`SearchEnv.episode_metrics`: the answer's scores and the episode's search counts."""

    exact_match: float
    """1.0 when the answer matches a gold answer after normalisation, else 0.0."""
    f1: float
    """The best token F1 of the answer against the gold answers."""
    searches: int
    """Queries the episode sent."""
    search_failures: int
    """Queries whose retrieval failed (server unreachable, timeout, bad response)."""


class SearchEnv(ToolEnv):
    """Search a collection, then answer; reward is exact match (default) or F1."""

    required_fields: ClassVar[tuple[str, ...]] = ("question",)
    no_action_hint: ClassVar[str] = (
        "search with the search tool, or give your final answer with the answer tool"
    )

    def __init__(
        self,
        tasks: Sequence[TaskRow] | None = None,
        *,
        index: str | Path | None = None,
        search_url: str | None = None,
        retriever: Retriever | None = None,
        topk: int = 3,
        reward: str | RewardKind = RewardKind.EXACT_MATCH,
        tool_format: str | ToolFormat = "xml",
        timeout_s: float = 10.0,
        retries: int = 3,
        max_passage_chars: int = 1000,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    ):
        """Args:
        tasks: Task rows (`task_id`, `question`, `answers`); default: the bundled questions.
        index: An index directory built by `skyrl search index`.
        search_url: A Search-R1-style retrieval server (`http://host:port[/retrieve]`).
        retriever: Any `Retriever`; the env does not close it.
        topk: Passages per search.
        reward: `em` (exact match) or `f1`.
        tool_format: `xml` (`<search>`/`<answer>` tags), `hermes` or `openai`.
        timeout_s: Per-request timeout for `search_url`.
        retries: Attempts per request for `search_url`.
        max_passage_chars: Each passage is cut to this many characters.
        system_prompt: Describes the task and collection; tool instructions are appended.
        """
        if sum(x is not None for x in (index, search_url, retriever)) > 1:
            raise ValueError("give at most one of index=, search_url=, retriever=")
        self.reward_kind = RewardKind(reward)
        self._owns_retriever = retriever is None and (index or search_url) is not None
        if retriever is None:
            if search_url is not None:
                retriever = HttpRetriever(
                    search_url, timeout_s=timeout_s, retry=RetryPolicy(attempts=retries)
                )
            elif index is not None:
                retriever = BM25Index(index)
            else:
                retriever = bundled_index()
        self.retriever = retriever
        # A local index answers in well under a millisecond: skip the worker-thread hop.
        self.inline_async = isinstance(retriever, BM25Index)
        self.searcher = SearchTool(retriever, topk=topk, max_passage_chars=max_passage_chars)
        if tool_format == "xml":
            tool_format = XMLTagFormat({"search": "query", "answer": "answer"}, RESULT_TAG)
        tooling = Tooling.build([self.searcher.tool], tool_format, system_prompt)
        super().__init__(bundled_tasks() if tasks is None else tasks, tooling)
        fmt = self.tool_format
        self._wrap_results = not (isinstance(fmt, XMLTagFormat) and fmt.result_tag == RESULT_TAG)
        self._searches = 0
        self._failures = 0
        self._closed = False

    def prompt(self, task: TaskRow) -> str:
        return f"Question: {task['question']}"

    def start(self, task: TaskRow) -> Messages:
        gold_answers(task)  # a task without gold answers fails at reset, not at the end
        self._searches = self._failures = 0
        return super().start(task)

    def score(self, task: TaskRow, given: str) -> float:
        """The reward for a final answer under the env's `reward_kind`."""
        return score_answer(given, gold_answers(task), self.reward_kind)

    def episode_metrics(self, answer: str, reward: float) -> SearchEpisodeMetrics:
        golds = gold_answers(self.task or {})
        return {
            "answer": answer,
            "correct": exact_match(answer, golds) > 0,
            "exact_match": exact_match(answer, golds),
            "f1": f1_score(answer, golds),
            "searches": self._searches,
            "search_failures": self._failures,
        }

    def run_tools(self, calls: list[ToolCall], info: dict[str, Any]) -> Messages:
        # One batched request for all queries of the turn (one round trip to a server).
        results = self.searcher.run([str(c.arguments["query"]) for c in calls])
        self._searches += len(results)
        self._failures += sum(r.outcome is SearchOutcome.FAILED for r in results)
        info["search"] = [r.to_json() for r in results]
        observations = []
        for call, result in zip(calls, results, strict=True):
            text = result.message
            if self._wrap_results:
                text = f"<{RESULT_TAG}>\n{text}\n</{RESULT_TAG}>"
            is_error = result.outcome in (SearchOutcome.FAILED, SearchOutcome.EMPTY_QUERY)
            observations.append(self.tool_format.render_result(ToolResult(call, text, is_error)))
        return observations

    def close(self) -> None:
        if not self._closed and self._owns_retriever:
            self.retriever.close()
        self._closed = True
