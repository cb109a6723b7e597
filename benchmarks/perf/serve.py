"""`skyrl bench serve`: what `skyrl serve` adds on top of calling the same policy in-process.

Two policies, each called both ways in the same run, requests interleaved so machine noise
hits both alike:

- the tiny local model (`LocalEngine`, greedy, a fixed number of tokens): time to first token
  (streamed; in-process: the first `TokenChunk` of `generate_stream`) and tokens/s
  (non-streamed; in-process: `generate`);
- a scripted policy (no model cost at all), so the difference is the server's own cost per
  request: HTTP, JSON, chat-template rendering, reply parsing, capture bookkeeping.

The overhead per request is the median server time minus the median in-process time; the
target is under 5 ms.

A third measurement is fairness across sessions (issue 23): a "victim" session's 16-token
request, unloaded, then while a "hog" session (its own session key) sends n=16,
max_tokens=2000 completions in a loop; the target is the loaded median within 2x of the
unloaded one, on the engine `skyrl serve --policy tiny` runs (one torch thread), with each
step's fair share of rows (the default) and, in the same run for comparison, with fair shares
at admission only. Both sides are client processes of their own; the hog's key has no token budget
(the default 200k would stop its loop after six requests, which is the budget working, not
the scheduler). The client is plain `httpx` with keep-alive (what the `openai` SDK
uses), in its own process. The JSON names uvicorn's HTTP parser and loop (`http`, `loop`):
`httptools`/`uvloop` when installed, else `h11`/`asyncio`.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from skyrl_sdk.benchmarks.perf.report import BenchReport

TARGET_MS = 5.0
"""The overhead the server may add per request."""
REPEATS = 20
"""Requests per measurement (medians are reported)."""
TOKENS = 16
"""Tokens per tiny-model reply."""
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "How many apples are left if the farmer shares them equally?"},
]


OTHER_APIS: dict[str, tuple[str, dict[str, Any]]] = {
    "responses": (
        "/responses",
        {"model": "bench", "input": MESSAGES, "max_output_tokens": TOKENS, "temperature": 0},
    ),
    "messages": (
        "/messages",
        {
            "model": "bench",
            "system": MESSAGES[0]["content"],
            "messages": MESSAGES[1:],
            "max_tokens": TOKENS,
            "temperature": 0,
        },
    ),
}
"""Wire APIs besides chat, measured the same way with the scripted policy (the server's own
cost per request): name -> (path under /v1, request body)."""


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000.0


async def _inprocess(policy: Any, prompt: list[int], sampling: Any) -> tuple[float, float]:
    """(seconds to the first token streamed, seconds to a whole completion) in-process."""
    from skyrl_sdk.agents.policy import GenerationContext

    context = GenerationContext("bench", "bench", 0)
    started = time.perf_counter()
    first = None
    async for _ in policy.generate_stream(prompt, sampling, context=context):
        if first is None:
            first = time.perf_counter() - started
    assert first is not None
    started = time.perf_counter()
    await policy.generate(prompt, sampling, context=context)
    return first, time.perf_counter() - started


CLIENT = r"""
import json, sys, time, httpx
url, n = sys.argv[1], int(sys.argv[2])
body = json.loads(sys.stdin.read())
first, total = [], []
with httpx.Client(timeout=600) as http:
    for k in range(n):
        ask = dict(body, user=f"bench-{k}")
        started, seen = time.perf_counter(), None
        with http.stream("POST", url, json=dict(ask, stream=True)) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if seen is None and line.startswith("data: "):
                    seen = time.perf_counter() - started
        first.append(seen)
        started = time.perf_counter()
        http.post(url, json=ask).raise_for_status()
        total.append(time.perf_counter() - started)
print(json.dumps({"first": first, "total": total}))
"""
"""The HTTP client, run as its own process (as a harness is): a client thread in the server's
process would contend with it for the GIL and bill that to the server."""
WARMUP = 2
"""Requests discarded at the start of each block."""
ROUNDS = 2
"""Blocks per side, alternating in-process and server, so drifting load hits both."""


def _through_server(url: str, body: dict[str, Any], n: int) -> tuple[list[float], list[float]]:
    """(seconds to the first streamed event, seconds per non-streamed answer) per request."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", CLIENT, url, str(n)],
        input=json.dumps(body),
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return data["first"], data["total"]


