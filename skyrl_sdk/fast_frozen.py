"""Cheap construction of frozen dataclasses on hot paths.

A frozen dataclass's generated `__init__` sets every field through `object.__setattr__`
(its own `__setattr__` raises), which costs ~0.15 us per field: building the few records
of one agent-loop turn (`Turn`, `GenerationContext`, the step's `StepInfo`, ...) cost more
than a fast env's whole step. A leaf module: any layer may use it.
`fast_constructor(cls)` returns a function with `cls`'s signature that builds the instance
as a plain mutable *twin* dataclass (the same fields, defaults and slots, so the same
memory layout) and then switches its class to `cls`. The result is an ordinary, frozen
`cls` instance: equal to `cls(...)` with the same arguments, immutable afterwards, and it
pickles and copies the same way. Only classes without `__post_init__` (whose checks would
be skipped), derived from `object`, whose fields are all positional `init` fields are
accepted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["fast_constructor"]

T = TypeVar("T")


def fast_constructor(cls: type[T]) -> Callable[..., T]:
    """A constructor for the frozen dataclass `cls`: same signature, several times cheaper."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has __post_init__, which the fast path would skip")
    fields = dataclasses.fields(cls)
    if not all(f.init and f.kw_only is not True for f in fields) or cls.__bases__ != (object,):
        raise TypeError(
            f"{cls.__name__}: only positional init fields on a class derived from object"
        )
    slots = "__slots__" in cls.__dict__
    if slots and tuple(cls.__slots__) != tuple(f.name for f in fields):
        raise TypeError(f"{cls.__name__}: slots differ from its fields")
    twin: type[Any] = dataclasses.make_dataclass(
        f"_{cls.__name__}Builder",
        [
            (
                f.name,
                f.type,
                dataclasses.field(default=f.default, default_factory=f.default_factory),
            )
            for f in fields
        ],
        eq=False,
        repr=False,
        match_args=False,
        slots=slots,
    )

    def construct(*args: Any, **kwargs: Any) -> T:
        obj = twin(*args, **kwargs)
        obj.__class__ = cls  # same layout: the twin has exactly cls's slots (or a __dict__)
        return obj

    construct.__name__ = construct.__qualname__ = f"new_{cls.__name__}"
    construct.__doc__ = f"Build a frozen `{cls.__name__}` (see `fast_constructor`)."
    return construct
