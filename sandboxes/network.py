"""Network for sandboxes that ask for it: user-mode networking with no route to the host.

A sandbox never shares the host's network namespace. Without network it has an empty one
(only its own loopback). With `SandboxSpec(network=True)` it gets a namespace of its own
that `pasta` (Debian package `passt`) connects to the outside world in user mode: pasta
reads the sandbox's packets from a tap device and replays each TCP connection, UDP flow and
ping as an ordinary socket of its own on the host. That alone would let the sandbox reach
whatever the host reaches, including the host itself, so:

- pasta forwards no ports in either direction (`-t/-u/-T/-U none`; its default `auto` would
  map the sandbox's 127.0.0.1:PORT onto the host's loopback) and does not map the gateway
  address onto the host (`--no-map-gw`);
- the sandbox's copy of the host's own address (pasta gives the namespace the host's address)
  is local inside the namespace, so it reaches the sandbox, not the host;
- an nftables table in the sandbox's namespace rejects every packet to an address of any host
  interface (read from the kernel at each start, IPv4 and IPv6, link-local included), to
  their broadcast addresses and to multicast; loopback traffic stays inside the namespace.
  The table is written by root before anything runs in the namespace, and the namespace
  belongs to the host's user namespace, so nothing in the sandbox (no capabilities there)
  can change or even list it;
- abstract unix sockets belong to a network namespace, so the host's are not visible.

The one planned exception is `SandboxSpec.forward_ports`: each listed port of the host's
loopback is reachable inside at 127.0.0.1:PORT (and [::1]:PORT), through pasta's splice
(`-T PORT`), e.g. for an agent that calls the SDK's own model server. Nothing else of the host
is: with `network=False` and forwarded ports, pasta does not even configure the namespace's
interface, so there is no route anywhere else.

DNS: the sandbox gets the host's `/etc/resolv.conf`; a resolver there is an ordinary outside
address. When the host's resolver is on its loopback (e.g. systemd-resolved's 127.0.0.53),
pasta forwards DNS (UDP port 53 only) sent to the gateway address to it, and the sandbox gets
a resolv.conf naming the gateway (`resolv_conf()`).

How the bwrap backend is wired (`wrap_launcher`): a root launcher shell unshares a new
network namespace, loads the nftables table into it, starts pasta in the host's namespace
attached to the new one (pasta's parent-death signal is SIGKILL and the shell stays its
parent, so pasta dies with the sandbox, even when the owner is SIGKILLed), then runs the usual
`setpriv ... bwrap --share-net ...`, which keeps that namespace. pasta configures the
interface while bwrap and the command server start; `wait_ready` (polling /proc, no extra
process) holds `start()` until the routes and forwarded listeners are there, so no command
ever runs before the network is up. pasta and the launcher live in the sandbox's cgroups
(counted against `pids` and `memory`, killed at close and by the reaper). The docker backend
attaches the same way to the container's own `--network none` namespace (`attach`).

Cost (this project's 2-core machine, lightly loaded, medians): a networked start adds
~5-20 ms to a plain one (10-23 ms): pasta works while bwrap starts, and bwrap no longer makes
a namespace itself; forwarded ports add ~15-25 ms (pasta binds its listeners after its own
start-up). `tests/sandboxes/test_network.py::test_networked_start_cost` prints it.

Limits: root only (an unprivileged caller cannot create a namespace owned by the host's user
namespace, which is what keeps the table out of the sandbox's reach); host addresses added
*after* a sandbox started are not in its table; on a host with no default route,
`network=True` gets an empty namespace (nothing to route to) and forwarded ports cannot be
served (this pasta needs a routable interface): a clear error.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ipaddress
import os
import shlex
import shutil
import socket
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from skyrl_sdk.sandboxes.spec import BackendUnavailable, SandboxError, SandboxSpec

__all__ = [
    "NetworkMode",
    "UserModeNetwork",
    "attach",
    "host_addresses",
    "network_mode",
    "nft_ruleset",
    "resolv_conf",
    "tools",
    "wrap_launcher",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

READY_TIMEOUT_S = 10.0
"""How long pasta may take to configure a namespace before the start fails."""
_POLL_S = 0.001
# The nftables table's name inside a sandbox's namespace.
_TABLE = "skyrl_sandbox"
# Always rejected, whatever the host's addresses: limited broadcast and multicast (a host
# service bound to 0.0.0.0 receives those too).
_ALWAYS_V4 = ("255.255.255.255", "224.0.0.0/4")
_ALWAYS_V6 = ("ff00::/8",)
# Neighbour discovery and router solicitation must still reach pasta (it answers them itself).
_NDP = "nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert"
_LOOPBACK_V4 = ipaddress.ip_network("127.0.0.0/8")


class NetworkMode(enum.StrEnum):
    """What a sandbox's network namespace is given."""

    NONE = "none"
    """An empty namespace: its own loopback only."""
    FORWARDS_ONLY = "forwards_only"
    """Its own loopback, plus the host loopback ports in `SandboxSpec.forward_ports`."""
    USER_MODE = "user_mode"
    """Outbound networking through pasta, no route to the host (plus forwarded ports)."""


