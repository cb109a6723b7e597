"""`sql` (alias `text2sql`): the SkyRL-SQL multi-turn Text-to-SQL environment.

Each episode is one question over one read-only database. The model thinks in `<think>`,
explores with one `<sql>query</sql>` per turn, reads the result in `<observation>` (with a
reminder of the turns left), and ends with `<solution>final query</solution>`. The reward comes
once, at the end (`skyrl_gym.envs.sql.reward`): 1 if the solution's rows match the gold query's,
0 if not, -1 for a format violation or for running out of turns without a solution.

With `tool_format="hermes"` or `"openai"` the same task is played with native tool calls
(`sql(query)` to explore, `solution(sql)` to answer) through the `tools` layer; the reward is
then 1 / 0 on execution match, and -1 when the turns run out without a solution.

Every query (exploration, solution, gold) runs under `SQLEnvConfig.limits`
(`skyrl_sdk.tools.sql_limits.SQLLimits`: row, byte, memory and time caps). An exploration that
hits a cap shows the rows fetched before it and a `[... truncated: ...]` marker (or an error
when there were none); a solution that hits one scores 0.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from skyrl_gym.core import Messages, StepReturn, TaskEnv, coerce_action
from skyrl_gym.envs.sql.loaders import REQUIRED_FIELDS, database_schema, resolve_database
from skyrl_gym.envs.sql.metrics import Metric, execution_match
from skyrl_gym.envs.sql.reward import RewardOutcome, SQLReward, skyrl_reward
from skyrl_gym.step_info import StepInfo
from skyrl_gym.tasks import TaskRow
from skyrl_sdk.tools import (
    ParseError,
    ParseErrorKind,
    ToolFormat,
    ToolResult,
    Toolset,
    tool,
)
from skyrl_sdk.tools.formats import FORMATS, XMLTagFormat
from skyrl_sdk.tools.sql_limits import (
    DEFAULT_SQL_LIMITS,
    SQLLimits,
    clip_text,
    truncation_marker,
)
from skyrl_sdk.tools.sqldb import (
    QueryOutcome,
    QueryStatus,
    ReadOnlyDatabase,
    min_table_chars,
    open_database,
    render_table,
)

__all__ = ["INVALID_ACTION", "SQLEnv", "SQLEnvConfig", "render_observation"]

INVALID_ACTION = (
    "Your previous action is invalid. Follow the format of outputting thinking process and sql "
    "tool, and try again."
)
"""The observation for a reply with neither `<sql>...</sql>` nor `<solution>...</solution>`."""

TRUNCATION_NOTE = "Truncated to 50 lines since returned response too long: "
_SQL_TAG = XMLTagFormat({"sql": "query"}, strip=False)
"""SkyRL-SQL's exploration call: the first closed `<sql>...</sql>`, whitespace kept."""

SYSTEM_PROMPT = """\
You are a senior data analyst. You answer a question about a database by writing one SQL query, \
and you may look at the data first. The database engine is {engine}.

You have at most {max_turns} turns. Work like this:
1. Begin each turn by reasoning inside <think>...</think>.
2. To inspect the data, write one query inside <sql>...</sql> and end your reply there. Its \
result comes back as a table inside <observation>...</observation>; long results are cut to \
50 rows.
3. After every observation, reason again inside <think>...</think> before anything else.
4. When you are confident, write the final query inside <solution>...</solution>. It must be a \
single read-only SELECT statement that returns exactly the columns the question asks for, in \
that order. The solution ends the task.

Example of one turn:
<think>I need to know which columns the orders table has.</think>
<sql>SELECT * FROM orders LIMIT 3</sql>

Example of a final turn:
<think>The count per city is what was asked; the query above returned it.</think>
<solution>SELECT city, COUNT(*) FROM customers GROUP BY city</solution>"""

