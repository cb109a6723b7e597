"""Small-batch linear layers that use every CPU core, for `LocalEngine`'s decoding steps.

A decoding step multiplies a handful of rows (one per running request) by every weight
matrix. On CPU, MKL runs such a product (`torch.nn.functional.linear` with 1-8 rows) on one
core, or threads it poorly: a bs1 step of SmolLM2-135M streams its 540 MB of weights at one
core's memory bandwidth. Cutting each weight matrix into as many blocks of output features
as there are threads and multiplying the blocks as one batched product (`torch.bmm`, which
torch spreads over the batch) puts every core to work: on this repository's 2-core machine
the weight products of a bs1 step take 33 ms instead of 45, of a bs8 step 63 instead of 90
(`skyrl bench engine` measures the effect end to end). For whole row tiles (below) the result
equals `F.linear`'s bit for bit; rows beyond `MAX_SPLIT_ROWS` (prefill) keep `F.linear`,
which threads well there.

Row tiles. MKL computes a product's rows in tiles of `ROW_TILE`; the rows left over past the
last full tile take another kernel, whose sums round differently. So the same token's row
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
ROW_TILE = 4
"""Rows per tile of MKL's float32 matrix product on x86 (see the module docstring)."""

_thread = threading.local()


def use_split_linears(enabled: bool = True) -> None:
    """Let the calling thread's forward passes take the split path (`LocalEngine`'s worker
    calls this once)."""
    _thread.enabled = enabled


def _padding(x: torch.Tensor) -> int:
    """Zero rows that bring `x`'s rows to a whole number of `ROW_TILE`s (none for one row)."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return -rows % ROW_TILE if rows > 1 else 0


def split_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor | None:
    """`F.linear(x, weight, bias)` computed as one block of output features per thread, or
    None when the split does not apply (GPU, few threads, many rows, a small or odd-shaped
    weight, autograd on)."""
    import torch

    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64):
        return None
    out_features, in_features = weight.shape
    rows = x.numel() // in_features if in_features else 0
    parts = math.gcd(out_features, torch.get_num_threads())
    if (
        parts < 2
        or not 0 < rows <= MAX_SPLIT_ROWS
        or weight.numel() < MIN_SPLIT_WEIGHTS
        or weight.dtype != x.dtype
        or not weight.is_contiguous()
        or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
    ):
        return None
    flat = x.reshape(1, rows, in_features).expand(parts, rows, in_features)
    blocks = weight.view(parts, out_features // parts, in_features).transpose(1, 2)
    if bias is None:
        y = torch.bmm(flat, blocks)
    else:  # the bias goes in first, as in `F.linear`'s addmm: the sums round the same way
        shifts = bias.view(parts, 1, out_features // parts).expand(parts, rows, -1)
        y = torch.baddbmm(shifts, flat, blocks)
    return y.transpose(0, 1).reshape(*x.shape[:-1], out_features)


@functools.cache
def _split_linear_class() -> type:
    import torch
    from torch.nn import functional

    class SplitLinear(torch.nn.Linear):
        """`nn.Linear` whose forward, in threads that enabled it, multiplies whole row tiles
        and takes `split_linear` where it applies."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not getattr(_thread, "enabled", False) or (
                torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)
            ):
                return functional.linear(x, self.weight, self.bias)
            pad = _padding(x)
            if not pad:
                y = split_linear(x, self.weight, self.bias)
                return functional.linear(x, self.weight, self.bias) if y is None else y
            flat = x.reshape(-1, x.shape[-1])
            flat = torch.cat([flat, flat.new_zeros(pad, flat.shape[1])])
            y = split_linear(flat, self.weight, self.bias)
            if y is None:
                y = functional.linear(flat, self.weight, self.bias)
            return y[:-pad].reshape(*x.shape[:-1], y.shape[-1])

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
