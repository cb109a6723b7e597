"""Performance benchmarks and evaluation runners.

Every benchmark measures a baseline in the same run, prints a readable table, and ends with one
JSON object on its last line. `skyrl bench NAME --json` runs `BENCHMARKS[NAME]`.
"""

# name -> "module:function"; the function takes no arguments and returns a `BenchReport`.
BENCHMARKS: dict[str, str] = {
    "env": "benchmarks.env_step:run",
    "sandbox": "benchmarks.sandbox_bench:run",
    "rollout": "benchmarks.rollout_bench:run",
    "sql": "benchmarks.sql_bench:run",
    "search": "benchmarks.search_bench:run",
    "tinker": "benchmarks.tinker_bench:run",
    "async": "benchmarks.async_bench:run",
    "trainer": "benchmarks.trainer_bench:run",
}
