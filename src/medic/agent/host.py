"""Node checks that need no GPU: read-only and full filesystems, InfiniBand ports.

The decisions are plain functions of the values read (:func:`readonly_decision`,
:func:`usage_percent`, :func:`mount_options`, :func:`ib_port_problem`), so they are tested
without the machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from medic.agent.checks import CheckResult, CheckStatus, error_result
from medic.agent.checks import names as _names
from medic.domain.diagnosis import Severity

__all__ = [
    "FS_FULL",
    "FS_READONLY",
    "IB_PORT_DOWN",
    "FilesystemCheck",
    "InfinibandCheck",
    "ib_port_problem",
    "mount_options",
    "readonly_decision",
    "usage_percent",
]

FS_READONLY = "agent:fs_readonly"
FS_FULL = "agent:fs_full"
IB_PORT_DOWN = "agent:ib_port_down"


# --- filesystems ---------------------------------------------------------------------------------
class _StatVfs(Protocol):
    @property
    def f_flag(self) -> int: ...
    @property
    def f_blocks(self) -> int: ...
    @property
    def f_bfree(self) -> int: ...
    @property
    def f_bavail(self) -> int: ...
    @property
    def f_files(self) -> int: ...
    @property
    def f_ffree(self) -> int: ...


def readonly_decision(flag: int, options: Iterable[str] | None) -> bool:
    """Read-only when ``statvfs`` says so (``ST_RDONLY``) or the mount options hold ``ro``."""
    return bool(flag & os.ST_RDONLY) or (options is not None and "ro" in options)


def usage_percent(st: _StatVfs) -> tuple[float, float | None]:
    """(blocks used %, inodes used % or None) as ``df`` counts them: reserved blocks are not
    available to users, so a disk is 100 % full when ordinary users can no longer write."""
    used = st.f_blocks - st.f_bfree
    usable = used + st.f_bavail
    blocks = 100.0 * used / usable if usable > 0 else 0.0
    inodes = None
    if st.f_files > 0:
        inodes = 100.0 * (st.f_files - st.f_ffree) / st.f_files
    return blocks, inodes


def _unescape(field_: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as octal (\040 ...).
    out, i = [], 0
    while i < len(field_):
        chunk = field_[i : i + 4]
        if len(chunk) == 4 and chunk[0] == "\\" and chunk[1:].isdigit():
            out.append(chr(int(chunk[1:], 8)))
            i += 4
        else:
            out.append(field_[i])
            i += 1
    return "".join(out)


def mount_options(path: str, mounts_text: str) -> tuple[str, list[str]] | None:
    """(mount point, options) of the mount that holds ``path`` (absolute, resolved), from the text
    of ``/proc/mounts``; the last mount of the longest matching mount point wins (over-mounts)."""
    best: tuple[str, list[str]] | None = None
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        point = _unescape(parts[1])
        inside = path == point or point == "/" or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, parts[3].split(","))
    return best


class FilesystemCheck:
    """Read-only and full filesystems among ``paths`` (``agent:fs_readonly``, ``agent:fs_full``).

    ``statvfs`` and ``mounts`` (a path to ``/proc/mounts``) replace the machine in tests.
    """

    name = "filesystem"
    keys = (FS_READONLY, FS_FULL)

    def __init__(
        self,
        paths: Sequence[str] = ("/",),
        *,
        full_percent: float = 95.0,
        statvfs: Callable[[str], _StatVfs] = os.statvfs,
        mounts: str = "/proc/mounts",
    ) -> None:
        self.paths = tuple(paths)
        self.full_percent = full_percent
        self._statvfs = statvfs
        self._mounts = mounts

    def _mounts_text(self) -> str:
        try:
            return Path(self._mounts).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def run(self) -> list[CheckResult]:
        mounts = self._mounts_text()
        readonly: list[str] = []
        full: list[str] = []
        ro_paths: list[dict[str, Any]] = []
        usage: list[dict[str, Any]] = []
        errors: list[dict[str, str]] = []
        for path in self.paths:
            resolved = os.path.realpath(path)
            try:
                st = self._statvfs(resolved)
            except OSError as exc:
                errors.append({"path": path, "error": f"{type(exc).__name__}: {exc}"})
                continue
            found = mount_options(resolved, mounts) if mounts else None
            is_ro = readonly_decision(st.f_flag, found[1] if found else None)
            blocks, inodes = usage_percent(st)
            mount_point = found[0] if found else None
            ro_paths.append({"path": path, "mount": mount_point, "read_only": is_ro})
            usage.append(
                {
                    "path": path,
                    "mount": mount_point,
                    "used_percent": round(blocks, 2),
                    "inodes_used_percent": None if inodes is None else round(inodes, 2),
                }
            )
            if is_ro:
                readonly.append(path)
            if blocks > self.full_percent or (inodes is not None and inodes > self.full_percent):
                full.append(path)
        if not ro_paths:
            message = "; ".join(f"{e['path']}: {e['error']}" for e in errors) or "no paths"
            return [error_result(FS_READONLY, message), error_result(FS_FULL, message)]
        return [
            self._readonly_result(readonly, ro_paths, errors),
            self._full_result(full, usage, errors),
        ]

    def _readonly_result(
        self, readonly: list[str], paths: list[dict[str, Any]], errors: list[dict[str, str]]
    ) -> CheckResult:
        evidence: dict[str, Any] = {"paths": paths, "read_only": readonly, "errors": errors}
        if readonly:
            return CheckResult(
                FS_READONLY,
                CheckStatus.FAILING,
                f"Read-only filesystem: {_names(readonly)}",
                "A filesystem that should be writable is mounted read-only. The kernel does "
                "this after I/O or metadata errors (ext4 errors=remount-ro, XFS shutdown); jobs "
                "that write there fail. Check the kernel log and the disk; a reboot usually "
                "remounts it, repeated errors mean a failing disk.",
                Severity.ERROR,
                evidence,
            )
        return CheckResult(
            FS_READONLY,
            CheckStatus.OK,
            f"Filesystems writable: {_names([p['path'] for p in paths])}",
            evidence=evidence,
        )

    def _full_result(
        self, full: list[str], usage: list[dict[str, Any]], errors: list[dict[str, str]]
    ) -> CheckResult:
        evidence: dict[str, Any] = {
            "paths": usage,
            "full": full,
            "threshold_percent": self.full_percent,
            "errors": errors,
        }
        if full:
            return CheckResult(
                FS_FULL,
                CheckStatus.FAILING,
                f"Filesystem almost full: {_names(full)}",
                f"More than {self.full_percent:g} % of the blocks or inodes are in use. Writes "
                "(checkpoints, logs, caches) will start failing; free space or clean up. A "
                "reboot does not fix this.",
                Severity.WARNING,
                evidence,
            )
        return CheckResult(
            FS_FULL,
            CheckStatus.OK,
            f"Filesystems below {self.full_percent:g} % used",
            evidence=evidence,
        )


# --- InfiniBand ----------------------------------------------------------------------------------
def ib_port_problem(
    state: str, phys_state: str | None, link_downed: int | None, previous: int | None
) -> str | None:
    """Why a port is bad, or None: ``state`` must be ``4: ACTIVE``, ``phys_state`` (when read)
    ``5: LinkUp``, and the ``link_downed`` counter must not have grown since the last check."""
    if not state.strip().startswith("4"):
        return f"state {state.strip()!r}"
    if phys_state is not None and not phys_state.strip().startswith("5"):
        return f"physical state {phys_state.strip()!r}"
    if link_downed is not None and previous is not None and link_downed > previous:
        return f"link went down {link_downed - previous} time(s) since the last check (flapping)"
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return None if text is None else int(text, 0)
    except ValueError:
        return None


class InfinibandCheck:
    """Every port under ``root`` (``/sys/class/infiniband``), or those of ``devices``.

    ``agent:ib_port_down`` fails when a port is not ACTIVE / LinkUp or its ``link_downed`` counter
    grew since the previous run; ``not_present`` when the node has no InfiniBand device.
    """

    name = "infiniband"
    keys = (IB_PORT_DOWN,)

    def __init__(
        self, root: str = "/sys/class/infiniband", devices: Sequence[str] | None = None
    ) -> None:
        self.root = Path(root)
        self.devices = tuple(devices) if devices else None
        self._downed: dict[str, int] = {}

    def _ports(self) -> list[tuple[str, Path]]:
        if not self.root.is_dir():
            return []
        ports = []
        for device in sorted(self.root.iterdir()):
            if self.devices is not None and device.name not in self.devices:
                continue
            port_dir = device / "ports"
            if not port_dir.is_dir():
                continue
            for port in sorted(port_dir.iterdir(), key=lambda p: (len(p.name), p.name)):
                ports.append((f"{device.name}/{port.name}", port))
        return ports

    def run(self) -> list[CheckResult]:
        ports = self._ports()
        if not ports:
            return [
                CheckResult(
                    IB_PORT_DOWN,
                    CheckStatus.NOT_PRESENT,
                    "No InfiniBand device on this node",
                    evidence={"root": str(self.root), "devices": list(self.devices or ())},
                )
            ]
        seen: list[dict[str, Any]] = []
        bad: list[str] = []
        for name, port in ports:
            state = _read(port / "state") or "unreadable"
            phys = _read(port / "phys_state")
            downed = _int(_read(port / "counters" / "link_downed"))
            problem = ib_port_problem(state, phys, downed, self._downed.get(name))
            if downed is not None:
                self._downed[name] = downed
            entry: dict[str, Any] = {
                "port": name,
                "state": state,
                "phys_state": phys,
                "link_layer": _read(port / "link_layer"),
                "link_downed": downed,
                "rate": _read(port / "rate"),
            }
            if problem:
                entry["problem"] = problem
                bad.append(name)
            seen.append(entry)
        evidence: dict[str, Any] = {"ports": seen, "down": bad}
        if bad:
            return [
                CheckResult(
                    IB_PORT_DOWN,
                    CheckStatus.FAILING,
                    f"InfiniBand port down or flapping: {_names(bad)}",
                    "An InfiniBand port is not active, its physical link is not up, or it lost "
                    "its link since the last check. Multi-node jobs using it stall or fail "
                    "with NCCL network errors. Check the cable, the transceiver and the switch "
                    "port; a port that keeps flapping needs the cable or HCA replaced.",
                    Severity.ERROR,
                    evidence,
                )
            ]
        return [
            CheckResult(
                IB_PORT_DOWN,
                CheckStatus.OK,
                f"InfiniBand ports active: {len(seen)}",
                evidence=evidence,
            )
        ]
