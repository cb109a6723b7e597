"""Vector 4 of issue 14: a networked sandbox reaches the host.

`SandboxSpec(network=True)` (and Harbor's default, public network mode, which maps to it)
used to be bwrap's `--share-net`: the host's own network namespace. Sandboxed code connected
to the host's 127.0.0.1 and ::1 services, to services bound to 0.0.0.0 through the host's
interface address, and to the host's abstract unix sockets. Now a networked sandbox has a
namespace of its own with user-mode outbound networking (pasta) and a firewall that rejects
every address of the host (`skyrl_sdk/sandboxes/network.py`).

Each attack runs through the public entry point that existed before the fix
(`create_sandbox(SandboxSpec(network=True))` + `exec`) against real servers on the host that
answer with a secret; each `network=True` test fails on the code before the fix at its
"not reached" assertion. The `network=False` and outbound tests guard what already held.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from skyrl_sdk.sandboxes import SandboxError, SandboxSpec, create_sandbox
from tests.conftest import arun, needs_bwrap

pytestmark = needs_bwrap

# Runs inside the sandbox: try each target, print {label: outcome}. "REACHED" only when the
# host server's secret came back.
PROBE = textwrap.dedent(
    """
    import json, socket, sys
    cfg = json.loads(sys.argv[1])
    out = {}
    for label, family, address in cfg["targets"]:
        family = getattr(socket, family)
        address = tuple(address) if family != socket.AF_UNIX else "\\0" + address
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(3)
        try:
            s.connect(address)
            data = s.recv(200)
            out[label] = "REACHED" if cfg["secret"].encode() in data else "other: %r" % data
        except OSError as e:
            out[label] = "blocked: %s" % (e.strerror or type(e).__name__)
        finally:
            s.close()
    print(json.dumps(out))
    """
)


@dataclass(frozen=True)
class Target:
    """A host service and how the sandbox would address it."""

    label: str
    family: str
    address: tuple[str, int] | str


def _primary_address(family: socket.AddressFamily, probe: str) -> str | None:
    """The host's source address toward the outside (its main interface's), if it has one.
    A UDP connect sends nothing; it only asks the kernel for a route."""
    with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((probe, 9))
        address = s.getsockname()[0]
        return None if address.startswith("127.") or address == "::1" else address
    return None


class _Server:
    """A TCP (or abstract unix) server on the host that sends `secret` to every client."""

    def __init__(self, family: socket.AddressFamily, bind: tuple[str, int] | str, secret: str):
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_INET6:
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        self.sock.bind(bind)
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.secret = secret.encode()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + self.secret)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


@pytest.fixture(scope="module")
def host_services() -> Iterator[tuple[str, dict[str, Target]]]:
    """Servers on the host: 127.0.0.1, ::1, 0.0.0.0 (reached via the host's interface
    address), [::] (via its IPv6 address, if any) and an abstract unix socket."""
    secret = secrets.token_hex(16)
    servers: list[_Server] = []
    targets: dict[str, Target] = {}

    def add(name: str, family: socket.AddressFamily, bind, reach: str | None) -> None:
        try:
            server = _Server(family, bind, secret)
        except OSError:
            return  # e.g. no IPv6 on this host: that target is simply absent
        servers.append(server)
        if family == socket.AF_UNIX:
            targets[name] = Target(name, "AF_UNIX", bind[1:])
        elif reach:
            targets[name] = Target(name, family.name, (reach, server.port))

    add("host 127.0.0.1", socket.AF_INET, ("127.0.0.1", 0), "127.0.0.1")
    add("host ::1", socket.AF_INET6, ("::1", 0), "::1")
    add(
        "0.0.0.0 via interface",
        socket.AF_INET,
        ("0.0.0.0", 0),
        _primary_address(socket.AF_INET, "203.0.113.1"),
    )
    add(
        "[::] via interface",
        socket.AF_INET6,
        ("::", 0),
        _primary_address(socket.AF_INET6, "2001:db8::1"),
    )
    add("abstract unix socket", socket.AF_UNIX, f"\0skyrl-redteam-{secret[:12]}", None)
    try:
        yield secret, targets
    finally:
        for server in servers:
            server.close()


def _probe(spec: SandboxSpec, secret: str, targets: list[Target]) -> dict[str, str]:
    cfg = json.dumps(
        {"secret": secret, "targets": [[t.label, t.family, t.address] for t in targets]}
    )

    async def go():
        async with create_sandbox(spec) as sb:
            return await sb.exec(["python3", "-c", PROBE, cfg], timeout=60)

    try:
        result = arun(go())
    except SandboxError as e:
        pytest.fail(f"a networked sandbox must start here (pasta and nft installed): {e}")
    assert result.exit_code == 0, result
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    "name",
    [
        "host 127.0.0.1",
        "host ::1",
        "0.0.0.0 via interface",
        "[::] via interface",
        "abstract unix socket",
    ],
)
def test_networked_sandbox_cannot_reach_the_host(
    name: str, host_services: tuple[str, dict[str, Target]]
) -> None:
    """Vector 4: with network=True, a host service on 127.0.0.1, on ::1, on 0.0.0.0 (through
    the host's interface address), on [::] (through its IPv6 address) or on an abstract unix
    socket is unreachable from inside."""
    secret, targets = host_services
    if name not in targets:
        pytest.skip(f"this host has no {name} to attack (no such address)")
    outcome = _probe(SandboxSpec(network=True), secret, [targets[name]])
    assert outcome[name] != "REACHED", f"network=True sandbox reached the host's {name}"
    assert outcome[name].startswith("blocked"), outcome


def test_sandbox_without_network_cannot_reach_the_host(
    host_services: tuple[str, dict[str, Target]],
) -> None:
    """Vector 4 (guard): with network=False nothing of the host is reachable either."""
    secret, targets = host_services
    outcome = _probe(SandboxSpec(), secret, list(targets.values()))
    reached = [label for label, got in outcome.items() if got == "REACHED"]
    assert not reached, outcome


def _outside_reachable() -> str | None:
    """None if this machine can open a TCP connection to pypi.org:443, else why not."""
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError as e:
        return f"no outside network on this machine (pypi.org:443: {e})"
    return None


def test_networked_sandbox_still_reaches_the_outside() -> None:
    """Vector 4 (guard): the fix keeps outbound networking: a TCP connection from inside to
    pypi.org:443 (DNS included) succeeds."""
    problem = _outside_reachable()
    if problem:
        pytest.skip(problem)

    async def go():
        async with create_sandbox(SandboxSpec(network=True)) as sb:
            return await sb.exec(
                [
                    "python3",
                    "-c",
                    "import socket; s = socket.create_connection(('pypi.org', 443), timeout=10);"
                    " print('connected', s.getpeername()[1])",
                ],
                timeout=30,
            )

    result = arun(go())
    assert result.exit_code == 0 and "connected 443" in result.stdout, result
