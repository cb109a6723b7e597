"""Performance benchmarks: `skyrl bench NAME [--json]`.

Every benchmark measures a baseline in the same run, prints a readable table, and ends with one
JSON object on its last line. `skyrl bench NAME --json` runs `BENCHMARKS[NAME]`. (The evaluation
suites, which score a policy on tasks rather than time our code, are `skyrl_sdk.benchmarks`'
other subpackages: `harbor`, `swebench`, `text2sql`.)
"""

# name -> "module:function"; the function takes no arguments and returns a `BenchReport`.
BENCHMARKS: dict[str, str] = {
    "env": "skyrl_sdk.benchmarks.perf.env:run",
    "sandbox": "skyrl_sdk.benchmarks.perf.sandbox:run",
    "rollout": "skyrl_sdk.benchmarks.perf.rollout:run",
    "sql": "skyrl_sdk.benchmarks.perf.sql:run",
    "search": "skyrl_sdk.benchmarks.perf.search:run",
    "tinker": "skyrl_sdk.benchmarks.perf.tinker:run",
    "async": "skyrl_sdk.benchmarks.perf.async_rl:run",
    "trainer": "skyrl_sdk.benchmarks.perf.trainer:run",
    "serve": "skyrl_sdk.benchmarks.perf.serve:run",
    # Moves into this package later (issue 26); it is being reworked in place.
    "engine": "skyrl_sdk.benchmarks.perf.engine:run",
}
