"""A copy-on-write root for bwrap sandboxes: one writable root filesystem, as a container has.

Without it, a bwrap sandbox's root is read-only system binds plus separate writable mounts (the
workspace, a tmpfs `/tmp`), so `rename('/app/x', '/tmp/x')` fails with EXDEV and nothing can be
installed anywhere. A `CowRoot` is instead a stack of overlayfs mounts made by root, before
bwrap starts, in a private mount namespace of the sandbox's launcher (the host never sees them):

- the root overlay, mounted at `/`: its lower layers are a built layer (what a Dockerfile's
  COPY and RUN steps added, `root_cache`) over the base, either an image root (`--rootfs`,
  then it is the only overlay) or `HostBase.skeleton` (the host's minimal system: empty mount
  points, `/tmp` 1777, merged-/usr symlinks); its upper layer is the trial's (so the workspace,
  `/tmp`, `/data`, ... are one filesystem and discarded with the trial);
- on the host's minimal system, one overlay per real system directory (`/usr`, and `/lib` and
  the like where they are not symlinks), whose lowest layer is the host's own directory, and
  one for `/etc`, whose lowest layer is `HostBase.etc`, a copy of the few host files programs
  need (`_bwrap_argv._ETC_FILES`). Nothing else of the host is there.

Every upper layer lies in one directory (a trial's sized `Workspace` tmpfs: everything the
sandbox writes anywhere counts against its disk cap); layers are named `root` and `sys/<name>`
in a built layer and in an upper directory alike, so one build's upper directory is the next
trial's lower layer. Permissions are the layers' own: the system's files stay root's, and a
sandbox running as `nobody` writes only what is its own (the workspace, `/tmp`, the directories
a build handed to it).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from skyrl_sdk.sandboxes.spec import BackendUnavailable

ROOT_LAYER = "root"
"""The name of the root overlay's layer in a built layer or an upper directory."""
SYSTEM_LAYERS = "sys"
"""The directory holding one layer per system-directory overlay (`sys/usr`, `sys/etc`)."""
HOST_SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""The host's system directories a sandbox sees (as `_bwrap_argv._SYSTEM_DIRS`)."""
_SKELETON_DIRS = {
    "proc": 0o555,
    "dev": 0o755,
    "sys": 0o555,
    "run": 0o755,
    "tmp": 0o1777,
    "var": 0o755,
    "var/tmp": 0o1777,
    # What every Debian or Ubuntu image has under /var: a build's `RUN echo x > /var/log/y`
    # creates no directory (root's, as in the image; the agent is not root there either).
    "var/log": 0o755,
    "var/lib": 0o755,
    "var/cache": 0o755,
    "var/spool": 0o755,
    "var/local": 0o755,
    "var/opt": 0o755,
    "var/mail": 0o755,
    "opt": 0o755,
    "srv": 0o755,
    "mnt": 0o755,
    "media": 0o755,
    "home": 0o755,
    "root": 0o700,
    "etc": 0o755,
}


@dataclass(frozen=True)
class Overlay:
    """One overlayfs mount of a `CowRoot`."""

    target: str
    """Where it is mounted inside the sandbox (`/`, `/usr`, `/etc`)."""
    lowers: tuple[Path, ...]
    """Its read-only layers, topmost first (host directories)."""
    upper: Path
    """Its writable layer (a host directory: what the sandbox changed)."""
    work: Path
    """overlayfs's work directory (on the upper layer's filesystem)."""


