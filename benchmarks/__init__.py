"""Performance benchmarks and evaluation runners.

Every benchmark measures a baseline in the same run, prints a readable table, and ends with one
JSON object on its last line. `skyrl bench NAME --json` runs `BENCHMARKS[NAME]`.
"""

# name -> "module:function"; the function takes no arguments and returns a `BenchReport`.
BENCHMARKS: dict[str, str] = {
    "env": "skyrl_sdk.benchmarks.env_step:run",
    "sandbox": "skyrl_sdk.benchmarks.sandbox_bench:run",
    "rollout": "skyrl_sdk.benchmarks.rollout_bench:run",
    "sql": "skyrl_sdk.benchmarks.sql_bench:run",
    "search": "skyrl_sdk.benchmarks.search_bench:run",
    "tinker": "skyrl_sdk.benchmarks.tinker_bench:run",
    "async": "skyrl_sdk.benchmarks.async_bench:run",
    "trainer": "skyrl_sdk.benchmarks.trainer_bench:run",
    "serve": "skyrl_sdk.benchmarks.serve_bench:run",
    "engine": "skyrl_sdk.benchmarks.engine_bench:run",
}