NATIVE_SYSTEM_PROMPT = """\
You are a senior data analyst. You answer a question about a database by writing one SQL query, \
and you may look at the data first with the sql tool (read-only; results are cut to 50 rows). \
The database engine is {engine}. You have at most {max_turns} turns. When you are confident, \
call the solution tool with the final query: a single SELECT statement that returns exactly the \
columns the question asks for, in that order.

{tools}"""

USER_PROMPT = "Database schema:\n{schema}\n{evidence}\nQuestion: {question}"


@tool(name="sql")
def _sql_tool(query: str) -> str:
    """Run one read-only SQL query and see its result (at most 50 rows).

    Args:
        query: A single SELECT statement.
    """
    raise NotImplementedError  # the env runs queries itself (it owns the database)


@tool(name="solution")
def _solution_tool(sql: str) -> str:
    """Submit the final SQL query. This ends the task.

    Args:
        sql: The final SELECT statement.
    """
    raise NotImplementedError


@dataclass(frozen=True)
class SQLEnvConfig:
    """Limits of the `sql` env (the SkyRL-SQL recipe's values by default)."""

    max_turns: int = 6
    """Turns per episode; the last one must give the solution or the reward is -1."""
    tool_timeout_s: float = 5.0
    """Time limit of each exploration query."""
    reward_timeout_s: float = 30.0
    """Time limit of each query run for the reward (solution and gold)."""
    max_rows: int = 50
    """Rows kept in an observation that is too long."""
    max_chars: int = 9000
    """An observation table longer than this is cut to `max_rows` rows."""
    limits: SQLLimits = DEFAULT_SQL_LIMITS
    """Caps on every query (rows, result bytes, memory growth) and on an observation's length
    (`max_observation_chars`, applied after the cut to `max_rows` rows)."""


def render_observation(outcome: QueryOutcome, sql: str, config: SQLEnvConfig) -> str:
    """The text of one query's observation (before the `<observation>` wrapper)."""
    if outcome.status is QueryStatus.TIMEOUT:
        return f"SQL Timeout:\n{sql}"
    if outcome.status is QueryStatus.REFUSED:
        return f"SQL refused: {outcome.message}"
    limit = config.limits.max_observation_chars
    if outcome.status is QueryStatus.ERROR or (
        outcome.status is QueryStatus.TOO_LARGE and not outcome.rows
    ):
        return f"Error executing SQL: {clip_text(outcome.message, limit)}"
    if not outcome.rows:
        columns = ", ".join(outcome.columns)
        return clip_text(f"Empty result (0 rows; columns: {columns})", limit)
    rows = outcome.rows
    text = None
    # Render everything only when it might fit; a lower bound on the length decides the rest.
    if min_table_chars(outcome.columns, len(rows)) <= config.max_chars:
        text = render_table(outcome.columns, rows)
        if len(text) > config.max_chars:
            text = None
    if text is None:
        text = TRUNCATION_NOTE + render_table(outcome.columns, rows[: config.max_rows])
    # Fifty rows of long values can still be huge (the byte cap bounds what was fetched).
    text = clip_text(text, limit)
    if outcome.status is QueryStatus.TOO_LARGE:
        text += "\n" + truncation_marker(outcome.message)
    return text


