"""`skyrl bench tinker`: what the Tinker server costs over calling its backend in-process.

Ours: the official `tinker` SDK against `skyrl tinker serve` (a child process, so it does not
share our GIL) on 127.0.0.1: HTTP, protobuf, futures, long-poll. Baseline: the same backend
(`TrainedModel.forward_backward`, `Sampler.sample`) called in this process. Both use the same
tiny model (LoRA rank 8), the same batch and one torch thread each, in the same run.

- Per-call overhead: calls alternate between the two sides; the overhead is the median of the
  paired differences (target: under 10 ms for forward_backward and sample).
- Batching: 4 clients (each its own ServiceClient) sample the base model at once, against the
  same 4 requests sent one after another (`batched_vs_serial`, target >= 1.5).
- Memory: the server's peak RSS (VmHWM) after one forward_backward of ~140k tokens (160 datums),
  which the server runs in micro-batches (target: under 1.5 GB).

Last line: `{"fwdbwd_overhead_ms", "sample_overhead_ms", "batched_vs_serial", "peak_rss_mb", ...}`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_sdk.benchmarks.perf.report import BenchReport

ITERS = 20
"""Timed calls per measurement (after two warm-up calls)."""
TEXTS = ("the cat sat on the mat", "two plus two is four", "hello world again", "count: 1 2 3")
CLIENTS = 4
"""Concurrent sampling clients."""
BIG_DATUMS = 160
BIG_TOKENS = 140_000
"""The large forward_backward: tinker-cookbook's guess_number batch (160 datums, 140k tokens)."""


def _paired_ms(
    direct: Callable[[], Any], server: Callable[[], Any], iters: int
) -> tuple[float, float, float]:
    """Median ms of each side and median of the per-pair differences, timed alternately (so
    machine noise hits both sides alike)."""
    for _ in range(2):
        direct()
        server()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(iters):
        for fn, out in ((direct, times[0]), (server, times[1])):
            started = time.perf_counter()
            fn()
            out.append((time.perf_counter() - started) * 1000)
    diffs = [s - d for d, s in zip(*times, strict=True)]
    return statistics.median(times[0]), statistics.median(times[1]), statistics.median(diffs)


@contextlib.contextmanager
def _server_process(state: Path) -> Iterator[tuple[str, int]]:
    """`skyrl tinker serve` (one torch thread) in a child process; yields its URL and pid."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "skyrl_gym.cli", "tinker", "serve", "--port", str(port)]
    cmd += ["--state-dir", str(state), "--torch-threads", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("`skyrl tinker serve` did not start")
            try:
                httpx.get(f"{url}/api/v1/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(20)


def _rss_mb(pid: int, field: str) -> float:
    """VmRSS / VmHWM of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _batching(url: str, base_model: str, rounds: int) -> tuple[float, float]:
    """Median seconds for CLIENTS sampling requests sent one after another, and all at once."""
    import tinker
    from tinker import types

    samplers = []
    for _ in range(CLIENTS):
        service = tinker.ServiceClient(base_url=url, api_key="tml-bench")
        client = service.create_sampling_client(base_model=base_model)
        samplers.append(client.result() if hasattr(client, "result") else client)
    params = types.SamplingParams(max_tokens=16, stop=[], seed=0)
    prompt = types.ModelInput.from_ints([5, 6, 7, 8, 9])

    def serial() -> None:
        for s in samplers:
            s.sample(prompt, 4, params).result()

    def together() -> None:
        with ThreadPoolExecutor(CLIENTS) as pool:
            futures = [
                pool.submit(lambda s=s: s.sample(prompt, 4, params).result()) for s in samplers
            ]
            for f in futures:
                f.result()

    times: tuple[list[float], list[float]] = ([], [])
    for i in range(rounds + 1):
        for fn, out in ((serial, times[0]), (together, times[1])):
            started = time.perf_counter()
            fn()
            if i:  # the first round warms up
                out.append(time.perf_counter() - started)
    return statistics.median(times[0]), statistics.median(times[1])


