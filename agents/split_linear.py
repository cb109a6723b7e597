"""Small-batch linear layers that use every CPU core, for `LocalEngine`'s decoding steps.

A decoding step multiplies a handful of rows (one per running request) by every weight
matrix. On CPU, MKL runs such a product (`torch.nn.functional.linear` with 1-8 rows) on one
core, or threads it poorly: a bs1 step of SmolLM2-135M streams its 540 MB of weights at one
core's memory bandwidth. Cutting each weight matrix into as many blocks of output features
as there are threads and multiplying the blocks as one batched product (`torch.bmm`, which
torch spreads over the batch) puts every core to work: on this repository's 2-core machine
the weight products of a bs1 step take 33 ms instead of 45, of a bs8 step 63 instead of 90
(`skyrl bench engine` measures the effect end to end). The result equals `F.linear` up to
float rounding (the order of additions within a block may differ); rows beyond
`MAX_SPLIT_ROWS` (prefill) keep `F.linear`, which threads well there.

`split_small_linears(model)` gives the model's `nn.Linear` layers a forward that takes this
path, and only in a thread that called `use_split_linears()` (the engine's worker): the same
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

_thread = threading.local()


def use_split_linears(enabled: bool = True) -> None:
    """Let the calling thread's forward passes take the split path (`LocalEngine`'s worker
    calls this once)."""
    _thread.enabled = enabled


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
    y = torch.bmm(flat, blocks).transpose(0, 1).reshape(*x.shape[:-1], out_features)
    return y if bias is None else y + bias


@functools.cache
def _split_linear_class() -> type:
    import torch
    from torch.nn import functional

    class SplitLinear(torch.nn.Linear):
        """`nn.Linear` whose forward takes `split_linear` in threads that enabled it."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if getattr(_thread, "enabled", False):
                y = split_linear(x, self.weight, self.bias)
                if y is not None:
                    return y
            return functional.linear(x, self.weight, self.bias)

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