def _measure(
    policy: Any,
    renderer: Any,
    sampling: Any,
    body: dict[str, Any],
    path: str = "/chat/completions",
) -> dict[str, float]:
    from skyrl_sdk.agents.serving import ServeConfig, start_server

    prompt = list(renderer.encode(renderer.render(MESSAGES, add_generation_prompt=True)))
    loop = asyncio.new_event_loop()
    first_in: list[float] = []
    total_in: list[float] = []
    first_srv: list[float] = []
    total_srv: list[float] = []
    cpu_s = 0.0
    per_block = REPEATS // ROUNDS
    try:
        with start_server(policy, ServeConfig(model_name="bench"), renderer=renderer) as server:
            url = f"{server.base_url}{path}"
            for _ in range(ROUNDS):
                for k in range(per_block + WARMUP):
                    a, b = loop.run_until_complete(_inprocess(policy, prompt, sampling))
                    if k >= WARMUP:
                        first_in.append(a)
                        total_in.append(b)
                cpu_before = _cpu_s()
                first, total = _through_server(url, body, per_block + WARMUP)
                cpu_s += _cpu_s() - cpu_before
                first_srv += first[WARMUP:]
                total_srv += total[WARMUP:]
    finally:
        loop.close()
    return {
        "ttft_in": _median_ms(first_in),
        "ttft_srv": _median_ms(first_srv),
        "total_in": _median_ms(total_in),
        "total_srv": _median_ms(total_srv),
        # Each client request pair is one streamed and one non-streamed request.
        "cpu_srv": cpu_s * 1000.0 / (2 * ROUNDS * (per_block + WARMUP)),
    }


FAIR_TARGET = 2.0
"""Most the victim's loaded latency may be, as a multiple of its unloaded latency."""
FAIR_REPEATS = 12
"""Victim requests per side, in `ROUNDS` alternating blocks (medians are reported)."""
HOG = r"""
import json, sys, httpx
url, key = sys.argv[1], sys.argv[2]
body = {"model": "bench", "prompt": "the quick brown fox", "n": 16, "max_tokens": 2000}
with httpx.Client(timeout=3600, headers={"Authorization": f"Bearer {key}"}) as http:
    while True:
        http.post(url, json=body)
"""
"""The hog: n=16 x 2000-token completions in a loop until it is killed."""
VICTIM = r"""
import json, sys, time, httpx
url, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = json.loads(sys.stdin.read())
total = []
with httpx.Client(timeout=600, headers={"Authorization": f"Bearer {key}"}) as http:
    for _ in range(n):
        started = time.perf_counter()
        http.post(url, json=body).raise_for_status()
        total.append(time.perf_counter() - started)
print(json.dumps(total))
"""
"""The victim: `n` short chat requests, one at a time; prints their seconds."""


