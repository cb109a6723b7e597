"""Networked bwrap sandboxes (`skyrl_sdk/sandboxes/network.py`): pasta, the firewall that keeps
the sandbox off the host's addresses, forwarded ports, DNS, lifetime, and what it costs.

The red-team side (host loopback, interface address, abstract sockets) is in
tests/e2e/security/test_network_escape.py; this file checks each layer on its own, with real
pasta, nft and bwrap.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyrl_sdk.sandboxes import (
    BackendUnavailable,
    SandboxError,
    SandboxSpec,
    create_sandbox,
    network,
)
from tests.conftest import arun, needs_bwrap

pytestmark = [
    needs_bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="networked sandboxes need root"),
    # One worker: a test here adds addresses to the host, another lists them.
    pytest.mark.xdist_group("host-network"),
]

# Extra host addresses that pasta does NOT copy into the sandbox (documentation ranges): only
# the firewall stands between the sandbox and a host service reached through them.
EXTRA_V4 = "198.51.100.77"
EXTRA_V6 = "2001:db8::77"

CONNECT = textwrap.dedent(
    """
    import json, socket, sys
    out = {}
    for host, port in json.loads(sys.argv[1]):
        try:
            s = socket.create_connection((host, port), timeout=3)
            out["%s:%s" % (host, port)] = "REACHED " + s.recv(100).decode(errors="replace")
            s.close()
        except OSError as e:
            out["%s:%s" % (host, port)] = "blocked: " + (e.strerror or type(e).__name__)
    print(json.dumps(out))
    """
)


def _serve(sock: socket.socket, reply: bytes) -> None:
    sock.settimeout(0.2)
    while sock.fileno() >= 0:
        try:
            conn, _ = sock.accept()
        except OSError:
            continue
        with conn:
            conn.sendall(reply)


def _listener(family: socket.AddressFamily, address: str, reply: bytes) -> socket.socket:
    import threading

    sock = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.bind((address, 0))
    sock.listen(8)
    threading.Thread(target=_serve, args=(sock, reply), daemon=True).start()
    return sock


def _connect(spec: SandboxSpec, targets: list[tuple[str, int]]) -> dict[str, str]:
    async def go():
        async with create_sandbox(spec) as sb:
            return await sb.exec(["python3", "-c", CONNECT, json.dumps(targets)], timeout=60)

    result = arun(go())
    assert result.exit_code == 0, result
    return json.loads(result.stdout)


@pytest.fixture
def extra_host_addresses() -> Iterator[None]:
    """Add EXTRA_V4/EXTRA_V6 to the host's loopback device (root), removed afterwards."""
    added = []
    for family, address in (("-4", f"{EXTRA_V4}/32"), ("-6", f"{EXTRA_V6}/128")):
        done = subprocess.run(
            ["ip", family, "addr", "add", address, "dev", "lo"], capture_output=True
        )
        if done.returncode == 0:
            added.append((family, address))
    if not added:
        pytest.skip("cannot add a test address to the host")
    try:
        yield
    finally:
        for family, address in added:
            subprocess.run(["ip", family, "addr", "del", address, "dev", "lo"], capture_output=True)


def test_host_addresses_come_from_the_kernel() -> None:
    """Every non-loopback address `ip addr` shows is in the firewall's list, and no loopback."""
    shown = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True).stdout
    expected = {
        ipaddress.ip_interface(line.split()[3]).ip
        for line in shown.splitlines()
        if line.split()[2] in ("inet", "inet6")
    }
    found = set(network.host_addresses())
    assert {a for a in expected if not a.is_loopback} <= found
    assert not any(a.is_loopback for a in found)
    rules = network.nft_ruleset(sorted(found, key=lambda a: (a.version, a)))
    for address in found:
        assert str(address) in rules


def test_firewall_is_what_keeps_extra_host_addresses_out(extra_host_addresses: None) -> None:
    """A host address pasta does not copy into the sandbox is reachable through pasta (shown
    with the firewall emptied), and the firewall rejects it: TCP on IPv4 and IPv6, and UDP."""
    v4 = _listener(socket.AF_INET, "0.0.0.0", b"host-v4")
    v6 = _listener(socket.AF_INET6, "::", b"host-v6")
    targets = [(EXTRA_V4, v4.getsockname()[1]), (EXTRA_V6, v6.getsockname()[1])]
    try:
        real = network.nft_ruleset
        network.nft_ruleset = lambda addresses: "table inet skyrl_sandbox {}\n"
        try:
            weakened = _connect(SandboxSpec(network=True), targets)
        finally:
            network.nft_ruleset = real
        guarded = _connect(SandboxSpec(network=True), targets)
    finally:
        v4.close()
        v6.close()
    assert all(got.startswith("REACHED") for got in weakened.values()), weakened
    assert all(got.startswith("blocked") for got in guarded.values()), guarded

    udp = 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", (%r, 9))'

    async def go():
        async with create_sandbox(SandboxSpec(network=True)) as sb:
            return await sb.exec(["python3", "-c", udp % EXTRA_V4], timeout=20)

    sent = arun(go())
    assert sent.exit_code != 0 and "PermissionError" in sent.stderr, sent


