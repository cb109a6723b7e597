"""`skyrl sandbox audit` finds an escape when there is one (issue 14, the audit).

The audit runs every escape probe against a backend. Against the hardened default backend every
row must be contained (or not enforced on this machine); against a backend weakened on purpose,
in one place, exactly the matching row must say NOT contained and the result must be 1.

A weakened backend is a `BwrapSandbox` subclass handed to `run_audit` in-process, so no flag or
setting can weaken a real audit by accident.

On the baseline (before the security work) the audit did not exist, so there these tests can
only fail at import; that is the one red-team file where this is expected. (Run with the new
audit module against the baseline's backends, they fail at their containment assertions:
host files, network=True, ptrace, nested user namespaces, keyctl/perf_event_open, and the
missing default disk and CPU caps are NOT contained.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

import skyrl_sdk
from skyrl_sdk.sandboxes.audit import AuditReport, Verdict, run_audit
from skyrl_sdk.sandboxes.bwrap import BwrapSandbox
from tests.conftest import arun, needs_bwrap

pytestmark = needs_bwrap
CHECKOUT = str(Path(skyrl_sdk.__file__).resolve().parent.parent)


def _bwrap_options_end(argv: list[str]) -> int:
    """Index of the `--` that ends bwrap's options (after it comes the server's argv)."""
    start = next(i for i, arg in enumerate(argv) if arg.endswith("bwrap"))
    return argv.index("--", start)


class SharedNetSandbox(BwrapSandbox):
    """Weakened on purpose: a sandbox without network still shares the host's network
    namespace (what `--share-net` did for network=True before the fix)."""

    def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
        argv = super()._server_argv(workspace, python_args)
        if not self.spec.network:
            argv.insert(_bwrap_options_end(argv), "--share-net")
        return argv


class CheckoutVisibleSandbox(BwrapSandbox):
    """Weakened on purpose: the project checkout is bound read-only inside (what the host
    root bind did before the fix), nothing else changes."""

    def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
        argv = super()._server_argv(workspace, python_args)
        end = _bwrap_options_end(argv)
        argv[end:end] = ["--ro-bind", CHECKOUT, CHECKOUT]
        return argv


def _not_contained(report: AuditReport) -> set[str]:
    return {r.probe for r in report.results if r.verdict is Verdict.NOT_CONTAINED}


def _table(report: AuditReport) -> str:
    return "\n".join(f"{r.probe}: {r.verdict.label}: {r.detail}" for r in report.results)


def test_default_backend_contains_every_probe() -> None:
    """Vectors 1, 2, 4, 5, 6, 7: the default bwrap backend holds against every probe."""
    report = arun(run_audit("bwrap"), timeout=120)
    bad = [r for r in report.results if r.verdict in (Verdict.NOT_CONTAINED, Verdict.ERROR)]
    assert not bad, _table(report)
    assert report.exit_code == 0
    assert report.duration_s < 30, f"the audit took {report.duration_s:.1f}s"


@pytest.mark.parametrize(
    ("weakened", "row"),
    [(SharedNetSandbox, "network-off"), (CheckoutVisibleSandbox, "host-files")],
    ids=["share-net", "checkout-bound"],
)
def test_weakened_backend_is_caught_in_exactly_its_row(
    weakened: type[BwrapSandbox], row: str
) -> None:
    """Vectors 4 (host network) and 2 (host files): the audit marks the one weakened row NOT
    contained, every other row as on the hardened backend, and reports exit code 1."""
    report = arun(run_audit(weakened), timeout=120)
    assert report.exit_code == 1, _table(report)
    assert _not_contained(report) == {row}, _table(report)
    assert Verdict.ERROR not in {r.verdict for r in report.results}, _table(report)
    detail = report.result(row).detail
    if row == "host-files":
        assert CHECKOUT in detail
    else:
        assert "host 127.0.0.1" in detail and "abstract" in detail