def network_mode(spec: SandboxSpec) -> NetworkMode:
    """The mode a spec gets here.

    `network=True` on a host without a default route (offline: there is nothing to route
    to, and pasta needs a routable interface to start) gets `NONE`, an empty namespace with
    its own loopback, or `FORWARDS_ONLY` with forwarded ports.
    """
    if spec.network and any(_default_routes()):
        return NetworkMode.USER_MODE
    return NetworkMode.FORWARDS_ONLY if spec.forward_ports else NetworkMode.NONE


@dataclass(frozen=True)
class Tools:
    """The host programs a networked sandbox needs (absolute paths)."""

    pasta: str
    """`pasta`, from the Debian package `passt`."""
    nft: str
    """`nft`, from the Debian package `nftables`."""
    unshare: str
    """`unshare` (util-linux)."""
    nsenter: str
    """`nsenter` (util-linux)."""
    setpriv: str
    """`setpriv` (util-linux)."""
    sh: str
    """A POSIX shell."""


_PACKAGES = {
    "pasta": "passt",
    "nft": "nftables",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "setpriv": "util-linux",
    "sh": "dash",
}


@cache
def tools() -> Tools:
    """The programs of `Tools`, or `BackendUnavailable` naming the Debian packages to install."""
    if os.geteuid() != 0:
        raise BackendUnavailable(
            "network=True (and forward_ports) need root: the sandbox's network namespace must "
            "belong to the host's user namespace so that nothing inside can lift its firewall; "
            "run as root, or use network=False"
        )
    # The launcher runs with the sandbox's PATH, not the caller's.
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    found = {name: shutil.which(name, path=path) for name in _PACKAGES}
    missing = sorted({_PACKAGES[name] for name, where in found.items() if not where})
    if missing:
        raise BackendUnavailable(
            "network=True (user-mode networking with no route to the host) needs the Debian "
            f"package(s) {', '.join(missing)}: apt-get install {' '.join(missing)} (`make "
            "install` does it as root); or use network=False"
        )
    return Tools(**found)  # type: ignore[arg-type]


# ---- the host's addresses, straight from the kernel (rtnetlink) ---------------------------------

_RTM_GETADDR = 22
_RTM_NEWADDR = 20
_NLMSG_DONE = 3
_NLMSG_ERROR = 2
_NLM_F_REQUEST_DUMP = 0x1 | 0x300
_IFA_ADDRESS, _IFA_LOCAL, _IFA_BROADCAST = 1, 2, 4


