"""Filesystem checks on real paths and mounts (a read-only bind mount and a small tmpfs when this
process may mount), their decision functions on given statvfs values, the InfiniBand check on a
sysfs-like tree, and a check that raises."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from medic.agent.checks import CheckResult, CheckStatus, run_check
from medic.agent.host import (
    FS_FULL,
    FS_READONLY,
    IB_PORT_DOWN,
    FilesystemCheck,
    InfinibandCheck,
    ib_port_problem,
    mount_options,
    readonly_decision,
    usage_percent,
)

OK, FAILING = CheckStatus.OK, CheckStatus.FAILING


def _by_key(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.key: r for r in results}


def _mount(*args: str) -> bool:
    try:
        done = subprocess.run(["mount", *args], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], capture_output=True, timeout=10, check=False)


@pytest.fixture
def readonly_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory bind-mounted read-only onto itself (root only)."""
    target = tmp_path / "ro"
    target.mkdir()
    if os.geteuid() != 0 or not _mount("--bind", str(target), str(target)):
        pytest.skip("bind mounts need root and mount(8)")
    try:
        if not _mount("-o", "remount,bind,ro", str(target)):
            pytest.skip("read-only remount refused")
        yield target
    finally:
        _umount(target)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    target = tmp_path / "small"
    target.mkdir()
    if os.geteuid() != 0 or not _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target)):
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    try:
        yield target
    finally:
        _umount(target)


# --- filesystems on this machine -----------------------------------------------------------------
def test_a_writable_directory_is_ok(tmp_path: Path) -> None:
    results = _by_key(FilesystemCheck([str(tmp_path)]).run())

    assert results[FS_READONLY].status is OK and results[FS_FULL].status is OK
    path = results[FS_FULL].evidence["paths"][0]
    assert path["path"] == str(tmp_path) and 0 <= path["used_percent"] <= 100
    assert path["mount"] is not None and str(tmp_path).startswith(path["mount"])


def test_a_read_only_bind_mount_fails(readonly_dir: Path, tmp_path: Path) -> None:
    check = FilesystemCheck([str(tmp_path), str(readonly_dir)])
    result = _by_key(check.run())[FS_READONLY]

    assert result.status is FAILING
    assert result.summary == f"Read-only filesystem: {readonly_dir}"
    assert result.evidence["read_only"] == [str(readonly_dir)]
    assert [p["mount"] for p in result.evidence["paths"]][1] == str(readonly_dir)


def test_a_full_tmpfs_fails(small_tmpfs: Path) -> None:
    check = FilesystemCheck([str(small_tmpfs)], full_percent=95)
    assert _by_key(check.run())[FS_FULL].status is OK

    # ENOSPC is expected: the disk is then full, which is the point.
    with (small_tmpfs / "fill").open("wb") as fh, contextlib.suppress(OSError):
        fh.write(b"\0" * (1 << 20))
    result = _by_key(check.run())[FS_FULL]

    assert result.status is FAILING and result.summary == f"Filesystem almost full: {small_tmpfs}"
    assert result.evidence["paths"][0]["used_percent"] > 95


