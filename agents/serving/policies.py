"""Deprecated home of `skyrl serve`'s policy loader: specs are read by
`skyrl_sdk.agents.policy_spec` now (one parser for `skyrl eval` and `skyrl serve`).

`load_policy` stays importable from here for one release, with a `DeprecationWarning`: it is
`policy_spec.load_policy(spec, use=PolicyUse.SERVE, ...)` with the old `upstream_model`
keyword. `PolicySpecError`, `LoadedPolicy` and `UPSTREAM_KEY_ENV` are the same objects as in
`policy_spec`.
"""

from __future__ import annotations

import warnings
from typing import Any

from skyrl_sdk.agents import policy_spec
from skyrl_sdk.agents.policy_spec import (  # noqa: F401 (re-exported, importable from here)
    UPSTREAM_KEY_ENV,
    LoadedPolicy,
    PolicySpecError,
)


def __getattr__(name: str) -> Any:
    """`load_policy`, deprecated: see the module docstring."""
    if name == "load_policy":
        warnings.warn(
            "skyrl_sdk.agents.serving.policies.load_policy is deprecated: use "
            "skyrl_sdk.agents.policy_spec.load_policy(spec, use=PolicyUse.SERVE, ...)",
            DeprecationWarning,
            stacklevel=2,
        )
        return _deprecated_load_policy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _deprecated_load_policy(
    spec: str, *, upstream_model: str | None = None, **kwargs: Any
) -> LoadedPolicy:
    return policy_spec.load_policy(
        spec, use=policy_spec.PolicyUse.SERVE, model=upstream_model, **kwargs
    )
