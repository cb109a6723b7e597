"""Built-in environments, registered lazily: importing this module imports none of them."""

from skyrl_gym.registry import register

register(
    "math",
    "skyrl_gym.envs.math.env:MathEnv",
    description="Arithmetic word problems with a calculator tool; reward 1 for the exact answer.",
    max_turns=6,
)
register(
    "math-answer",
    "skyrl_gym.envs.math.single:MathAnswerEnv",
    description="The math problems as single-turn episodes: reply ending in '#### <number>'.",
)
register(
    "lookup-chat",
    "skyrl_gym.envs.lookup_chat:LookupChatEnv",
    description="Look a price up with lookup(item), then reply 'ANSWER: price' (small-model RL demo).",
    max_turns=3,
)
register(
    "python",
    "skyrl_gym.envs.python.env:PythonEnv",
    description="Solve problems by running code in a persistent sandboxed Python interpreter.",
    max_turns=8,
)
register(
    "terminal",
    "skyrl_gym.envs.terminal.env:TerminalEnv",
    description="Shell tasks in a bwrap sandbox, graded by a check run in a fresh phase.",
    max_turns=16,
)
register(
    "harbor",
    "skyrl_gym.envs.harbor.env:HarborEnv",
    description="Harbor task folders (Terminal-Bench style) graded by their own tests/test.sh.",
    max_turns=30,
)
register(
    "swe",
    "skyrl_gym.envs.swe.env:SWEEnv",
    description="SWE-bench: fix an issue in a sandboxed repository; reward = resolved check.",
    max_turns=30,
)
register(
    "sql-basic",
    "skyrl_gym.envs.sql_basic.env:SQLBasicEnv",
    description="Questions over a bundled SQLite shop database through a read-only sql tool.",
    max_turns=8,
)
register(
    "search",
    "skyrl_gym.envs.search.env:SearchEnv",
    description="Search-R1 style QA: <search> a local BM25 index (or a retrieval server), <answer>.",
    max_turns=4,
)
for _sql_id in ("sql", "text2sql"):
    register(
        _sql_id,
        "skyrl_gym.envs.sql.env:SQLEnv",
        description="SkyRL-SQL Text-to-SQL: <sql> exploration, <solution> answer, reward 1/0/-1.",
    )
