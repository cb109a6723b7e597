"""`split_linear`: small-batch products split over the cores, only where the engine asks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from skyrl_sdk.agents.engine import split_linear as sl  # noqa: E402


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows of each product that took the split (the layers look `multiply_blocks` up per
    call)."""
    taken: list[int] = []
    real = sl.multiply_blocks

    def counting(x: Any, blocks: Any, bias: Any) -> Any:
        taken.append(x.numel() // blocks.shape[1])
        return real(x, blocks, bias)

    monkeypatch.setattr(sl, "multiply_blocks", counting)
    return taken


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8])
def test_split_product_equals_linear_up_to_rounding(two_threads: None, rows: int) -> None:
    torch.manual_seed(rows)
    weight, bias = torch.randn(512, 256), torch.randn(512)
    x = torch.randn(1, rows, 256)
    blocks = sl.weight_blocks(weight)
    assert blocks is not None
    with torch.no_grad():
        y = sl.multiply_blocks(x, blocks, bias)
        assert y.shape == (1, rows, 512)
        # Sums of 256 products of unit normals: float32 rounding is ~1e-5 here.
        torch.testing.assert_close(
            y, torch.nn.functional.linear(x, weight, bias), atol=1e-4, rtol=1e-5
        )
        assert sl.multiply_blocks(x, blocks, None).shape == (1, rows, 512)


def test_split_declines_what_it_does_not_speed_up(two_threads: None, counted: list[int]) -> None:
    weight = torch.randn(512, 256)
    assert sl.weight_blocks(torch.randn(32, 16)) is None  # small
    assert sl.weight_blocks(torch.randn(511, 256)) is None  # odd
    assert sl.weight_blocks(weight.half()) is None
    layer = torch.nn.Linear(256, 512)
    sl.split_small_linears(layer)
    many = torch.randn(sl.MAX_SPLIT_ROWS + 1, 256)
    torch.testing.assert_close(_in_worker(lambda: layer(many)), layer(many).detach())
    assert counted == []  # prefill rows keep F.linear

    out: list[Any] = []

    def trained() -> None:  # autograd on: the product stays F.linear's, gradients flow
        sl.use_split_linears()
        out.append(layer(torch.randn(1, 256)))

    thread = threading.Thread(target=trained)
    thread.start()
    thread.join()
    assert counted == [] and out[0].requires_grad
    torch.set_num_threads(1)
    assert sl.weight_blocks(weight) is None  # nothing to split over


def test_layers_split_only_in_threads_that_ask(two_threads: None, counted: list[int]) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))
    keys = list(model.state_dict())
    assert sl.split_small_linears(model) == 2
    assert all(isinstance(m, torch.nn.Linear) for m in (model[0], model[2]))
    assert list(model.state_dict()) == keys
    x = torch.randn(2, 256)
    with torch.no_grad():
        here = model(x)
    assert counted == []  # this thread never asked

    out: list[Any] = []

    def worker() -> None:
        sl.use_split_linears()
        with torch.no_grad():
            out.append(model(x))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    # The big layer split (2 rows padded to a tile, where the tile fits the split); the 512x8
    # one is below MIN_SPLIT_WEIGHTS.
    tile = sl.row_tile()
    assert counted == ([tile] if tile <= sl.MAX_SPLIT_ROWS else [])
    torch.testing.assert_close(out[0], here, atol=1e-4, rtol=1e-5)


def _in_worker(fn: Any) -> Any:
    """`fn()` in a thread that asked for the engine's linears, with autograd off."""
    out: list[Any] = []

    def worker() -> None:
        sl.use_split_linears()
        with torch.no_grad():
            out.append(fn())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    return out[0]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_is_the_same_bits_whatever_it_is_multiplied_with(threads: int) -> None:
    """In the engine's worker a row's product does not depend on how many rows share it (2 to
    19 rows, split or not, against a 300-row prefill): reused keys and values equal a full
    recompute's. A lone row keeps the faster matrix-vector kernel (rounding may differ)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(threads)
        layers = [torch.nn.Linear(256, 512), torch.nn.Linear(256, 512, bias=False)]
        for layer in layers:
            sl.split_small_linears(layer)
        x = torch.randn(300, 256)

        def products() -> list[tuple[Any, list[Any]]]:
            return [(layer(x), [layer(x[:m]) for m in range(1, 20)]) for layer in layers]

        for (full, parts), layer in zip(_in_worker(products), layers, strict=True):
            with torch.no_grad():
                assert torch.equal(full, torch.nn.functional.linear(x, layer.weight, layer.bias))
            for m, part in enumerate(parts[1:], start=2):
                assert torch.equal(part, full[:m]), f"{m} rows"
            torch.testing.assert_close(parts[0], full[:1], atol=1e-4, rtol=1e-5)
    finally:
        torch.set_num_threads(before)


def test_engine_decodes_the_same_tokens_with_split_products(
    two_threads: None, counted: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from skyrl_sdk.agents.engine import LocalEngine
    from skyrl_sdk.agents.policy import SamplingParams
    from skyrl_sdk.agents.tiny import tiny_model_dir

    monkeypatch.setattr(sl, "MIN_SPLIT_WEIGHTS", 0)  # the tiny model's layers are small
    path = tiny_model_dir()

    async def sample(split: bool) -> list[Any]:
        if not split:
            monkeypatch.setattr(sl, "weight_blocks", lambda *_: None)
        engine = LocalEngine.from_pretrained(path, max_batch_size=4)
        prompt = list(engine.renderer.prompt([{"role": "user", "content": "hello"}]).token_ids)
        try:
            return await asyncio.gather(
                *[engine.generate(prompt, SamplingParams(max_tokens=12, seed=s)) for s in range(3)]
            )
        finally:
            await engine.aclose()

    split = asyncio.run(sample(True))
    assert counted and max(counted) <= sl.MAX_SPLIT_ROWS  # decoding steps took the split
    plain = asyncio.run(sample(False))
    for a, b in zip(split, plain, strict=True):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4


def test_new_weights_show_in_the_split_product(two_threads: None) -> None:
    """The split's weight blocks are cached views: weights changed in place show through
    them, and weights replaced by a new tensor are split anew."""
    layer = torch.nn.Linear(256, 512)
    sl.split_small_linears(layer)
    x = torch.randn(3, 256)

    def product() -> Any:
        out = _in_worker(lambda: layer(x))
        with torch.no_grad():
            torch.testing.assert_close(out, layer(x), atol=1e-4, rtol=1e-5)
        return out

    first = product()
    with torch.no_grad():
        layer.weight.mul_(2)  # in place, as `load_state_dict` and weight syncs do
    assert not torch.allclose(product(), first)
    layer.weight.data = torch.randn(512, 256)  # a new storage
    product()
