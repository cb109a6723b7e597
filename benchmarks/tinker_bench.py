"""`skyrl bench tinker`: per-call overhead of the Tinker server over calling the backend directly.

Both sides use the same tiny model (LoRA rank 8) and the same batch, in the same run: the
official `tinker` SDK against `skyrl tinker serve` (a child process) on 127.0.0.1 (HTTP, protobuf, futures, long-poll), and
`TrainedModel.forward_backward` / `Sampler.sample` called in-process. Each call is timed to its
result; the overhead is the difference of medians. Last line:
`{"fwdbwd_overhead_ms", "sample_overhead_ms", ...}`.
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
from pathlib import Path
from typing import Any

from skyrl_sdk.benchmarks.report import BenchReport

ITERS = 20
"""Timed calls per measurement (after two warm-up calls)."""
TEXTS = ("the cat sat on the mat", "two plus two is four", "hello world again", "count: 1 2 3")


def _paired_median_ms(
    direct: Callable[[], Any], server: Callable[[], Any], iters: int
) -> tuple[float, float]:
    """Median ms of each, timed alternately (so machine noise hits both sides alike)."""
    for _ in range(2):
        direct()
        server()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(iters):
        for fn, out in ((direct, times[0]), (server, times[1])):
            started = time.perf_counter()
            fn()
            out.append((time.perf_counter() - started) * 1000)
    return statistics.median(times[0]), statistics.median(times[1])


@contextlib.contextmanager
def _server_process(state: Path) -> Iterator[str]:
    """`skyrl tinker serve` in a child process (so it does not share our GIL); yields its URL."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "skyrl_gym.cli", "tinker", "serve", "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, "--state-dir", str(state)], stdout=subprocess.DEVNULL, start_new_session=True
    )
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
        yield url
    finally:
        proc.terminate()
        proc.wait(20)


def run(iters: int = ITERS) -> BenchReport:
    """Measure both sides and report the per-call overheads."""
    import numpy as np
    import tinker
    from tinker import types

    from skyrl_sdk.trainer.tinker import lora
    from skyrl_sdk.trainer.tinker.backend import BaseModels, TrainedModel
    from skyrl_sdk.trainer.tinker.cli import TINY_NAME, default_models
    from skyrl_sdk.trainer.tinker.wire import Datum, SamplingParamsIn

    os.environ.setdefault("TINKER_TELEMETRY", "0")
    specs = default_models()
    # Direct: the backend in this process.
    direct = TrainedModel(
        "direct", specs[0], BaseModels(specs), lora=lora.from_request({"rank": 8, "seed": 0})
    )
    tok = direct.tokenizer
    ids = [tok.encode(t) for t in TEXTS]
    data = [
        Datum(i[:-1], {"target_tokens": np.array(i[1:]), "weights": np.ones(len(i) - 1)})
        for i in ids
    ]
    prompt = ids[0]
    sp = SamplingParamsIn(max_tokens=8, stop=[], seed=0)
    sampler = direct.snapshot()
    # Through the server, with the SDK.
    with tempfile.TemporaryDirectory() as state, _server_process(Path(state)) as url:
        service = tinker.ServiceClient(base_url=url, api_key="tml-bench")
        trainer = service.create_lora_training_client(TINY_NAME, rank=8, seed=0).result()
        batch = [
            types.Datum(
                model_input=types.ModelInput.from_ints(i[:-1]),
                loss_fn_inputs={"target_tokens": i[1:], "weights": [1.0] * (len(i) - 1)},
            )
            for i in ids
        ]
        fb_direct, fb_server = _paired_median_ms(
            lambda: direct.forward_backward(data, "cross_entropy", {}, forward_only=False),
            lambda: trainer.forward_backward(batch, "cross_entropy").result(),
            iters,
        )
        client = trainer.save_weights_and_get_sampling_client()
        client = client.result() if hasattr(client, "result") else client
        params = types.SamplingParams(max_tokens=8, stop=[], seed=0)
        model_input = types.ModelInput.from_ints(prompt)
        sample_direct, sample_server = _paired_median_ms(
            lambda: sampler.sample(prompt, 4, sp, prompt_logprobs=False),
            lambda: client.sample(model_input, 4, params).result(),
            iters,
        )
        service.close("success")
    result = {
        "fwdbwd_overhead_ms": round(fb_server - fb_direct, 3),
        "sample_overhead_ms": round(sample_server - sample_direct, 3),
        "fwdbwd_server_ms": round(fb_server, 3),
        "fwdbwd_direct_ms": round(fb_direct, 3),
        "sample_server_ms": round(sample_server, 3),
        "sample_direct_ms": round(sample_direct, 3),
        "iters": iters,
    }
    rows = [
        ("forward_backward ms (median)", f"{fb_server:.2f}", f"{fb_direct:.2f}"),
        ("sample 4x8 tokens ms (median)", f"{sample_server:.2f}", f"{sample_direct:.2f}"),
    ]
    notes = [
        "ours = tinker SDK -> `skyrl tinker serve` (child process) on 127.0.0.1;",
        "baseline = the same backend called in this process.",
        f"{iters} timed calls per side, alternating, after 2 warm-ups; tiny model, LoRA r=8.",
    ]
    return BenchReport(name="tinker", rows=rows, result=result, notes=notes)