def test_firewall_and_routes_cannot_be_changed_from_inside() -> None:
    """The namespace belongs to the host's user namespace: the sandbox (no capabilities there)
    can neither flush the nftables table nor touch addresses or routes."""

    async def go():
        async with create_sandbox(SandboxSpec(network=True)) as sb:
            return [
                await sb.exec(cmd, timeout=20)
                for cmd in (
                    "nft flush ruleset",
                    "nft list ruleset",
                    "ip addr add 10.9.9.9/32 dev lo",
                    "ip route add 10.9.9.0/24 dev lo",
                )
            ]

    for result in arun(go()):
        assert result.exit_code != 0, result
        assert "not permitted" in result.stderr.lower() or "denied" in result.stderr.lower(), result


def test_forward_ports_reach_only_that_port(host_listener: int) -> None:
    """forward_ports: the listed host loopback port is reachable inside at 127.0.0.1:PORT,
    another host loopback port is not; without network, there is no route anywhere else."""
    other = _listener(socket.AF_INET, "127.0.0.1", b"other")
    other_port = other.getsockname()[1]
    try:
        alone = _connect(
            SandboxSpec(forward_ports=(host_listener,)),
            [("127.0.0.1", host_listener), ("127.0.0.1", other_port), ("192.0.2.1", 80)],
        )
        with_net = _connect(
            SandboxSpec(network=True, forward_ports=(host_listener,)),
            [("127.0.0.1", host_listener), ("127.0.0.1", other_port)],
        )
    finally:
        other.close()
    assert alone[f"127.0.0.1:{host_listener}"].endswith("hello"), alone
    assert alone[f"127.0.0.1:{other_port}"].startswith("blocked"), alone
    assert "unreachable" in alone["192.0.2.1:80"], alone
    assert with_net[f"127.0.0.1:{host_listener}"].endswith("hello"), with_net
    assert with_net[f"127.0.0.1:{other_port}"].startswith("blocked"), with_net


def test_forward_ports_are_validated() -> None:
    for bad in ((0,), (70000,), ("80",), (True,)):
        with pytest.raises(ValueError, match="forward_ports"):
            SandboxSpec(forward_ports=bad)  # type: ignore[arg-type]
    assert SandboxSpec(forward_ports=[8080]).forward_ports == (8080,)
    hash(SandboxSpec(forward_ports=[8080]))


