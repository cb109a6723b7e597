"""`skyrl bench rollout`: agent-loop throughput and the per-turn cost of token appending.

1. Throughput: 256 concurrent `math` episodes (calculator, then answer) on one event loop,
   with two instant policies: `ScriptedPolicy` (replays a script, tokenizing each distinct
   reply once, then builds a `Completion` per call), and a minimal
   token-native instant policy defined here (`_InstantPolicy`: hands back completions
   built before timing, so it does no work per call). Baseline: the same episodes played
   by a bare synchronous `reset`/`step` loop with no policy and no tokens. `vs_bare` is
   the agent loop's episodes/s over the bare loop's with the scripted policy, and
   `vs_bare_instant` with the instant one: that ratio is the loop's own overhead around a
   fast env (the issue's target, >= 0.5, is about the loop). The three are measured
   alternately, `ROUNDS` times each, and the best of each is kept, so a busy machine
   hurts them alike. On a loaded machine the wall-clock best favours the shorter bare
   runs, so the same ratios from CPU time (`*_cpu`: the process's CPU seconds per
   episode; everything runs on one thread) are reported as well.
2. Append cost: the token bookkeeping of one turn (append the sampled ids, render and
   tokenize the template delta for the observation) at turn counts 8 and 128. It must stay
   flat as episodes grow. Baseline: re-rendering and re-tokenizing the whole conversation
   each turn, which grows with the history.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time

from skyrl_sdk.benchmarks.perf.report import BenchReport

EPISODES = 256
TURN_COUNTS = (8, 128)
ROUNDS = 7


def _oracle(task: dict) -> list[str]:
    return [f"<calculator>{task['expression']}</calculator>", f"<answer>{task['answer']}</answer>"]


def _throughput(renderer, rounds: int = ROUNDS) -> dict[str, tuple[float, float, float]]:
    """(episodes/s, env steps/s, CPU seconds per episode) of the agent loop with each
    policy ("scripted", "instant") and of the bare env loop ("bare"): the best of `rounds`
    alternating runs."""
    from skyrl_sdk.agents.scripted import ScriptedPolicy

    script = {t["task_id"]: _oracle(t) for t in _tasks()}
    scripted, instant = ScriptedPolicy(script, renderer=renderer), _InstantPolicy(script, renderer)
    runs = {
        "scripted": lambda: _agent_loop(scripted),
        "instant": lambda: _agent_loop(instant),
        "bare": _bare_loop,
    }
    best = dict.fromkeys(runs, (0.0, 0.0, float("inf")))
    for _ in range(rounds):
        for name, run in runs.items():
            eps, steps, cpu = run()
            b = best[name]
            best[name] = (max(b[0], eps), max(b[1], steps), min(b[2], cpu))
    return best


class _InstantPolicy:
    """A minimal token-native instant policy, for this benchmark only: each task's replies
    as `Completion`s (exact ids ending with the end-of-turn token, logprobs 0.0, the text),
    built once before timing, handed back by task and turn. No work per call at all, so
    the agent loop's own cost is what remains."""

    name = "instant"

    def __init__(self, script: dict[str, list[str]], renderer) -> None:
        from skyrl_sdk.agents.policy import Completion, FinishReason

        self.renderer = renderer
        self._replies = {}
        for task_id, actions in script.items():
            replies = []
            for action in actions:
                ids = (*renderer.encode(action), renderer.end_of_turn_id)
                text = renderer.content_text(ids)
                replies.append(Completion(ids, (0.0,) * len(ids), text, FinishReason.STOP))
            self._replies[task_id] = replies

    async def generate(self, prompt_token_ids, sampling, *, context=None):
        return self._replies[context.task_id][context.turn]