@dataclass(frozen=True)
class CowRoot:
    """The overlays of one sandbox's root, and where the launcher mounts them."""

    mountpoint: Path
    """Host directory the root overlay is mounted on, in the launcher's own mount namespace
    (bwrap then binds it at `/`)."""
    overlays: tuple[Overlay, ...]
    """The root overlay first, then the ones mounted below it."""

    def _overlay_of(self, path: str) -> Overlay:
        norm = os.path.normpath(path)
        for overlay in sorted(self.overlays, key=lambda o: -len(o.target)):
            target = overlay.target.rstrip("/")
            if norm == target or norm.startswith(target + "/") or target == "":
                return overlay
        raise ValueError(f"{path!r} is not in the root")

    def upper_of(self, path: str) -> Path:
        """The host directory in an upper layer where the inside `path` is written."""
        overlay = self._overlay_of(path)
        rel = os.path.normpath(path)[len(overlay.target.rstrip("/")) :].lstrip("/")
        return overlay.upper / rel

    def exists_below(self, path: str) -> bool:
        """True when the inside `path` exists in a lower layer of its overlay."""
        overlay = self._overlay_of(path)
        rel = os.path.normpath(path)[len(overlay.target.rstrip("/")) :].lstrip("/")
        return any(os.path.lexists(low / rel) for low in overlay.lowers)

    def make_mountpoints(self, paths: dict[str, bool]) -> None:
        """Create each inside path (True: a directory, False: a file) in the upper layer where
        no lower layer has it, so bwrap, which may be unprivileged, need not create it in a
        root-owned directory. Made by root, mode 0755 (a directory) or 0644."""
        for path, is_dir in paths.items():
            if self.exists_below(path):
                continue
            host = self.upper_of(path)
            if os.path.lexists(host):
                continue
            overlay = self._overlay_of(path)
            rel = os.path.relpath(host.parent, overlay.upper)
            if not no_links_below(overlay.upper, "" if rel == "." else rel):
                raise ValueError(f"cannot make the mount point {path}: a link is in its way")
            self._make_parents(overlay, host.parent)
            if is_dir:
                host.mkdir(mode=0o755)
            else:
                host.touch(mode=0o644)

    def lists(self, path: str) -> set[str]:
        """The names in the inside directory `path`, over every layer of its overlay (the upper
        one included; whiteouts not applied: enough to find what a root has)."""
        overlay = self._overlay_of(path)
        rel = os.path.normpath(path)[len(overlay.target.rstrip("/")) :].lstrip("/")
        names: set[str] = set()
        for layer in (overlay.upper, *overlay.lowers):
            if no_links_below(layer, rel) and (layer / rel).is_dir():
                names.update(os.listdir(layer / rel))
        return names

    def copy_up_dir(self, path: str) -> Path | None:
        """The inside directory `path` in its upper layer, made as a copy-up would (its and its
        parents' mode and owner from the lower layer), so that its owner can then be changed
        there; None when a link is on the way (never followed) or no layer has it."""
        host = self.upper_of(path)
        overlay = self._overlay_of(path)
        rel = os.path.relpath(host, overlay.upper)
        if not no_links_below(overlay.upper, rel):
            return None
        if not host.is_dir():
            if not self.exists_below(path):
                return None
            self._make_parents(overlay, host)
        return host

    @staticmethod
    def _make_parents(overlay: Overlay, directory: Path) -> None:
        """Create `directory` and its missing parents in `overlay`'s upper layer as a copy-up
        would: with the mode and owner of the lower layer's directory at that path (an upper
        `/tmp` made 0755 would hide the lower's 1777), else root's 0755."""
        rel = directory.relative_to(overlay.upper)
        current = overlay.upper
        for part in rel.parts:
            current = current / part
            if current.is_dir():
                continue
            below = next(
                (
                    low / current.relative_to(overlay.upper)
                    for low in overlay.lowers
                    # A lower layer may be a build's: its links are never followed here.
                    if no_links_below(low, str(current.relative_to(overlay.upper)))
                    and (low / current.relative_to(overlay.upper)).is_dir()
                ),
                None,
            )
            current.mkdir()
            if below is not None:
                info = below.stat()
                os.chown(current, info.st_uid, info.st_gid)
                current.chmod(info.st_mode & 0o7777)
            else:
                current.chmod(0o755)

    def launcher(self) -> list[str]:
        """The argv prefix that mounts the overlays, then execs the rest of the command line:
        `unshare --mount --propagation private` (so the mounts stay in its namespace) and a
        shell running `mount -t overlay` for each. Must run as root."""
        unshare, mount, sh = _tools()
        lines = ["set -e"]
        for overlay in self.overlays:
            at = self.mountpoint / overlay.target.lstrip("/")
            lowers = ":".join(str(p) for p in overlay.lowers)
            options = f"lowerdir={lowers},upperdir={overlay.upper},workdir={overlay.work}"
            lines.append(
                f"{shlex.quote(mount)} -t overlay overlay -o {shlex.quote(options)} {shlex.quote(str(at))}"
            )
        lines.append('exec "$@"')
        return [
            unshare,
            "--mount",
            "--propagation",
            "private",
            "--",
            sh,
            "-c",
            "\n".join(lines),
            "sh",
        ]


@cache
def _tools() -> tuple[str, str, str]:
    found = [
        shutil.which(n, path="/usr/bin:/bin:/usr/sbin:/sbin") for n in ("unshare", "mount", "sh")
    ]
    if not all(found):
        raise BackendUnavailable("a copy-on-write root needs unshare and mount (util-linux)")
    return found[0], found[1], found[2]  # type: ignore[return-value]


def no_links_below(base: Path, path: str) -> bool:
    """True when no existing component of inside `path` under host `base` is a symlink or
    a non-directory (so creating or chowning `base/path` stays under `base`)."""
    current = base
    for part in Path(path.lstrip("/")).parts:
        current = current / part
        if os.path.islink(current) or (os.path.lexists(current) and not current.is_dir()):
            return False
    return True


def supported() -> str | None:
    """None when copy-on-write roots work here, else why not (one line)."""
    if os.geteuid() != 0:
        return "not running as root (the overlays are mounted by root)"
    try:
        with open("/proc/filesystems") as f:
            if not any(line.split()[-1:] == ["overlay"] for line in f):
                return "the kernel has no overlay filesystem"
        _tools()
    except (OSError, BackendUnavailable) as e:
        return str(e)
    return None