def host_addresses() -> tuple[IPAddress, ...]:
    """Every address of every interface of the caller's network namespace (the host), with
    IPv4 broadcast addresses, except loopback ones (those stay inside a sandbox's namespace).
    """
    found: set[IPAddress] = set()
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        header = struct.pack("=IHHII", 24, _RTM_GETADDR, _NLM_F_REQUEST_DUMP, 1, 0)
        sock.sendto(header + struct.pack("=BBBBI", socket.AF_UNSPEC, 0, 0, 0, 0), (0, 0))
        done = False
        while not done:
            data = sock.recv(1 << 16)
            offset = 0
            while offset + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, offset)
                if length < 16:
                    break
                if kind in (_NLMSG_DONE, _NLMSG_ERROR):
                    done = True
                    break
                if kind == _RTM_NEWADDR:
                    found.update(_addresses_of(data[offset + 16 : offset + length]))
                offset += (length + 3) & ~3
    kept = (a for a in found if not a.is_loopback and not _mapped_loopback(a))
    return tuple(sorted(kept, key=lambda a: (a.version, a)))


def _addresses_of(message: bytes) -> Iterable[IPAddress]:
    family = message[0]
    size = {socket.AF_INET: 4, socket.AF_INET6: 16}.get(family)
    if size is None:
        return
    offset = 8  # struct ifaddrmsg
    while offset + 4 <= len(message):
        length, kind = struct.unpack_from("=HH", message, offset)
        if length < 4:
            return
        if kind in (_IFA_ADDRESS, _IFA_LOCAL, _IFA_BROADCAST) and length - 4 == size:
            yield ipaddress.ip_address(message[offset + 4 : offset + 4 + size])
        offset += (length + 3) & ~3


def _mapped_loopback(address: IPAddress) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped is not None and mapped in _LOOPBACK_V4


def nft_ruleset(addresses: Sequence[IPAddress]) -> str:
    """The nftables table that keeps a sandbox's namespace off the host's addresses."""
    v4 = [str(a) for a in addresses if a.version == 4] + list(_ALWAYS_V4)
    v6 = [str(a) for a in addresses if a.version == 6] + list(_ALWAYS_V6)
    return (
        f"table inet {_TABLE} {{\n"
        "  chain output {\n"
        "    type filter hook output priority 0; policy accept;\n"
        '    oif "lo" accept\n'
        f"    icmpv6 type {{ {_NDP} }} accept\n"
        f"    ip daddr {{ {', '.join(v4)} }} meta l4proto tcp reject with tcp reset\n"
        f"    ip6 daddr {{ {', '.join(v6)} }} meta l4proto tcp reject with tcp reset\n"
        f"    ip daddr {{ {', '.join(v4)} }} reject\n"
        f"    ip6 daddr {{ {', '.join(v6)} }} reject\n"
        "  }\n"
        "}\n"
    )


# ---- the host's routes and resolvers ----------------------------------------------------------


def _default_routes(proc_net: str = "/proc/net") -> tuple[bool, bool]:
    """(IPv4, IPv6): whether the namespace whose /proc/net this is has a default route."""
    return _has_default4(proc_net), _has_default6(proc_net)


def _has_default4(proc_net: str) -> bool:
    with contextlib.suppress(OSError):
        for line in Path(proc_net, "route").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 2 and fields[1] == "00000000" and fields[2] != "00000000":
                return True
    return False


def _has_default6(proc_net: str) -> bool:
    zero = "0" * 32
    with contextlib.suppress(OSError):
        for line in Path(proc_net, "ipv6_route").read_text().splitlines():
            fields = line.split()
            if len(fields) > 4 and fields[0] == zero and fields[1] == "00" and fields[4] != zero:
                return True
    return False


def _ipv6_on(proc_net: str) -> bool:
    """True if IPv6 is enabled in that namespace (its loopback has ::1)."""
    try:
        return Path(proc_net, "if_inet6").read_text().strip() != ""
    except OSError:
        return False