def _victim(url: str, key: str, body: dict[str, Any], n: int) -> list[float]:
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", VICTIM, url, key, str(n)],
        input=json.dumps(body),
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fairness(engine: Any, renderer: Any, body: dict[str, Any]) -> dict[str, float]:
    """The victim's median latency unloaded and beside the hog (alternating blocks, so
    drifting machine load hits both alike); the hog's peak rows of the batch."""
    import subprocess
    import sys

    from skyrl_sdk.agents.serving import ServeConfig, start_server

    config = ServeConfig(model_name="bench", api_key="bench-main")
    unloaded: list[float] = []
    loaded: list[float] = []
    peak = [0]
    cap = engine.fairness.max_rows or engine.max_batch_size
    with start_server(engine, config, renderer=renderer) as server:
        victim_key = server.issue_session_key("victim")
        hog_key = server.issue_session_key("hog", token_budget=0)
        victim_url = f"{server.session_url('victim')}/chat/completions"
        hog_url = f"{server.session_url('hog')}/completions"
        per_block = FAIR_REPEATS // ROUNDS
        for _ in range(ROUNDS):
            unloaded += _victim(victim_url, victim_key, body, per_block + WARMUP)[WARMUP:]
            hog = subprocess.Popen(
                [sys.executable, "-c", HOG, hog_url, hog_key],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            watching = threading.Event()

            def watch(watching: threading.Event = watching) -> None:
                while not watching.is_set():
                    peak[0] = max(peak[0], engine.running_by_tenant().get("hog", 0))
                    time.sleep(0.005)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            try:
                deadline = time.monotonic() + 120
                while engine.running_by_tenant().get("hog", 0) < cap:
                    if time.monotonic() > deadline or hog.poll() is not None:
                        raise RuntimeError("the hog's requests never filled its share")
                    time.sleep(0.02)
                loaded += _victim(victim_url, victim_key, body, per_block)
            finally:
                hog.kill()
                hog.wait(30)
                watching.set()
                watcher.join(5)
            deadline = time.monotonic() + 60  # the hog's rows leave once its client is gone
            while engine.running and time.monotonic() < deadline:
                time.sleep(0.05)
    return {
        "unloaded": _median_ms(unloaded),
        "loaded": _median_ms(loaded),
        "hog_rows": float(peak[0]),
        "cap": float(cap),
        "sat_out": float(engine.stats().rows_sat_out),
    }


def _fair_engine(step_rows: bool) -> tuple[Any, Any]:
    """The engine and renderer `skyrl serve --policy tiny` runs (its defaults); without
    `step_rows`, fairness at admission only (every row advances every step)."""
    from skyrl_sdk.agents.engine.fairness import FairnessLimits
    from skyrl_sdk.agents.policy_spec import PolicyUse, load_policy

    limits = None if step_rows else FairnessLimits(max_rows=8, step_rows=None)
    loaded = load_policy("tiny", max_batch_size=16, fairness=limits, use=PolicyUse.SERVE)
    return loaded.policy, loaded.renderer


CONSTRAINED_SCHEMA = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["cat", "dog", "bird"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 30},
        "owner": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 10}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"enum": ["calm", "loud"]}, "maxItems": 3},
    },
    "required": ["kind", "age", "owner", "tags"],
    "additionalProperties": False,
}
"""The `response_format` schema of the constrained-decoding row."""


def _constrained_cost(engine: Any, renderer: Any) -> dict[str, float] | None:
    """Constrained decoding on the tiny engine, in-process: milliseconds per token of
    replies sampled under `CONSTRAINED_SCHEMA` and of unconstrained replies (medians over
    `REPEATS` seeds each, alternating), and of the grammar's own work alone (mask and
    advance, replayed over the constrained replies' ids). None without the grammar extra."""
    from dataclasses import replace

    from skyrl_sdk.agents.engine.constraints import Constraint, ConstraintError, GrammarMatcher
    from skyrl_sdk.agents.policy import SamplingParams

    constraint = Constraint.json_schema(CONSTRAINED_SCHEMA)
    try:
        constraint.check(renderer.tokenizer)
    except ConstraintError:
        return None
    prompt = list(renderer.prompt(MESSAGES).token_ids)
    base = SamplingParams(max_tokens=128, stop_token_ids=renderer.stop_token_ids)
    per: dict[bool, list[float]] = {False: [], True: []}
    mask: list[float] = []
    for seed in range(REPEATS):
        for masked in (False, True):
            sampling = replace(base, seed=seed, constraint=constraint if masked else None)
            started = time.perf_counter()
            c = asyncio.run(engine.generate(prompt, sampling))
            per[masked].append((time.perf_counter() - started) / len(c.token_ids))
        matcher = GrammarMatcher(constraint, renderer.tokenizer, renderer.stop_token_ids)
        vocab = int(engine.model.config.vocab_size)
        started = time.perf_counter()
        for token in c.token_ids:
            matcher.allowed(vocab)
            matcher.advance(token)
        mask.append((time.perf_counter() - started) / len(c.token_ids))
    return {
        "ms_per_token": _median_ms(per[True]),
        "ms_per_token_unconstrained": _median_ms(per[False]),
        "mask_ms_per_token": _median_ms(mask),
    }


def _constrained_row(cost: dict[str, float] | None) -> tuple[str, str, str]:
    name = "tiny: constrained decoding per token (JSON schema)"
    if cost is None:
        return (name, "-", "needs the grammar extra (llguidance)")
    return (
        name,
        f"{cost['ms_per_token']:.2f} ms (mask {cost['mask_ms_per_token']:.3f} ms)",
        f"{cost['ms_per_token_unconstrained']:.2f} ms unconstrained",
    )