def _check_path(path: Path) -> None:
    # overlayfs options are separated by "," and layers by ":"; a path with either is refused.
    if any(c in str(path) for c in ",:\n"):
        raise ValueError(f"a copy-on-write layer's path may not contain ',' or ':': {path}")


@dataclass(frozen=True)
class HostBase:
    """What the host's minimal system adds below a build: built once per host state."""

    skeleton: Path
    """The lowest layer of the root overlay: mount points, `/tmp`, merged-/usr symlinks."""
    etc: Path
    """The lowest layer of `/etc`: copies of the host files programs need."""
    system_dirs: tuple[str, ...]
    """The host's system directories that are real directories (each its own overlay)."""


def _etc_state(names: tuple[str, ...]) -> bytes:
    out = []
    for name in names:
        path = f"/etc/{name}"
        try:
            info = os.stat(path)
            out.append(f"{name}:{info.st_mtime_ns}:{info.st_size}")
        except OSError:
            out.append(f"{name}:-")
    for name in HOST_SYSTEM_DIRS:
        out.append(
            f"{name}:{os.readlink(f'/{name}') if os.path.islink(f'/{name}') else os.path.isdir(f'/{name}')}"
        )
    return "\n".join(out).encode()


def _build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """`target`, first built by `build(staging)` in a private directory next to it and renamed
    into place (a reader never sees half of it; of two racing builders, one copy stays)."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        build(staging / target.name)
        try:
            os.replace(staging / target.name, target)
        except OSError:  # a non-empty directory is there already: another builder won
            if not target.exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def host_base(directory: Path, etc_files: tuple[str, ...]) -> HostBase:
    """The `HostBase` for this host, under `directory` (made once per state of the host's
    system directories and of `etc_files`; a changed host makes a new one)."""
    key = hashlib.sha256(b"skyrl-cow-base-v2\0" + _etc_state(etc_files)).hexdigest()[:20]
    system = tuple(
        n for n in HOST_SYSTEM_DIRS if os.path.isdir(f"/{n}") and not os.path.islink(f"/{n}")
    )

    def build(target: Path) -> None:
        skeleton, etc = target / "skeleton", target / "etc"
        skeleton.mkdir(parents=True)
        skeleton.chmod(0o755)
        for name, mode in _SKELETON_DIRS.items():
            (skeleton / name).mkdir(parents=True, exist_ok=True)
            (skeleton / name).chmod(mode)
        for name in HOST_SYSTEM_DIRS:
            if os.path.islink(f"/{name}"):
                os.symlink(os.readlink(f"/{name}"), skeleton / name)
            elif name in system:
                (skeleton / name).mkdir(mode=0o755)
        etc.mkdir()
        etc.chmod(0o755)
        for name in etc_files:
            source = Path("/etc") / name
            if source.is_dir():
                shutil.copytree(source, etc / name, symlinks=True)
            elif source.is_file():  # a link to a file elsewhere (resolv.conf): its content
                shutil.copyfile(source, etc / name)
                (etc / name).chmod(0o644)
        for name in ("resolv.conf", "hosts", "passwd", "group"):  # mount points for binds
            (etc / name).touch(mode=0o644, exist_ok=True)

    target = _build_once(directory / f"base-{key}", build)
    return HostBase(target / "skeleton", target / "etc", system)


def layout(
    *,
    upper: Path,
    work: Path,
    mountpoint: Path,
    layer: Path | None,
    host: HostBase | None = None,
    rootfs: str | None = None,
) -> CowRoot:
    """The `CowRoot` of a sandbox whose changes go to `upper` (`upper/root`, `upper/sys/<n>`),
    over the built `layer` (None: nothing built) and the base (`rootfs`, else `host`).
    Creates the upper, work and mountpoint directories."""
    if (host is None) == (rootfs is None):
        raise ValueError("give exactly one base: host or rootfs")
    overlays: list[Overlay] = []

    def add(target: str, name: str, base: Path) -> None:
        lowers = [base]
        if layer is not None and (layer / name).is_dir():
            lowers.insert(0, layer / name)
        up, wk = upper / name, work / name
        for path in (*lowers, up, wk):
            _check_path(path)
        up.mkdir(parents=True, exist_ok=True)
        wk.mkdir(parents=True, exist_ok=True)
        overlays.append(Overlay(target, tuple(lowers), up, wk))

    _check_path(mountpoint)
    mountpoint.mkdir(parents=True, exist_ok=True)
    if rootfs is not None:
        add("/", ROOT_LAYER, Path(rootfs))
    else:
        assert host is not None
        add("/", ROOT_LAYER, host.skeleton)
        for name in host.system_dirs:
            add(f"/{name}", f"{SYSTEM_LAYERS}/{name}", Path(f"/{name}"))
        add("/etc", f"{SYSTEM_LAYERS}/etc", host.etc)
    (upper / ROOT_LAYER).chmod(0o755)  # the merged / is root's, as in a container
    return CowRoot(mountpoint, tuple(overlays))