def _tasks() -> list[dict]:
    from skyrl_gym.envs.math.env import bundled_tasks

    tasks = bundled_tasks() * (EPISODES // len(bundled_tasks()) + 1)
    return [dict(t, task_id=f"{t['task_id']}#{i}") for i, t in enumerate(tasks)][:EPISODES]


def _agent_loop(policy) -> tuple[float, float, float]:
    """(episodes/s, env steps/s, CPU s per episode) of `run_episodes` with an instant
    policy."""
    import skyrl_gym
    from skyrl_sdk.agents.rollout import RolloutLimits, run_episodes

    tasks = _tasks()
    episodes = [(t["task_id"], t) for t in tasks]
    results = []

    async def play() -> None:
        # The main task returns None: when asyncio.run restores SIGINT it builds an error
        # message with repr() of its main task, result included, which for a list of
        # trajectories costs more than the loop being measured (CPython 3.11).
        results.extend(
            await run_episodes(
                lambda: skyrl_gym.make("math"),
                policy,
                episodes,
                concurrency=EPISODES,
                limits=RolloutLimits(max_turns=4, max_tokens=256),
            )
        )

    start, cpu = time.perf_counter(), time.process_time()
    asyncio.run(play())
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert all(r.success for r in results), "the oracle must solve every episode"
    steps = sum(len(r.turns) for r in results)
    return len(results) / elapsed, steps / elapsed, cpu / len(results)


def _bare_loop() -> tuple[float, float, float]:
    """(episodes/s, env steps/s, CPU s per episode) of a plain synchronous reset/step
    loop, no policy."""
    import skyrl_gym

    tasks = _tasks()
    start, cpu = time.perf_counter(), time.process_time()
    bare_steps = 0
    for task in tasks:
        env = skyrl_gym.make("math")
        env.reset(options={"task": task})
        for action in _oracle(task):
            _, _, terminated, truncated, _ = env.step(action)
            bare_steps += 1
            if terminated or truncated:
                break
        env.close()
    bare, cpu = time.perf_counter() - start, time.process_time() - cpu
    return len(tasks) / bare, bare_steps / bare, cpu / len(tasks)


def _conversation(turns: int) -> tuple[list[dict], list[str], list[list[dict]]]:
    opening = [
        {"role": "system", "content": "Solve the task with the calculator tool, then answer."},
        {"role": "user", "content": "A farmer plants 22 rows of 11 apple trees. How many trees?"},
    ]
    actions = [f"Step {i}: <calculator>{i} * 11 + 22</calculator>" for i in range(turns)]
    observations = [
        [{"role": "user", "content": f"<observation>\n{i * 11 + 22}\n</observation>"}]
        for i in range(turns)
    ]
    return opening, actions, observations


def _append_ms_per_turn(
    renderer, turn_counts: tuple[int, ...], trials: int = 5
) -> dict[int, float]:
    """Median ms per turn of append-only bookkeeping, for episodes of each length.

    Every turn is timed on its own and the lengths are measured interleaved over the same
    number of turns (short episodes repeated); the median ignores the scheduler's spikes on
    a shared machine, so the two lengths are compared like with like.
    """
    episodes = {}
    for n in turn_counts:
        opening, actions, observations = _conversation(n)
        sampled = [(*renderer.encode(a), renderer.end_of_turn_id) for a in actions]
        episodes[n] = (opening, list(zip(sampled, observations, strict=True)))
    total = max(turn_counts)
    samples: dict[int, list[float]] = {n: [] for n in turn_counts}
    gc.disable()
    try:
        for _ in range(trials):
            for n, (opening, turns) in episodes.items():
                for _ in range(total // n):
                    prompt = renderer.prompt(opening)
                    ids = list(prompt.token_ids)
                    for gen, obs in turns:
                        start = time.perf_counter()
                        ids.extend(gen)
                        ids.extend(renderer.turn_delta(prompt, gen, obs))
                        samples[n].append(time.perf_counter() - start)
    finally:
        gc.enable()
    return {n: statistics.median(times) * 1000 for n, times in samples.items()}


def _retokenize_ms_per_turn(renderer, turns: int) -> float:
    """Mean ms per turn when the whole conversation is re-tokenized every turn."""
    from skyrl_sdk.agents.chat import retokenize_conversation

    opening, actions, observations = _conversation(turns)
    messages = list(opening)
    start = time.perf_counter()
    for action, obs in zip(actions, observations, strict=True):
        messages.append({"role": "assistant", "content": action})
        messages.extend(obs)
        retokenize_conversation(renderer, messages)
    return (time.perf_counter() - start) / turns * 1000


def run() -> BenchReport:
    from skyrl_sdk.agents.chat import ChatRenderer
    from skyrl_sdk.agents.tiny import build_tokenizer

    renderer = ChatRenderer(build_tokenizer())
    best = _throughput(renderer)
    (eps, steps, cpu), (bare_eps, bare_steps, bare_cpu) = best["scripted"], best["bare"]
    instant_eps, _, instant_cpu = best["instant"]
    append = _append_ms_per_turn(renderer, TURN_COUNTS)
    retok = {n: _retokenize_ms_per_turn(renderer, n) for n in TURN_COUNTS}
    growth = append[128] / append[8]
    vs_bare = eps / bare_eps
    vs_bare_instant = instant_eps / bare_eps
    rows = [
        (
            f"episodes/s ({EPISODES} concurrent, 2 turns), scripted policy",
            f"{eps:.0f}",
            f"{bare_eps:.0f} (bare env loop)",
        ),
        ("env steps/s, scripted policy", f"{steps:.0f}", f"{bare_steps:.0f} (bare env loop)"),
        ("agent loop vs bare env loop, scripted policy", f"{vs_bare:.2f}x", "1.00x"),
        (
            "episodes/s, instant token-native policy (bench-only)",
            f"{instant_eps:.0f}",
            f"{bare_eps:.0f} (bare env loop)",
        ),
        (
            "agent loop vs bare env loop, instant policy (target >= 0.5)",
            f"{vs_bare_instant:.2f}x",
            "1.00x",
        ),
        (
            "the same from CPU time: scripted / instant policy",
            f"{bare_cpu / cpu:.2f}x / {bare_cpu / instant_cpu:.2f}x",
            f"1.00x ({bare_cpu * 1e6:.0f} us a bare episode)",
        ),
        *(
            (
                f"ms per turn, token bookkeeping at {n} turns",
                f"{append[n]:.3f}",
                f"{retok[n]:.3f} (re-tokenize)",
            )
            for n in TURN_COUNTS
        ),
        ("growth 128 vs 8 turns", f"{growth:.2f}x", f"{retok[128] / retok[8]:.2f}x (re-tokenize)"),
    ]
    return BenchReport(
        name="rollout",
        rows=rows,
        result={
            "episodes_per_s": round(eps, 1),
            "env_steps_per_s": round(steps, 1),
            "bare_episodes_per_s": round(bare_eps, 1),
            "vs_bare": round(vs_bare, 3),
            "instant_episodes_per_s": round(instant_eps, 1),
            "vs_bare_instant": round(vs_bare_instant, 3),
            "vs_bare_cpu": round(bare_cpu / cpu, 3),
            "vs_bare_instant_cpu": round(bare_cpu / instant_cpu, 3),
            "append_ms_per_turn_8": round(append[8], 4),
            "append_ms_per_turn_128": round(append[128], 4),
            "append_growth_128_vs_8": round(growth, 3),
        },
        notes=[
            "Throughput on the in-process math env, best of "
            f"{ROUNDS} alternating runs of each: ScriptedPolicy replays its script, building "
            "a Completion per call (vs_bare); the bench-only instant policy returns prebuilt "
            "completions, so vs_bare_instant is the loop's own overhead (the target).",
            "Append: sampled ids + template delta, median per turn over interleaved trials; "
            "baseline re-renders and "
            "re-tokenizes the whole conversation each turn.",
        ],
    )