def _cpu_s() -> float:
    """CPU seconds of this process (the server thread's, while the client process runs and
    the main thread waits for it): unlike wall time, barely moved by other load."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class _Runs:
    """What one `skyrl bench serve` measured."""

    tiny: dict[str, float]
    """`_measure` with the tiny model (LocalEngine)."""
    free: dict[str, float]
    """`_measure` with a scripted policy: the server's own cost, no model cost."""
    fair: dict[str, float]
    """`_fairness` with each step's fair share (the default)."""
    admission_only: dict[str, float]
    """`_fairness` with fair shares at admission only."""
    max_batch_size: int
    """The tiny engine's batch rows."""
    apis: dict[str, dict[str, float]]
    """`_measure` with the scripted policy for each of `OTHER_APIS`."""
    constrained: dict[str, float] | None = None
    """`_constrained_cost` (None: the grammar extra is not installed)."""


def _measure_runs() -> _Runs:
    from skyrl_sdk.agents.engine import LocalEngine
    from skyrl_sdk.agents.policy import SamplingParams
    from skyrl_sdk.agents.scripted import ScriptedPolicy
    from skyrl_sdk.agents.tiny import tiny_model_dir, tiny_renderer

    directory = tiny_model_dir()
    renderer = tiny_renderer(directory)
    body = {"model": "bench", "messages": MESSAGES, "max_tokens": TOKENS, "temperature": 0}
    sampling = SamplingParams(
        max_tokens=TOKENS, temperature=0.0, stop_token_ids=renderer.stop_token_ids
    )
    engine = LocalEngine.from_pretrained(directory, name="tiny")
    try:
        tiny = _measure(engine, renderer, sampling, body)
        constrained = _constrained_cost(engine, renderer)
    finally:
        asyncio.run(engine.aclose())
    # Fairness on the engine `skyrl serve --policy tiny` runs, with the fair share of each
    # step (the default) and, for comparison in the same run, with fairness at admission only.
    fair_runs: dict[bool, dict[str, float]] = {}
    for step_rows in (False, True):
        fair_engine, fair_renderer = _fair_engine(step_rows)
        try:
            fair_runs[step_rows] = _fairness(fair_engine, fair_renderer, {**body, "model": "bench"})
        finally:
            asyncio.run(fair_engine.aclose())
    reply = "There are 12 apples left. " * 4
    scripted = ScriptedPolicy(lambda context: reply, renderer=renderer)
    free = _measure(scripted, renderer, sampling, body)
    apis = {
        name: _measure(scripted, renderer, sampling, api_body, path)
        for name, (path, api_body) in OTHER_APIS.items()
    }
    return _Runs(
        tiny, free, fair_runs[True], fair_runs[False], engine.max_batch_size, apis, constrained
    )


def _result(runs: _Runs) -> dict[str, Any]:
    from skyrl_sdk.agents.serving.runner import uvicorn_options

    tiny, free, fair, admission_only = runs.tiny, runs.free, runs.fair, runs.admission_only
    tokens_in = TOKENS / (tiny["total_in"] / 1000.0)
    tokens_srv = TOKENS / (tiny["total_srv"] / 1000.0)
    overhead_tiny = tiny["total_srv"] - tiny["total_in"]
    overhead = free["total_srv"] - free["total_in"]
    ttft_overhead = free["ttft_srv"] - free["ttft_in"]
    return {
        "ttft_ms_server": round(tiny["ttft_srv"], 2),
        "ttft_ms_inprocess": round(tiny["ttft_in"], 2),
        "tokens_per_s_server": round(tokens_srv, 1),
        "tokens_per_s_inprocess": round(tokens_in, 1),
        "overhead_ms_per_request_tiny": round(overhead_tiny, 2),
        "overhead_ms_per_request": round(overhead, 2),
        "overhead_ms_first_token": round(ttft_overhead, 2),
        "server_cpu_ms_per_request": round(free["cpu_srv"], 3),
        "target_ms": TARGET_MS,
        "meets_target": overhead < TARGET_MS and ttft_overhead < TARGET_MS,
        "repeats": REPEATS,
        "fair_victim_ms_unloaded": round(fair["unloaded"], 1),
        "fair_victim_ms_beside_hog": round(fair["loaded"], 1),
        "fair_slowdown": round(fair["loaded"] / fair["unloaded"], 2),
        "fair_hog_peak_rows": int(fair["hog_rows"]),
        "fair_session_max_rows": int(fair["cap"]),
        "fair_target": FAIR_TARGET,
        "fair_meets_target": fair["loaded"] <= FAIR_TARGET * fair["unloaded"],
        "fair_rows_sat_out": int(fair["sat_out"]),
        "fair_slowdown_admission_only": round(
            admission_only["loaded"] / admission_only["unloaded"], 2
        ),
        **{
            f"overhead_ms_per_request_{name}": round(r["total_srv"] - r["total_in"], 2)
            for name, r in runs.apis.items()
        },
        **{f"constrained_{k}": round(v, 4) for k, v in (runs.constrained or {}).items()},
        **uvicorn_options(),
    }


