"""Grading through the `swebench` package (its log parsers, `get_eval_report`, resolution rules).

`swebench` is an optional extra (`pip install 'skyrl-sdk[swebench]'`) and is imported on first
use. Its `swebench.harness` package `__init__` imports the Docker, `datasets` and Modal
machinery (seconds, and hundreds of MB); grading needs none of it, so the harness package object
is created without running that `__init__`, and only the light submodules (constants, parsers,
grading) are imported. If that ever fails, the plain import is used.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from skyrl_gym.envs.swe.instances import Prediction, SWEInstance

DEFAULT_PARSER = "parse_log_pytest"
"""The parser for repositories `swebench` has no entry for (pytest `-rA` output)."""


class SWEBenchUnavailable(ImportError):
    """The `swebench` package is missing; the message says how to install it."""


def _harness_module(name: str) -> ModuleType:
    try:
        import swebench  # noqa: F401  (the top-level package is light: lazy attributes)
    except ImportError as e:
        raise SWEBenchUnavailable(
            "SWE-bench grading needs the `swebench` package: pip install 'skyrl-sdk[swebench]'"
        ) from e
    if "swebench.harness" not in sys.modules:
        spec = importlib.util.find_spec("swebench.harness")
        if spec is not None and spec.submodule_search_locations:
            sys.modules["swebench.harness"] = importlib.util.module_from_spec(spec)
    try:
        return importlib.import_module(f"swebench.harness.{name}")
    except ImportError:
        sys.modules.pop("swebench.harness", None)
        importlib.import_module("swebench.harness")
        return importlib.import_module(f"swebench.harness.{name}")


@cache
def swebench_grading() -> ModuleType:
    """`swebench.harness.grading` (raises `SWEBenchUnavailable` without the extra)."""
    return _harness_module("grading")


@cache
def constants() -> ModuleType:
    """`swebench.harness.constants`: the log markers and test-status names."""
    return _harness_module("constants")


@cache
def _repo_parsers() -> dict[str, str]:
    """repo -> parser name, from the per-language maps of `swebench.harness.log_parsers`."""
    registry = parser_registry()
    names_by_fn: dict[Any, str] = {}
    for name, fn in registry.items():
        names_by_fn.setdefault(fn, name)
    out: dict[str, str] = {}
    for lang in ("python", "javascript", "go", "java", "php", "ruby", "rust", "c"):
        try:
            module = _harness_module(f"log_parsers.{lang}")
        except ImportError:
            continue
        for attr, value in vars(module).items():
            if attr.startswith("MAP_REPO_TO_PARSER") and isinstance(value, dict):
                for repo, fn in value.items():
                    if fn in names_by_fn:
                        out[repo] = names_by_fn[fn]
    return out


def parser_registry() -> dict[str, Any]:
    """Parser name -> function (`swebench`'s `PARSER_REGISTRY`)."""
    return _harness_module("log_parsers").PARSER_REGISTRY


def has_repo_spec(repo: str) -> bool:
    """True when `swebench` knows how this repository's test output reads."""
    return repo in _repo_parsers()


def parser_name(instance: SWEInstance) -> str:
    """The instance's parser: its `log_parser`, else the repo's, else pytest's."""
    name = instance.log_parser or _repo_parsers().get(instance.repo, DEFAULT_PARSER)
    if name not in parser_registry():
        raise ValueError(f"{instance.instance_id}: unknown log parser {name!r}")
    return name


def eval_type(instance: SWEInstance) -> str:
    """`pass_and_fail` (the default) or `fail_only` (for the repos `swebench` grades so)."""
    if instance.eval_type:
        return instance.eval_type
    fail_only = getattr(constants(), "FAIL_ONLY_REPOS", set())
    return "fail_only" if instance.repo in fail_only else "pass_and_fail"


def test_spec(instance: SWEInstance) -> Any:
    """A `swebench.types.TestSpec` holding what grading reads (no image or script)."""
    from swebench.types import TestSpec

    return TestSpec(
        instance_id=instance.instance_id,
        image=instance.image or "",
        eval_script_list=[],
        repo=instance.repo,
        version=instance.version,
        FAIL_TO_PASS=list(instance.FAIL_TO_PASS),
        PASS_TO_PASS=list(instance.PASS_TO_PASS),
        log_parser=parser_name(instance),
        eval_type=eval_type(instance),
    )


def eval_report(
    instance: SWEInstance, prediction: Prediction, test_output: str | Path
) -> dict[str, Any]:
    """`swebench`'s per-instance report for a test log: `{patch_exists,
    patch_successfully_applied, resolved, tests_status, ...}` (the inner dict)."""
    report = swebench_grading().get_eval_report(
        test_spec(instance),
        {
            "instance_id": instance.instance_id,
            "model_name_or_path": prediction.model_name_or_path,
            "model_patch": prediction.model_patch,
        },
        str(test_output),
        include_tests_status=True,
    )
    return report[instance.instance_id]


def parse_log(instance: SWEInstance, log: str) -> dict[str, str]:
    """Test id -> status, parsed with the instance's parser."""
    return parser_registry()[parser_name(instance)](log, test_spec(instance))