def test_dns_forwarder_when_the_host_resolver_is_local(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose resolver is on its own loopback (systemd-resolved): the sandbox gets a
    resolv.conf naming the gateway, and pasta forwards DNS sent there to the host's resolver.
    (pasta forwards to the first resolver of the real /etc/resolv.conf, so this runs the whole
    path for real where that resolver answers.)"""
    gateway = network._host_gateway4()
    if gateway is None:
        pytest.skip("no IPv4 default route on this host")
    monkeypatch.setattr(network, "_resolvers", lambda path="": [ipaddress.ip_address("127.0.0.53")])
    assert "--dns-forward" in network.pasta_args(SandboxSpec(network=True))
    path = network.resolv_conf()
    assert path is not None and f"nameserver {gateway}" in Path(path).read_text()

    async def go():
        async with create_sandbox(SandboxSpec(network=True)) as sb:
            conf = await sb.exec("cat /etc/resolv.conf")
            lookup = await sb.exec(
                [
                    "python3",
                    "-c",
                    "import socket; print(socket.getaddrinfo('pypi.org', 443)[0][4][0])",
                ],
                timeout=30,
            )
            return conf, lookup

    conf, lookup = arun(go())
    assert f"nameserver {gateway}" in conf.stdout, conf
    try:
        socket.getaddrinfo("pypi.org", 443)
    except OSError:
        return  # no DNS on this machine at all: the file is what could be checked
    assert lookup.exit_code == 0, lookup


def test_missing_tools_are_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pasta (or nft) a networked sandbox is refused, naming the Debian package."""
    real_which = network.shutil.which
    monkeypatch.setattr(
        network.shutil,
        "which",
        lambda name, path=None: None if name == "pasta" else real_which(name, path=path),
    )
    network.tools.cache_clear()
    try:

        async def go():
            async with create_sandbox(SandboxSpec(network=True)):
                pass

        with pytest.raises(BackendUnavailable, match="passt"):
            arun(go())

        async def plain():
            async with create_sandbox(SandboxSpec()) as sb:
                return await sb.exec("true")

        assert arun(plain()).ok  # no network asked: pasta is not needed
    finally:
        network.tools.cache_clear()


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def _pasta_of(launcher_pid: int) -> int:
    found = [
        c
        for c in _children(launcher_pid)
        if b"pasta" in Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0")[0]
    ]
    assert len(found) == 1, found
    return found[0]


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


OWNER = """
import asyncio, sys
from pathlib import Path
from skyrl_sdk.sandboxes import SandboxSpec, create_sandbox

async def main():
    sb = await create_sandbox(SandboxSpec(network=True))
    print(sb._proc.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_pasta_dies_with_its_sandbox() -> None:
    """pasta lives exactly as long as its sandbox: gone after close(), and gone when the
    owner is SIGKILLed (the server sees EOF, bwrap exits, pasta gets its parent-death signal)."""

    async def go():
        sb = await create_sandbox(SandboxSpec(network=True))
        pasta = _pasta_of(sb._proc.pid)  # type: ignore[attr-defined]
        alive = not _gone(pasta)
        await sb.close()
        return pasta, alive

    pasta, alive = arun(go())
    assert alive
    deadline = time.monotonic() + 5
    while not _gone(pasta) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pasta)

    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    try:
        launcher = int(owner.stdout.readline())  # type: ignore[union-attr]
        pasta = _pasta_of(launcher)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    deadline = time.monotonic() + 10
    while not _gone(pasta) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pasta), "pasta outlived its SIGKILLed owner"


def test_networked_start_cost() -> None:
    """What network=True adds to a sandbox start (printed; bounded loosely, the machine may
    be loaded). Measured on this project's machine: +5-20 ms over 10-23 ms."""

    async def starts(spec: SandboxSpec, n: int) -> list[float]:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            sb = await create_sandbox(spec)
            times.append(time.perf_counter() - t0)
            await sb.close()
        return times

    async def go():
        await starts(SandboxSpec(network=True), 1)  # warm caches (bytecode, native server)
        plain = await starts(SandboxSpec(), 7)
        networked = await starts(SandboxSpec(network=True), 7)
        return statistics.median(plain), statistics.median(networked)

    plain, networked = arun(go())
    print(f"\nstart: plain {plain * 1000:.1f} ms, network=True {networked * 1000:.1f} ms")
    assert networked - plain < 0.5, (plain, networked)


def test_unprivileged_caller_is_refused_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not root: network=True is refused with the reason (no silent host network)."""
    monkeypatch.setattr(network.os, "geteuid", lambda: 1000)
    network.tools.cache_clear()
    try:
        with pytest.raises(BackendUnavailable, match="need root"):
            network.tools()
    finally:
        network.tools.cache_clear()
    assert issubclass(BackendUnavailable, SandboxError)  # callers may catch either


OFFLINE = """
import asyncio, json
from skyrl_sdk.sandboxes import SandboxError, SandboxSpec, create_sandbox

LOOPBACK = (
    "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
    " socket.create_connection(s.getsockname(), 2).close(); print('loopback ok')"
)

async def main():
    out = {}
    async with create_sandbox(SandboxSpec(network=True)) as sb:
        out["network"] = (await sb.exec(["python3", "-c", LOOPBACK], timeout=20)).stdout.strip()
    try:
        async with create_sandbox(SandboxSpec(forward_ports=(9,))):
            out["forward"] = "started"
    except SandboxError as e:
        out["forward"] = str(e)
    print(json.dumps(out))

asyncio.run(main())
"""


def test_offline_host() -> None:
    """On a host with no route out (here: the test runs in an empty network namespace),
    network=True starts with its own working loopback and nowhere to go; forwarded ports,
    which pasta cannot serve without a routable interface, fail fast with pasta's reason."""
    done = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", OFFLINE],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["network"] == "loopback ok", out
    assert "pasta exited" in out["forward"] and "routable" in out["forward"], out