class SQLEnv(TaskEnv):
    """Multi-turn Text-to-SQL over read-only SQLite, DuckDB or SQLAlchemy databases.

    Args:
        tasks: task rows (see `skyrl_gym.envs.sql.loaders`); the bundled benchmark by default.
        db_root: folder holding the databases (`<db_root>/<db_id>/<db_id>.sqlite`, ...).
        max_turns: turns per episode (default 6, the SkyRL-SQL recipe).
        tool_format: `"skyrl"` (the `<sql>`/`<solution>` tag protocol) or a native tool-call
            format: `"hermes"`, `"openai"` or a `ToolFormat` instance.
        tool_timeout_s, reward_timeout_s: time limits of exploration and reward queries.
        limits: caps on every query (default `DEFAULT_SQL_LIMITS`: 10,000 rows, 16 MiB of
            result, 256 MiB of memory growth) and on an observation's length.
    """

    required_fields: ClassVar[tuple[str, ...]] = REQUIRED_FIELDS
    max_open_databases: ClassVar[int] = 16

    def __init__(
        self,
        tasks: Sequence[TaskRow] | None = None,
        db_root: str | Path | None = None,
        max_turns: int = 6,
        tool_format: str | ToolFormat = "skyrl",
        tool_timeout_s: float = 5.0,
        reward_timeout_s: float = 30.0,
        limits: SQLLimits | None = None,
    ):
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        if tasks is None:
            from skyrl_gym.envs.sql.bundled import bundled_root, bundled_tasks

            tasks = bundled_tasks()
            db_root = bundled_root() if db_root is None else db_root
        super().__init__(tasks)
        self.db_root = Path(db_root) if db_root is not None else None
        self.config = SQLEnvConfig(
            max_turns, tool_timeout_s, reward_timeout_s, limits=limits or DEFAULT_SQL_LIMITS
        )
        self.native: ToolFormat | None = None
        if tool_format != "skyrl":
            if isinstance(tool_format, ToolFormat):
                self.native = tool_format
            elif tool_format in FORMATS:
                self.native = FORMATS[tool_format]()
            else:
                raise ValueError(
                    f"unknown tool_format {tool_format!r}; choose skyrl, {', '.join(FORMATS)}"
                )
            self.toolset = Toolset([_sql_tool, _solution_tool])
        self._databases: OrderedDict[str, ReadOnlyDatabase] = OrderedDict()
        self._schemas: dict[str, str] = {}
        self._gold_cache: dict[tuple[str, str], QueryOutcome] = {}
        self.db: ReadOnlyDatabase | None = None
        self.turns = 0
        self.transcript: list[str] = []

    # ---- databases ------------------------------------------------------------------------------

    def database(self, task: TaskRow) -> ReadOnlyDatabase:
        """The open read-only database of a task (kept open across episodes)."""
        target = resolve_database(task, self.db_root)
        db = self._databases.get(target)
        if db is None:
            db = open_database(target, self.config.limits)
            self._databases[target] = db
            while len(self._databases) > self.max_open_databases:
                self._databases.popitem(last=False)[1].close()
        else:
            self._databases.move_to_end(target)
        return db

    def schema(self, task: TaskRow, db: ReadOnlyDatabase) -> str:
        if task.get("schema"):
            return str(task["schema"])
        if db.url not in self._schemas:
            self._schemas[db.url] = database_schema(db)
        return self._schemas[db.url]

    # ---- the episode ----------------------------------------------------------------------------

    def start(self, task: TaskRow) -> Messages:
        self.db = self.database(task)
        self.turns = 0
        self.transcript = []
        engine = "DuckDB" if self.db.url.startswith("duckdb") else "SQLite"
        if "://" in self.db.url and not self.db.url.startswith(("sqlite", "duckdb")):
            engine = self.db.url.split("://", 1)[0].split("+", 1)[0]
        if self.native is None:
            system = SYSTEM_PROMPT.format(engine=engine, max_turns=self.config.max_turns)
        else:
            system = NATIVE_SYSTEM_PROMPT.format(
                engine=engine,
                max_turns=self.config.max_turns,
                tools=self.native.instructions(list(self.toolset)),
            )
        evidence = f"External knowledge: {task['evidence']}\n" if task.get("evidence") else ""
        user = USER_PROMPT.format(
            schema=self.schema(task, self.db), evidence=evidence, question=task["question"]
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _reminder(self) -> str:
        left = self.config.max_turns - self.turns
        return f"<reminder>You have {left} turns left to complete the task.</reminder>"

    def _row_limit(self, columns: tuple[str, ...]) -> int:
        """Rows enough to decide the truncation: one more than the most that could still fit."""
        line = min_table_chars(columns, 0) + 1  # the header line and its newline
        most = (self.config.max_chars + 1) // line - 1  # rows that could still fit
        return max(most, self.config.max_rows) + 1

    def run_query(self, sql: str) -> tuple[str, QueryOutcome]:
        """Run an exploration query; return its observation text and outcome."""
        assert self.db is not None
        outcome = self.db.execute(
            sql, timeout_s=self.config.tool_timeout_s, max_rows=self._row_limit
        )
        return render_observation(outcome, sql, self.config), outcome

    def step(self, action: str) -> StepReturn:
        if self.task is None or self.db is None:
            raise RuntimeError("call reset() before step()")
        action = coerce_action(action)
        self.turns += 1
        if self.native is not None:
            return self._native_step(action)
        self.transcript.append(action)
        solved = "<solution>" in action and "</solution>" in action
        if solved or self.turns >= self.config.max_turns:
            reward = skyrl_reward(
                "".join(self.transcript),
                self.task["gold_sql"],
                self.db,
                timeout_s=self.config.reward_timeout_s,
                gold_cache=self._gold_cache,
            )
            return self._finish(reward, solved, StepInfo())
        calls = _SQL_TAG.parse(action).tool_calls
        if not calls:
            text = INVALID_ACTION
            error = ParseError(
                ParseErrorKind.NO_ACTION, "write <sql>query</sql> or <solution>query</solution>"
            )
            info = StepInfo(parse_error=error).write()
        else:
            query = calls[0].arguments["query"]
            info = StepInfo((calls[0],)).write()
            text, outcome = self.run_query(query)
            info["sql_status"] = outcome.status.value
        content = f"\n\n<observation>{text}\n{self._reminder()}</observation>\n\n"
        self.transcript.append(content)
        return [{"role": "user", "content": content}], 0.0, False, False, info

    def _finish(self, reward: SQLReward, solved: bool, step: StepInfo) -> StepReturn:
        metrics = {
            "outcome": reward.outcome.value,
            "solution": reward.solution,
            "problem": reward.problem,
            "task_id": self.task["task_id"] if self.task else None,
        }
        correct = reward.outcome is RewardOutcome.CORRECT
        info = replace(step, correct=correct, episode=metrics).write()
        return [], reward.value, solved, not solved, info

    def _native_step(self, action: str) -> StepReturn:
        assert self.native is not None and self.task is not None and self.db is not None
        parsed = self.native.parse(action)
        calls = parsed.tool_calls
        error = parsed.error or next(filter(None, map(self.toolset.check, calls)), None)
        if error is None and not calls:
            error = ParseError(
                ParseErrorKind.NO_ACTION, "call the sql tool, or the solution tool to finish"
            )
        step = StepInfo(tuple(calls))
        final = next((c for c in calls if c.name == "solution"), None) if error is None else None
        if final is not None:
            solution = str(final.arguments.get("sql", ""))
            match = execution_match(
                Metric.SKYRL,
                solution,
                self.task["gold_sql"],
                [self.db],
                timeout_s=self.config.reward_timeout_s,
                gold_cache=self._gold_cache,
            )
            outcome = RewardOutcome.CORRECT if match.correct else RewardOutcome.WRONG
            return self._finish(SQLReward(outcome, solution, match.error, match), True, step)
        if self.turns >= self.config.max_turns:
            reward = SQLReward(RewardOutcome.FORMAT_VIOLATION, None, "no solution within the turns")
            return self._finish(reward, False, step)
        if error is not None:
            info = replace(step, parse_error=error).write()
            message = self.native.error_message(error)
            message = {**message, "content": f"{message['content']}\n{self._reminder()}"}
            return [message], 0.0, False, False, info
        observations: Messages = []
        for call in calls:
            text, _ = self.run_query(str(call.arguments.get("query", "")))
            result = ToolResult(call, f"{text}\n{self._reminder()}")
            observations.append(self.native.render_result(result))
        return observations, 0.0, False, False, step.write()

    def close(self) -> None:
        while self._databases:
            self._databases.popitem()[1].close()
        self.db = None