def test_missing_paths_are_reported_not_raised(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    some = _by_key(FilesystemCheck([str(tmp_path), missing]).run())
    none = _by_key(FilesystemCheck([missing]).run())

    assert some[FS_READONLY].status is OK
    assert some[FS_READONLY].evidence["errors"][0]["path"] == missing
    assert none[FS_READONLY].status is CheckStatus.ERROR and "FileNotFoundError" in (
        none[FS_FULL].description
    )


# --- filesystem decisions on given values --------------------------------------------------------
def _st(
    *,
    flag: int = 0,
    blocks: int = 1000,
    free: int = 500,
    avail: int = 450,
    files: int = 100,
    ffree: int = 50,
) -> Any:
    return SimpleNamespace(
        f_flag=flag, f_blocks=blocks, f_bfree=free, f_bavail=avail, f_files=files, f_ffree=ffree
    )


def test_usage_counts_like_df() -> None:
    blocks, inodes = usage_percent(_st(blocks=1000, free=100, avail=50, files=0))
    assert round(blocks, 2) == round(100 * 900 / 950, 2) and inodes is None
    assert usage_percent(_st(blocks=0, free=0, avail=0))[0] == 0.0
    assert usage_percent(_st(files=100, ffree=1))[1] == 99.0


def test_readonly_from_the_flag_or_the_mount_options() -> None:
    assert readonly_decision(os.ST_RDONLY, None)
    assert readonly_decision(0, ["ro", "relatime"])
    assert not readonly_decision(0, ["rw", "errors=remount-ro"])
    assert not readonly_decision(os.ST_NOSUID, None)


def test_decisions_with_a_fake_statvfs(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/sda1 / ext4 rw,relatime 0 0\n"
        "/dev/sdb1 /scratch xfs ro,relatime 0 0\n"
        "/dev/sdc1 /data xfs rw 0 0\n"
    )
    values = {
        "/": _st(),
        "/scratch": _st(),
        "/data": _st(blocks=1000, free=10, avail=10),
        "/home": _st(files=1000, ffree=10),  # out of inodes
    }
    check = FilesystemCheck(
        list(values), statvfs=lambda p: values[p], mounts=str(mounts), full_percent=95
    )
    results = _by_key(check.run())

    assert results[FS_READONLY].status is FAILING
    assert results[FS_READONLY].evidence["read_only"] == ["/scratch"]
    assert results[FS_FULL].status is FAILING
    assert results[FS_FULL].evidence["full"] == ["/data", "/home"]
    assert results[FS_FULL].evidence["paths"][3]["mount"] == "/"


def test_mount_options_takes_the_longest_and_last_mount() -> None:
    text = (
        "rootfs / rootfs rw 0 0\n"
        "/dev/a /mnt/my\\040disk ext4 rw 0 0\n"
        "/dev/b /mnt ext4 rw 0 0\n"
        "/dev/c /mnt ext4 ro 0 0\n"
        "garbage\n"
    )
    assert mount_options("/mnt/my disk/x", text) == ("/mnt/my disk", ["rw"])
    assert mount_options("/mnt/other", text) == ("/mnt", ["ro"])
    assert mount_options("/mntx", text) == ("/", ["rw"])
    assert mount_options("/x", "") is None


# --- InfiniBand ----------------------------------------------------------------------------------
def _port(
    root: Path,
    device: str,
    port: int,
    *,
    state: str = "4: ACTIVE",
    phys: str = "5: LinkUp",
    downed: int = 0,
) -> Path:
    path = root / device / "ports" / str(port)
    (path / "counters").mkdir(parents=True, exist_ok=True)
    (path / "state").write_text(state + "\n")
    (path / "phys_state").write_text(phys + "\n")
    (path / "link_layer").write_text("InfiniBand\n")
    (path / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (path / "counters" / "link_downed").write_text(f"{downed}\n")
    return path


def test_active_ports_are_ok(tmp_path: Path) -> None:
    for device in ("mlx5_0", "mlx5_1"):
        _port(tmp_path, device, 1)
    result = InfinibandCheck(str(tmp_path)).run()[0]

    assert result.key == IB_PORT_DOWN and result.status is OK
    ports = result.evidence["ports"]
    assert [p["port"] for p in ports] == ["mlx5_0/1", "mlx5_1/1"]
    assert ports[0]["rate"] == "400 Gb/sec (4X NDR)" and ports[0]["link_downed"] == 0


@pytest.mark.parametrize(
    ("state", "phys"),
    [("1: DOWN", "3: Disabled"), ("2: INIT", "5: LinkUp"), ("4: ACTIVE", "7: Phy Test")],
)
def test_a_port_not_active_or_not_linked_up_fails(tmp_path: Path, state: str, phys: str) -> None:
    _port(tmp_path, "mlx5_0", 1)
    _port(tmp_path, "mlx5_3", 1, state=state, phys=phys)
    result = InfinibandCheck(str(tmp_path)).run()[0]

    assert result.status is FAILING and result.evidence["down"] == ["mlx5_3/1"]
    assert result.summary == "InfiniBand port down or flapping: mlx5_3/1"


def test_link_downed_growth_is_a_flap_until_it_stops(tmp_path: Path) -> None:
    port = _port(tmp_path, "mlx5_0", 1, downed=3)
    check = InfinibandCheck(str(tmp_path))
    first = check.run()[0].status
    (port / "counters" / "link_downed").write_text("5\n")
    flapped = check.run()[0]
    steady = check.run()[0].status

    assert (first, flapped.status, steady) == (OK, FAILING, OK)
    assert "2 time(s)" in flapped.evidence["ports"][0]["problem"]


def test_no_infiniband_is_not_present(tmp_path: Path) -> None:
    assert InfinibandCheck(str(tmp_path / "none")).run()[0].status is CheckStatus.NOT_PRESENT
    _port(tmp_path, "mlx5_0", 1, state="1: DOWN")
    only_other = InfinibandCheck(str(tmp_path), devices=["mlx5_9"]).run()[0]
    assert only_other.status is CheckStatus.NOT_PRESENT


def test_ib_port_problem() -> None:
    assert ib_port_problem("4: ACTIVE", "5: LinkUp", 1, 1) is None
    assert ib_port_problem("4: ACTIVE", None, None, None) is None
    assert ib_port_problem("1: DOWN", "5: LinkUp", 0, 0) == "state '1: DOWN'"
    assert ib_port_problem("4: ACTIVE", "2: Polling", 0, 0) == "physical state '2: Polling'"


# --- a check that raises -------------------------------------------------------------------------
class _Broken:
    name = "broken"
    keys = ("agent:one", "agent:two")

    def run(self) -> list[CheckResult]:
        raise RuntimeError("sensor on fire")


def test_a_check_that_raises_reports_error_for_each_key() -> None:
    results = run_check(_Broken())

    assert [(r.key, r.status) for r in results] == [
        ("agent:one", CheckStatus.ERROR),
        ("agent:two", CheckStatus.ERROR),
    ]
    assert results[0].evidence["error"] == "RuntimeError: sensor on fire"
