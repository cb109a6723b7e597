"""Small-batch linear layers that use every CPU core, for `LocalEngine`'s decoding steps.

A decoding step multiplies a handful of rows (one per running request) by every weight
matrix. On CPU, MKL runs such a product (`torch.nn.functional.linear` with 1-8 rows) on one
core, or threads it poorly: a bs1 step of SmolLM2-135M streams its 540 MB of weights at one
core's memory bandwidth. Cutting each weight matrix into as many blocks of output features
as there are threads and multiplying the blocks as one batched product (`torch.bmm`, which
torch spreads over the batch) puts every core to work: on this repository's 2-core machine
the weight products of a bs1 step take 33 ms instead of 45, of a bs8 step 63 instead of 90
(`skyrl bench engine` measures the effect end to end). For whole row tiles (below) the result
equals `F.linear`'s bit for bit; rows beyond `MAX_SPLIT_ROWS` (prefill, or a few rows padded to a
wider tile) keep `F.linear`, which threads well there.

Row tiles. MKL computes a product's rows in tiles; the rows left over past the last full tile
take another kernel, whose sums round differently. The tile depends on the CPU (4 rows with
AVX2; 16 on an AVX-512 Xeon where a 4-row padding still differed), so `row_tile()` measures
it once per thread count: the smallest of `ROW_TILES` for which padded products equal a long
product's rows bit for bit. So the same token's row
would come out of a 3-row decoding step a few float32 ulps away from the same row inside a
600-row prefill, and a reused prefix's keys and values would drift from a full recompute's.
In the engine's worker every product of more than one row is padded with zero rows to a whole
number of tiles: then a row's result does not depend on how many rows it was multiplied with
(checked bit for bit in the tests), and the padding costs nothing measurable (2-3 and 5-7 rows
run at least as fast as 4 and 8; the tail kernel is the slow one). A single row keeps MKL's
matrix-vector kernel, twice as fast as a padded tile: a lone request decodes at full speed,
and its rows alone are not batch-invariant.

`split_small_linears(model)` gives the model's `nn.Linear` layers a forward that takes these
paths, and only in a thread that called `use_split_linears()` (the engine's worker): the same
model trained or scored in any other thread computes exactly what it did before.
"""

from __future__ import annotations

import functools
import math
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

MAX_SPLIT_ROWS = 8
"""Products with more rows than this keep `F.linear` (MKL threads those well)."""
MIN_SPLIT_WEIGHTS = 1 << 16
"""Weight matrices smaller than this keep `F.linear` (the split's own overhead would win)."""
ROW_TILES = (4, 8, 16, 32)
"""Candidate row tiles of MKL's float32 matrix product, smallest first (`row_tile`)."""
_CALIBRATION_SHAPES = ((256, 512), (576, 576), (576, 1536))
"""(in, out) features of the products `row_tile` checks (SmolLM2's, and a small one)."""
_CALIBRATION_ROWS = 300

_thread = threading.local()


def use_split_linears(enabled: bool = True) -> None:
    """Let the calling thread's forward passes take the split path (`LocalEngine`'s worker
    calls this once)."""
    _thread.enabled = enabled


def row_tile() -> int:
    """Rows to pad a product of two or more rows to, so that each row's result does not depend
    on how many rows it was multiplied with (measured on this CPU; see the module docstring)."""
    import torch

    return _measured_row_tile(torch.get_num_threads())


@functools.cache
def _measured_row_tile(threads: int) -> int:
    """The smallest tile of `ROW_TILES` whose padded products of 2 to 2 * tile + 3 rows equal
    a `_CALIBRATION_ROWS`-row product's rows bit for bit, for every calibration shape, with
    `threads` threads (the caller's count); the largest when none does."""
    import torch
    from torch.nn import functional

    generator = torch.Generator().manual_seed(0)
    cases = []
    for in_features, out_features in _CALIBRATION_SHAPES:
        w = torch.randn(out_features, in_features, generator=generator)
        b = torch.randn(out_features, generator=generator)
        x = torch.randn(_CALIBRATION_ROWS, in_features, generator=generator)
        with torch.no_grad():
            cases.append((x, w, b, functional.linear(x, w, b)))

    def padded_rows_match(tile: int) -> bool:
        for x, w, b, full in cases:
            for rows in range(2, 2 * tile + 4):
                padded = torch.cat([x[:rows], x.new_zeros(-rows % tile, x.shape[1])])
                with torch.no_grad():
                    if not torch.equal(functional.linear(padded, w, b)[:rows], full[:rows]):
                        return False
        return True

    return next((tile for tile in ROW_TILES if padded_rows_match(tile)), ROW_TILES[-1])