def _listening(proc_net: str, ports: Sequence[int]) -> bool:
    """True when every port has a listener on 127.0.0.1 in that namespace."""
    want = {f"0100007F:{port:04X}" for port in ports}
    with contextlib.suppress(OSError):
        for line in Path(proc_net, "tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":
                want.discard(fields[1])
    return not want


def _resolvers(path: str = "/etc/resolv.conf") -> list[IPAddress]:
    found: list[IPAddress] = []
    with contextlib.suppress(OSError):
        for line in Path(path).read_text().splitlines():
            fields = line.split()
            if len(fields) >= 2 and fields[0] == "nameserver":
                with contextlib.suppress(ValueError):
                    found.append(ipaddress.ip_address(fields[1].split("%")[0]))
    return found


def _host_gateway4() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 2 and fields[1] == "00000000" and fields[2] != "00000000":
                return socket.inet_ntoa(bytes.fromhex(fields[2])[::-1])
    return None


def _dns_forward() -> str | None:
    """The address pasta should forward DNS from, when the host's resolver is unreachable
    from a sandbox (on the host's loopback or one of its addresses); None when it is not."""
    servers = _resolvers()
    local = set(host_addresses())
    if not servers or any(not (s.is_loopback or s in local) for s in servers):
        return None
    return _host_gateway4()


def resolv_conf() -> str | None:
    """A host file to show as the sandbox's /etc/resolv.conf, or None for the host's own.

    Only needed when the host's resolvers are all on the host itself (see `_dns_forward`):
    then it names the gateway, which pasta forwards to the host's resolver.
    """
    forward = _dns_forward()
    if forward is None:
        return None
    from skyrl_sdk.sandboxes import tracking

    path = tracking.ensure_state_root() / "resolv.conf"
    text = f"# written by skyrl_sdk.sandboxes.network: pasta forwards DNS\nnameserver {forward}\n"
    if not path.is_file() or path.read_text() != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o644)
        os.replace(tmp, path)
    return str(path)


# ---- pasta ------------------------------------------------------------------------------------


def _forward_ports(spec: SandboxSpec) -> tuple[int, ...]:
    ports = tuple(spec.forward_ports)
    for port in ports:
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ValueError(f"SandboxSpec.forward_ports: {port!r} is not a TCP port (1-65535)")
    return ports


def pasta_args(spec: SandboxSpec) -> list[str]:
    """pasta's options for a spec (without the target namespace)."""
    ports = _forward_ports(spec)
    args = ["-f", "-q", "--runas", "0"]
    if spec.network:
        args.append("--config-net")
        forward = _dns_forward()
        if forward:
            args += ["--dns-forward", forward]
    args += [
        # No port forwarding from the host in (a sandbox's listener never shows on the host)
        # and none from the sandbox out, except the ports asked for.
        "-t",
        "none",
        "-u",
        "none",
        "-T",
        ",".join(map(str, ports)) if ports else "none",
        "-U",
        "none",
        "--no-map-gw",
    ]
    return args


def _wait_plan(spec: SandboxSpec) -> tuple[bool, bool, tuple[int, ...]]:
    """What "pasta is ready" means for a spec: (IPv4 route, IPv6 route, listening ports)."""
    want4, want6 = _default_routes() if spec.network else (False, False)
    return want4, want6, _forward_ports(spec)


def is_ready(spec: SandboxSpec, pid: int) -> bool:
    """True once pasta has configured the network namespace of process `pid` for `spec`
    (its default routes, as the host has them, and its forwarded ports' listeners)."""
    want4, want6, ports = _wait_plan(spec)
    proc_net = f"/proc/{pid}/net"
    # IPv6 may be off in that namespace (docker turns it off in containers by default).
    want6 = want6 and _ipv6_on(proc_net)
    return (
        (not want4 or _has_default4(proc_net))
        and (not want6 or _has_default6(proc_net))
        and (not ports or _listening(proc_net, ports))
    )