def _rows(runs: _Runs) -> list[tuple[str, str, str]]:
    tiny, free, fair, admission_only = runs.tiny, runs.free, runs.fair, runs.admission_only
    tokens_in = TOKENS / (tiny["total_in"] / 1000.0)
    tokens_srv = TOKENS / (tiny["total_srv"] / 1000.0)
    overhead = free["total_srv"] - free["total_in"]
    apis = [
        (
            f"server overhead per request, {name}",
            f"{r['total_srv'] - r['total_in']:.2f} ms",
            f"target < {TARGET_MS:.0f} ms",
        )
        for name, r in runs.apis.items()
    ]
    return [
        ("tiny: time to first token", f"{tiny['ttft_srv']:.1f} ms", f"{tiny['ttft_in']:.1f} ms"),
        (f"tiny: tokens/s ({TOKENS} tokens)", f"{tokens_srv:.0f}", f"{tokens_in:.0f}"),
        ("tiny: request", f"{tiny['total_srv']:.1f} ms", f"{tiny['total_in']:.1f} ms"),
        ("scripted: first token", f"{free['ttft_srv']:.2f} ms", f"{free['ttft_in']:.2f} ms"),
        ("scripted: request", f"{free['total_srv']:.2f} ms", f"{free['total_in']:.2f} ms"),
        (
            "server overhead per request",
            f"{overhead:.2f} ms",
            f"target < {TARGET_MS:.0f} ms",
        ),
        ("scripted: server CPU per request", f"{free['cpu_srv']:.2f} ms", "-"),
        (
            "fairness: 16-token request beside an n=16 x 2000 hog",
            f"{fair['loaded']:.1f} ms ({fair['loaded'] / fair['unloaded']:.2f}x)",
            f"{fair['unloaded']:.1f} ms unloaded, target <= {FAIR_TARGET:.0f}x",
        ),
        (
            "fairness: the same, fair shares at admission only",
            f"{admission_only['loaded']:.1f} ms "
            f"({admission_only['loaded'] / admission_only['unloaded']:.2f}x)",
            f"{admission_only['unloaded']:.1f} ms unloaded",
        ),
        (
            "fairness: hog's peak rows of the batch",
            f"{int(fair['hog_rows'])} of {runs.max_batch_size}",
            f"cap {int(fair['cap'])}",
        ),
        *apis,
        _constrained_row(runs.constrained),
    ]


def _notes(result: dict[str, Any]) -> list[str]:
    return [
        "ours: through `skyrl serve` (127.0.0.1, chat completions, an httpx client in its "
        "own process with keep-alive); "
        "baseline: the same policy object called in-process with the same prompt ids.",
        f"medians of {REPEATS} requests each way, in {ROUNDS} alternating blocks after "
        f"{WARMUP} warm-up requests each; the overhead is "
        "measured with a scripted policy (no model cost), the tiny rows show it next to a model.",
        f"uvicorn with http={result['http']}, loop={result['loop']} (httptools and uvloop "
        "when installed, else h11 and asyncio).",
        f"fairness: medians of {FAIR_REPEATS} requests of the victim session (chat, "
        f"{TOKENS} tokens, greedy) alone, then while the hog session's client process sends "
        "n=16, max_tokens=2000 completions in a loop (its key without a token budget); "
        "ours is beside the hog, the baseline alone; on the engine `skyrl serve --policy tiny` "
        "runs, with each step's fair share (the default: beside a smaller session the hog's "
        "rows advance as many per step as it holds, the rest sit the step out) and, for "
        "comparison, with fair shares at admission only (every row advances every step).",
        "server CPU per request: the server process's CPU time over its requests (streamed "
        "and not, warm-ups included); on a loaded machine the overhead is mostly waiting to "
        "be scheduled, which this number leaves out.",
    ]


def run() -> BenchReport:
    runs = _measure_runs()
    result = _result(runs)
    return BenchReport("serve", _rows(runs), result, _notes(result))