def weight_blocks(weight: torch.Tensor) -> torch.Tensor | None:
    """`weight` (`[out, in]`) as `[parts, in, out / parts]` views, one block of output features
    per thread, or None when the split does not apply to it (GPU, fewer than 2 threads, a
    small, odd-shaped or half-precision weight)."""
    import torch

    out_features, in_features = weight.shape
    parts = math.gcd(out_features, torch.get_num_threads())
    if (
        weight.device.type != "cpu"
        or weight.dtype not in (torch.float32, torch.float64)
        or parts < 2
        or weight.numel() < MIN_SPLIT_WEIGHTS
        or not weight.is_contiguous()
    ):
        return None
    return weight.view(parts, out_features // parts, in_features).transpose(1, 2)


def multiply_blocks(
    x: torch.Tensor, blocks: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """`x @ weight.T + bias` from `weight_blocks(weight)`: one batched product over the blocks."""
    import torch

    parts, in_features, width = blocks.shape
    rows = x.numel() // in_features
    flat = x.reshape(1, rows, in_features).expand(parts, rows, in_features)
    if bias is None:
        y = torch.bmm(flat, blocks)
    else:  # the bias goes in first, as in `F.linear`'s addmm: the sums round the same way
        y = torch.baddbmm(bias.view(parts, 1, width).expand(parts, rows, width), flat, blocks)
    return y.transpose(0, 1).reshape(*x.shape[:-1], parts * width)


@functools.cache
def _split_linear_class() -> type:
    import torch
    from torch.nn import functional

    class SplitLinear(torch.nn.Linear):
        """`nn.Linear` whose forward, in threads that enabled it, multiplies whole row tiles
        and splits a few rows' product over the threads where `weight_blocks` applies."""

        _blocks_for: tuple[Any, ...] | None = None
        _blocks: torch.Tensor | None = None

        def _weight_blocks(self) -> torch.Tensor | None:
            # A decoding step calls ~200 of these: the blocks are views worked out once per
            # weight storage and thread count (in-place weight updates show through views).
            # The cached view keeps its storage alive, so an equal address is the same storage
            # (a new dtype or device is a new one); the shape covers a reshaped view of it.
            w = self.weight
            key = (w.data_ptr(), w.shape, torch.get_num_threads())
            if key != self._blocks_for:
                self._blocks_for, self._blocks = key, weight_blocks(w)
            return self._blocks

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not getattr(_thread, "enabled", False) or torch.is_grad_enabled():
                return functional.linear(x, self.weight, self.bias)
            in_features = x.shape[-1]
            rows = x.numel() // in_features if in_features else 0
            pad = -rows % row_tile() if rows > 1 else 0
            flat = x
            if pad:
                flat = x.reshape(rows, in_features)
                flat = torch.cat([flat, flat.new_zeros(pad, in_features)])
            blocks = self._weight_blocks() if rows + pad <= MAX_SPLIT_ROWS else None
            if blocks is not None and x.dtype == blocks.dtype:
                y = multiply_blocks(flat, blocks, self.bias)
            else:
                y = functional.linear(flat, self.weight, self.bias)
            return y[:rows].reshape(*x.shape[:-1], y.shape[-1]) if pad else y

    return SplitLinear


def split_small_linears(model: Any) -> int:
    """Give every plain `nn.Linear` of `model` the split forward (in place: same parameters,
    same state dict, still an `nn.Linear`); returns how many layers it changed."""
    import torch

    cls = _split_linear_class()
    changed = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.__class__ = cls
            changed += 1
    return changed