def _big_forward_backward(trainer: Any, tokens: int) -> float:
    """One forward_backward of `tokens` tokens over BIG_DATUMS datums; seconds."""
    from tinker import types

    n = max(2, tokens // BIG_DATUMS)
    rows = [[(7 * i + j) % 900 + 5 for j in range(n + 1)] for i in range(BIG_DATUMS)]
    batch = [
        types.Datum(
            model_input=types.ModelInput.from_ints(r[:-1]),
            loss_fn_inputs={"target_tokens": r[1:], "weights": [1.0] * n},
        )
        for r in rows
    ]
    started = time.perf_counter()
    trainer.forward_backward(batch, "cross_entropy").result()
    return time.perf_counter() - started


@dataclass(frozen=True)
class _Figures:
    """What one `skyrl bench tinker` measured."""

    fb: tuple[float, float, float]
    """forward_backward: direct ms, server ms, median paired overhead ms (`_paired_ms`)."""
    sm: tuple[float, float, float]
    """sample: direct ms, server ms, median paired overhead ms."""
    serial_s: float
    """`CLIENTS` clients sampling one after another, s."""
    together_s: float
    """The same clients at once, s."""
    rss_before: float
    """Server peak RSS before the big forward_backward, MB."""
    big_s: float
    """The big forward_backward's wall time, s."""
    peak: float
    """Server peak RSS after it, MB."""
    after: float
    """Server RSS after it, MB."""


def _direct_side() -> tuple[Any, list[Any], list[list[int]]]:
    """The backend called in this process: its trained model, the data and the prompt ids."""
    import numpy as np

    from skyrl_sdk.trainer.tinker import lora
    from skyrl_sdk.trainer.tinker.backend import BaseModels, TrainedModel
    from skyrl_sdk.trainer.tinker.cli import default_models
    from skyrl_sdk.trainer.tinker.wire import Datum

    specs = default_models()
    rank8 = lora.from_request({"rank": 8, "seed": 0})
    direct = TrainedModel("direct", specs[0], BaseModels(specs), lora=rank8)
    tok = direct.tokenizer
    ids = [tok.encode(t) for t in TEXTS]
    data = [
        Datum(i[:-1], {"target_tokens": np.array(i[1:]), "weights": np.ones(len(i) - 1)})
        for i in ids
    ]
    return direct, data, ids


def _measure(
    direct: Any, data: list[Any], ids: list[list[int]], iters: int, big_tokens: int, rounds: int
) -> _Figures:
    """Each call direct and through a server process, alternating; then batching and memory."""
    import tinker
    from tinker import types

    from skyrl_sdk.trainer.tinker.cli import TINY_NAME
    from skyrl_sdk.trainer.tinker.wire import SamplingParamsIn

    prompt = ids[0]
    sp = SamplingParamsIn(max_tokens=8, stop=[], seed=0)
    sampler = direct.snapshot()
    with tempfile.TemporaryDirectory() as state, _server_process(Path(state)) as (url, pid):
        service = tinker.ServiceClient(base_url=url, api_key="tml-bench")
        trainer = service.create_lora_training_client(TINY_NAME, rank=8, seed=0).result()
        batch = [
            types.Datum(
                model_input=types.ModelInput.from_ints(i[:-1]),
                loss_fn_inputs={"target_tokens": i[1:], "weights": [1.0] * (len(i) - 1)},
            )
            for i in ids
        ]
        fb = _paired_ms(
            lambda: direct.forward_backward(data, "cross_entropy", {}, forward_only=False),
            lambda: trainer.forward_backward(batch, "cross_entropy").result(),
            iters,
        )
        client = trainer.save_weights_and_get_sampling_client()
        client = client.result() if hasattr(client, "result") else client
        params = types.SamplingParams(max_tokens=8, stop=[], seed=0)
        model_input = types.ModelInput.from_ints(prompt)
        sm = _paired_ms(
            lambda: sampler.sample(prompt, 4, sp, prompt_logprobs=False),
            lambda: client.sample(model_input, 4, params).result(),
            iters,
        )
        serial_s, together_s = _batching(url, TINY_NAME, rounds)
        rss_before = _rss_mb(pid, "VmHWM")
        big_s = _big_forward_backward(trainer, big_tokens)
        peak = _rss_mb(pid, "VmHWM")
        after = _rss_mb(pid, "VmRSS")
        service.close("success")
    return _Figures(fb, sm, serial_s, together_s, rss_before, big_s, peak, after)


def _report(f: _Figures, iters: int, big_tokens: int, rounds: int) -> BenchReport:
    fb, sm, serial_s, together_s = f.fb, f.sm, f.serial_s, f.together_s
    rss_before, big_s, peak, after = f.rss_before, f.big_s, f.peak, f.after
    result = {
        "fwdbwd_overhead_ms": round(fb[2], 3),
        "sample_overhead_ms": round(sm[2], 3),
        "fwdbwd_server_ms": round(fb[1], 3),
        "fwdbwd_direct_ms": round(fb[0], 3),
        "sample_server_ms": round(sm[1], 3),
        "sample_direct_ms": round(sm[0], 3),
        "batched_vs_serial": round(serial_s / together_s, 3),
        "serial_4_clients_ms": round(serial_s * 1000, 3),
        "batched_4_clients_ms": round(together_s * 1000, 3),
        "peak_rss_mb": round(peak, 1),
        "rss_before_big_mb": round(rss_before, 1),
        "rss_after_big_mb": round(after, 1),
        "big_fwdbwd_tokens": BIG_DATUMS * max(2, big_tokens // BIG_DATUMS),
        "big_fwdbwd_s": round(big_s, 3),
        "iters": iters,
    }
    rows = [
        ("forward_backward ms (median)", f"{fb[1]:.2f}", f"{fb[0]:.2f}"),
        ("sample 4x8 tokens ms (median)", f"{sm[1]:.2f}", f"{sm[0]:.2f}"),
        ("overhead ms: forward_backward / sample", f"{fb[2]:.2f} / {sm[2]:.2f}", "-"),
        (
            f"{CLIENTS} clients x 4x16 tokens ms: together / serial",
            f"{together_s * 1000:.1f}",
            f"{serial_s * 1000:.1f}",
        ),
        (
            f"server RSS MB: peak during / after {result['big_fwdbwd_tokens']} tokens",
            f"{peak:.0f} / {after:.0f}",
            f"{rss_before:.0f} before",
        ),
    ]
    notes = [
        "ours = tinker SDK -> `skyrl tinker serve --torch-threads 1` (child process) on 127.0.0.1;",
        "baseline = the same backend called in this process (1 torch thread).",
        f"{iters} timed calls per side, alternating, after 2 warm-ups; overhead = median of the "
        "paired differences; tiny model, LoRA r=8.",
        f"batching: {CLIENTS} ServiceClients sample the base model at once vs one after another "
        f"(median of {rounds} rounds).",
    ]
    return BenchReport(name="tinker", rows=rows, result=result, notes=notes)


def run(iters: int = ITERS, big_tokens: int = BIG_TOKENS, rounds: int = 5) -> BenchReport:
    """Measure both sides and report the overheads, the batching gain and the peak memory."""
    import torch

    os.environ.setdefault("TINKER_TELEMETRY", "0")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the server runs (--torch-threads 1)
    direct, data, ids = _direct_side()
    try:
        figures = _measure(direct, data, ids, iters, big_tokens, rounds)
    finally:
        torch.set_num_threads(threads)
    return _report(figures, iters, big_tokens, rounds)