def _own_namespace(pid: int) -> bool:
    """True if process `pid` is in a network namespace other than ours (the host's)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return False


async def wait_ready(spec: SandboxSpec, pid: int, timeout: float = READY_TIMEOUT_S) -> None:
    """Wait until pasta has configured the namespace of `pid` (a sandbox's launcher, e.g.
    bwrap, started through `wrap_launcher`). Polls /proc: no process is started for it."""
    if network_mode(spec) is NetworkMode.NONE:
        return
    deadline = time.monotonic() + timeout
    while not (_own_namespace(pid) and is_ready(spec, pid)):
        if _pasta_exited(pid):
            raise SandboxError(
                "pasta exited before the sandbox's network was ready (pasta and its launcher "
                f"run in the sandbox's cgroups: SandboxSpec.pids={spec.pids} must leave room "
                "for 2 more processes)"
            )
        if time.monotonic() > deadline or not os.path.exists(f"/proc/{pid}"):
            raise SandboxError(
                f"pasta did not configure the sandbox's network within {timeout:.0f}s"
            )
        await asyncio.sleep(_POLL_S)


def _pasta_exited(gate: int) -> bool:
    """True once the launcher shell `gate` has started the sandbox but pasta (its first
    child, started before) is no longer running."""
    try:
        children = Path(f"/proc/{gate}/task/{gate}/children").read_text().split()
        own = Path(f"/proc/{gate}/cmdline").read_bytes()
    except OSError:
        return False
    started = False
    for child in children:
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if cmdline == own or not cmdline:
            # Forked but not yet exec'd, or in the middle of an execve (nsenter -> setpriv
            # -> pasta), when /proc shows an empty command line: too early to tell. Reading
            # that as "pasta is gone" failed networked starts now and then under load.
            return False
        if b"\0--no-map-gw\0" in cmdline:  # every stage: nsenter, setpriv, pasta
            return state in ("Z", "X")
        started = True
    return started


_GATE = r"""set -e
{nft} -f - <<'SKYRL_RULES'
{rules}SKYRL_RULES
{nsenter} --net=/proc/self/fd/{host_fd} -- {setpriv} --pdeathsig KILL {pasta} {pasta_args} --netns /proc/self/fd/{ns_fd} {ns_fd}</proc/self/ns/net </dev/null >/dev/null &
exec {host_fd}<&- {stdin_fd}<&0
"$@" 0<&{stdin_fd} {stdin_fd}<&- &
launcher=$!
exec {stdin_fd}<&-
set +e
wait "$launcher"
exit $?
"""


def _free_fds(keep: Iterable[int], count: int) -> list[int]:
    """Single-digit descriptors (what a POSIX shell's redirections take) not in `keep`."""
    free = [fd for fd in range(3, 10) if fd not in set(keep)]
    if len(free) < count:
        raise SandboxError("no free descriptor for the network launcher")
    return free[:count]


def wrap_launcher(
    spec: SandboxSpec, argv: Sequence[str], keep_fds: Iterable[int] = ()
) -> list[str]:
    """Run `argv` (a sandbox launcher that keeps its parent's network namespace, e.g.
    `bwrap --share-net`) in a new namespace wired as `network_mode(spec)` says.

    The launcher, a root shell: unshares a network namespace; loads the firewall
    (`nft_ruleset`) into it, before anything else runs there; starts pasta in the host's
    namespace attached to the new one, with SIGKILL as its parent-death signal; runs `argv`
    (with the shell's stdin and stdout) and waits for it, exiting with its status. The shell
    stays pasta's parent, so pasta dies with it: when `argv` ends, or when the shell itself is
    killed. (Were `argv` exec'ed instead, the parent-death signal would come from a process
    that drops to uid 65534, which may not signal root's pasta: the kernel drops it.)
    pasta configures the interface meanwhile: call `wait_ready` with the shell's pid before
    running anything that needs the network.

    Returns `argv` unchanged for `NetworkMode.NONE` (the launcher makes its own empty
    namespace). `keep_fds`: descriptors `argv` inherits, which the wrapper must not touch.
    """
    if network_mode(spec) is NetworkMode.NONE:
        return list(argv)
    t = tools()
    host_fd, ns_fd, stdin_fd = _free_fds(keep_fds, 3)
    gate = _GATE.format(
        nft=shlex.quote(t.nft),
        rules=nft_ruleset(host_addresses()),
        nsenter=shlex.quote(t.nsenter),
        setpriv=shlex.quote(t.setpriv),
        pasta=shlex.quote(t.pasta),
        pasta_args=" ".join(shlex.quote(a) for a in pasta_args(spec)),
        host_fd=host_fd,
        ns_fd=ns_fd,
        stdin_fd=stdin_fd,
    )
    # Two steps: hold the host's namespace open (the shell that does it runs in the host's
    # namespace), then unshare a new one and run the gate inside it.
    outer = f'exec {host_fd}</proc/self/ns/net; exec "$@"'
    return [t.sh, "-c", outer, "sh", t.unshare, "--net", "--", t.sh, "-c", gate, "sh", *argv]


# ---- attaching to an existing namespace (docker) ------------------------------------------------


class UserModeNetwork:
    """pasta attached to an existing network namespace (a container's); see `attach`."""

    def __init__(self, process: asyncio.subprocess.Process):
        self.process = process
        """The pasta process."""

    @property
    def pid(self) -> int:
        """pasta's pid."""
        return self.process.pid

    async def close(self) -> None:
        """Stop pasta (idempotent)."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.process.wait(), 5)


async def attach(pid: int, spec: SandboxSpec, log: Path | None = None) -> UserModeNetwork | None:
    """Wire the network namespace of process `pid` as `network_mode(spec)` says.

    The namespace must be empty (no route out) and belong to the host's user namespace, as a
    docker container's does with `--network none`; nothing may run in it yet but trusted code.
    The firewall goes in first, then pasta starts, attached to it from the host's namespace,
    and is awaited. pasta's parent-death signal is tied to the calling thread (call this
    from the event loop's thread), so pasta never outlives its owner; `close()` stops it
    earlier. pasta's messages go to `log`. Returns None for `NetworkMode.NONE`.
    """
    if network_mode(spec) is NetworkMode.NONE:
        return None
    t = tools()
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = f"/proc/self/fd/{fd}"
        nft = await asyncio.create_subprocess_exec(
            t.nsenter,
            f"--net={target}",
            "--",
            t.nft,
            "-f",
            "-",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(fd,),
        )
        _, err = await nft.communicate(nft_ruleset(host_addresses()).encode())
        if nft.returncode != 0:
            raise SandboxError(
                "cannot load the sandbox's firewall (nft): " + err.decode(errors="replace").strip()
            )
        with open(log or os.devnull, "ab") as log_file:
            process = await asyncio.create_subprocess_exec(
                t.setpriv,
                "--pdeathsig",
                "KILL",
                t.pasta,
                *pasta_args(spec),
                "--netns",
                target,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log_file,
                pass_fds=(fd,),
            )
    finally:
        os.close(fd)
    network = UserModeNetwork(process)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not is_ready(spec, pid):
        if process.returncode is not None or time.monotonic() > deadline:
            await network.close()
            tail = log.read_text(errors="replace")[-500:].strip() if log else ""
            raise SandboxError(
                f"pasta did not configure the sandbox's network within {READY_TIMEOUT_S:.0f}s"
                f" (pasta status {process.returncode}){': ' + tail if tail else ''}"
            )
        await asyncio.sleep(_POLL_S)
    return network


def bwrap_binds(spec: SandboxSpec) -> list[str]:
    """bwrap arguments that give a networked sandbox a resolv.conf that works inside.

    The host's own (bound by the backend) works when its resolvers are outside addresses.
    Otherwise the file of `resolv_conf()` replaces it. An image root (`spec.rootfs`) gets the
    host's working file over its own, as docker does, when it has a regular one.
    """
    if network_mode(spec) is not NetworkMode.USER_MODE:
        return []
    source = resolv_conf()
    if spec.rootfs:
        if not os.path.isfile(os.path.join(spec.rootfs, "etc/resolv.conf")) or os.path.islink(
            os.path.join(spec.rootfs, "etc/resolv.conf")
        ):
            return []
        source = source or os.path.realpath("/etc/resolv.conf")
    if not source or not os.path.isfile(source):
        return []
    return ["--ro-bind", source, "/etc/resolv.conf"]
