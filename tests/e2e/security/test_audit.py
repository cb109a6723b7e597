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
        if self.cow_root is not None:  # a root-owned copy-on-write root: its mount point too
            self.cow_root.make_mountpoints({CHECKOUT: True})
        end = _bwrap_options_end(argv)
        argv[end:end] = ["--ro-bind", CHECKOUT, CHECKOUT]
        return argv


class BuildSysAdminSandbox(BwrapSandbox):
    """Weakened on purpose: a Harbor build sandbox keeps CAP_SYS_ADMIN (it could mount)."""

    def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
        argv = super()._server_argv(workspace, python_args)
        if self.build_as_root:
            argv.insert(_bwrap_options_end(argv), "--cap-add")
            argv.insert(_bwrap_options_end(argv), "CAP_SYS_ADMIN")
        return argv


class HostLibWritableSandbox(BwrapSandbox):
    """Weakened on purpose: on a copy-on-write root, the host's own /usr/lib is bound
    read-write over the root's overlay of it (a build's writes would reach the host)."""

    def _server_argv(self, workspace: Path, python_args: list[str]) -> list[str]:
        argv = super()._server_argv(workspace, python_args)
        if self.cow_root is not None:
            end = _bwrap_options_end(argv)
            argv[end:end] = ["--bind", "/usr/lib", "/usr/lib"]
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
    ("weakened", "rows"),
    [
        # The build sandbox shares the weakness (its network, the checkout bound).
        (SharedNetSandbox, {"network-off", "build-caps"}),
        (CheckoutVisibleSandbox, {"host-files", "task-root-host", "build-host"}),
        (BuildSysAdminSandbox, {"build-caps"}),
        (HostLibWritableSandbox, {"build-writes"}),
    ],
    ids=["share-net", "checkout-bound", "build-sys-admin", "host-lib-writable"],
)
def test_weakened_backend_is_caught_in_exactly_its_rows(
    weakened: type[BwrapSandbox], rows: set[str]
) -> None:
    """Vectors 4 (host network), 2 (host files) and 25 (Harbor's task root and build
    sandbox): the audit marks the weakened rows NOT contained, every other row as on the
    hardened backend, and reports exit code 1."""
    report = arun(run_audit(weakened), timeout=120)
    assert report.exit_code == 1, _table(report)
    assert _not_contained(report) == rows, _table(report)
    assert Verdict.ERROR not in {r.verdict for r in report.results}, _table(report)
    if "host-files" in rows:
        assert all(CHECKOUT in report.result(r).detail for r in rows)
    if "network-off" in rows:
        detail = report.result("network-off").detail
        assert "host 127.0.0.1" in detail and "abstract" in detail
        assert "interfaces" in report.result("build-caps").detail
    if "build-writes" in rows:
        assert report.result("build-writes").detail.startswith("host changed: /usr/lib/")
    if rows == {"build-caps"}:
        assert "beyond the build's" in report.result("build-caps").detail


def test_task_root_rows_run_here() -> None:
    """Vector 25: the task-root and build-sandbox rows ran for real on this machine (root,
    overlayfs): contained, with what they found."""
    from skyrl_sdk.sandboxes import cow_root

    if cow_root.supported() is not None:
        pytest.skip(f"no copy-on-write root here: {cow_root.supported()}")
    rows = ["task-root-host", "task-root-writes", "task-root-caps"]
    rows += ["build-host", "build-writes", "build-caps"]
    report = arun(run_audit("bwrap", probes=rows), timeout=120)
    assert {r.verdict for r in report.results} == {Verdict.CONTAINED}, _table(report)
    writes = report.result("task-root-writes").detail
    assert "host unchanged" in writes and "create /usr/bin/" in writes  # refused to the agent
    layer = report.result("build-writes").detail
    assert "in the layer: /usr/bin/skyrl-audit-" in layer and "refused" not in layer
    for row in ("task-root-caps", "build-caps"):
        assert "No space left on device" in report.result(row).detail
