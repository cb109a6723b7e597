"""Built-in environments, registered lazily: importing this module imports none of them.

Packages installed next to skyrl_gym add env ids through the entry-point group `skyrl_gym.envs`
(`PLUGIN_GROUP`): each entry point names a zero-argument function that calls `register` with a
`"module:Class"` string, so registering stays cheap. `import skyrl_gym` runs them
(`load_plugins`). No built-in env uses that group: every one, `lookup` included, is registered
below.
"""

import importlib.metadata
import warnings

from skyrl_gym.registry import register

PLUGIN_GROUP = "skyrl_gym.envs"
"""The entry-point group of env registration hooks."""

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
    "lookup",
    "skyrl_gym.envs.lookup:LookupEnv",
    description="Look up a key with a tool, then answer the value (tiny-model RL demo).",
    max_turns=3,
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
    "terminal-gen",
    "skyrl_gym.envs.terminal_gen.env:TerminalGenEnv",
    description="Generated shell tasks (Harbor folders, train/heldout splits): <bash> then <answer>.",
    max_turns=6,
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


def load_plugins() -> list[str]:
    """Run every installed `skyrl_gym.envs` registration hook; return the names that ran.

    A hook that fails to import or raises is skipped with a warning naming it: one broken
    plugin must not make `import skyrl_gym` fail.
    """
    ran = []
    for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        try:
            ep.load()()
        except Exception as e:  # isolate each plugin: a broken one only loses its own ids
            warnings.warn(
                f"skyrl_gym.envs plugin {ep.name!r} ({ep.value}) failed: {type(e).__name__}: {e}",
                RuntimeWarning,
                stacklevel=2,
            )
        else:
            ran.append(ep.name)
    return ran
