"""The GPU keys: what each means, how it is decided, and what an operator reads about it.

* ``agent:ecc_dbe``: volatile double-bit (uncorrectable) ECC errors > 0, or the aggregate count
  grew since the previous run (``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` / ``_AGG_TOTAL``);
* ``agent:row_remap_failure`` / ``agent:row_remap_pending``: the remapper ran out of spare rows /
  a remap waits for a GPU reset (``DCGM_FI_DEV_ROW_REMAP_FAILED`` / ``_PENDING``);
* ``agent:retired_pages``: pre-Ampere page retirement pending, or at the retirement limit;
* ``agent:pcie_replay``: the PCIe replay counter grows faster than a rate per minute;
* ``agent:clock_throttle``: hardware slowdown or power-brake slowdown engaged;
* ``agent:thermal``: hardware thermal slowdown, or the temperature at the limit; the evidence
  keeps each GPU's peak temperature and throttle count (thermal slowdown episodes) across runs;
* ``agent:gpu_missing``: fewer GPUs than expected, or a GPU NVML reports lost.

Pure: :mod:`medic.agent.nvml` reads the values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from medic.agent.checks import CheckResult, CheckStatus
from medic.domain.diagnosis import Severity

__all__ = [
    "CLOCK_THROTTLE",
    "DEFAULT_LIMIT_C",
    "ECC_DBE",
    "GPU_KEYS",
    "GPU_MISSING",
    "HW_SLOWDOWN",
    "HW_THERMAL",
    "PCIE_REPLAY",
    "RETIRED_PAGES",
    "ROW_REMAP_FAILURE",
    "ROW_REMAP_PENDING",
    "TEXT",
    "THERMAL",
    "THERMAL_ANY",
    "GpuThresholds",
    "KeyText",
    "absent_results",
    "ecc_failing",
    "presence_result",
    "replay_rate",
    "throttle_reasons",
]

ECC_DBE = "agent:ecc_dbe"
ROW_REMAP_FAILURE = "agent:row_remap_failure"
ROW_REMAP_PENDING = "agent:row_remap_pending"
RETIRED_PAGES = "agent:retired_pages"
PCIE_REPLAY = "agent:pcie_replay"
CLOCK_THROTTLE = "agent:clock_throttle"
THERMAL = "agent:thermal"
GPU_MISSING = "agent:gpu_missing"
GPU_KEYS = (
    ECC_DBE,
    ROW_REMAP_FAILURE,
    ROW_REMAP_PENDING,
    RETIRED_PAGES,
    PCIE_REPLAY,
    CLOCK_THROTTLE,
    THERMAL,
    GPU_MISSING,
)

# nvmlClocksEventReason* bits.
_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
HW_SLOWDOWN = 0x8 | 0x80
THERMAL_ANY = 0x20 | 0x40
HW_THERMAL = 0x40
DEFAULT_LIMIT_C = 90


@dataclass(frozen=True, slots=True)
class GpuThresholds:
    pcie_replays_per_minute: float = 8.0
    """DCGM's PCIe health watch warns above 8 replays a minute."""
    pcie_window_s: float = 10.0
    """Shortest time between the readings a rate is computed from; a closer reading keeps the
    older one as its baseline (and the last decision)."""
    temperature_limit_c: float | None = None
    """None: the GPU's own slowdown threshold (NVML), else 90 °C."""
    retired_pages_limit: int = 60


def ecc_failing(volatile: int, aggregate: int | None, previous_aggregate: int | None) -> bool:
    """Uncorrectable errors since the driver loaded, or new ones since the last check."""
    if volatile > 0:
        return True
    return (
        aggregate is not None and previous_aggregate is not None and aggregate > previous_aggregate
    )


def replay_rate(count: int, previous: int | None, elapsed_s: float) -> float | None:
    """Replays per minute since the previous reading; None for the first one or a reset."""
    if previous is None or count < previous or elapsed_s <= 0:
        return None
    return (count - previous) * 60.0 / elapsed_s


def throttle_reasons(mask: int) -> list[str]:
    return [name for bit, name in _REASONS.items() if mask & bit]


@dataclass(frozen=True, slots=True)
class KeyText:
    failing: str
    ok: str
    severity: Severity
    description: str


TEXT: dict[str, KeyText] = {
    ECC_DBE: KeyText(
        "Uncorrectable (double-bit) ECC errors",
        "No uncorrectable ECC errors",
        Severity.CRITICAL,
        "The GPU's memory reported uncorrectable (double-bit) ECC errors. The application that "
        "touched the memory was killed (Xid 48/94/95); the GPU needs a reset, and field "
        "diagnostics when it repeats.",
    ),
    ROW_REMAP_FAILURE: KeyText(
        "Row remapping failed",
        "No row remapping failure",
        Severity.CRITICAL,
        "The GPU could not remap a memory row with errors: its spare rows are used up (Xid 64). "
        "It cannot be trusted with work; reset it, run field diagnostics, and expect an RMA.",
    ),
    ROW_REMAP_PENDING: KeyText(
        "Row remap pending, GPU reset needed",
        "No row remap pending",
        Severity.WARNING,
        "A memory row was marked for remapping (Xid 63); the remap takes effect at the next GPU "
        "reset. Reset the GPU when it is idle.",
    ),
    RETIRED_PAGES: KeyText(
        "Retired memory pages need attention",
        "Retired pages below the limit",
        Severity.ERROR,
        "Memory pages were retired for ECC errors and either wait for a reboot to take effect or "
        "reached the retirement limit (pre-Ampere GPUs). Reboot for pending pages; at the limit "
        "the GPU needs replacing.",
    ),
    PCIE_REPLAY: KeyText(
        "PCIe replays rising fast",
        "PCIe replay rate normal",
        Severity.WARNING,
        "The GPU's PCIe link keeps retransmitting packets, a sign of a marginal link (riser, "
        "slot, cable or retimer). Transfers slow down and the GPU may fall off the bus; have the "
        "PCIe path inspected.",
    ),
    CLOCK_THROTTLE: KeyText(
        "Hardware clock slowdown",
        "No hardware clock slowdown",
        Severity.WARNING,
        "The GPU's clocks are cut by hardware slowdown or an external power brake (power supply "
        "or cooling trouble). Jobs on this GPU run slower and hold up their peers; check power "
        "and cooling.",
    ),
    THERMAL: KeyText(
        "Thermal slowdown",
        "Temperature normal",
        Severity.WARNING,
        "The GPU is at its temperature limit or slowing its clocks to cool down. Check airflow, "
        "fans and the data-centre cooling; a reboot does not fix it.",
    ),
    GPU_MISSING: KeyText(
        "GPU missing",
        "GPUs visible",
        Severity.CRITICAL,
        "A GPU is lost to the driver (often Xid 79, fallen off the bus) or fewer GPUs are "
        "visible than the node should have. It needs a GPU reset or a power cycle; repeats mean "
        "hardware service.",
    ),
}


def presence_result(
    count: int,
    lost: dict[int, str],
    expected: int | None,
    driver: str | None,
    inventory: list[dict[str, Any]],
) -> CheckResult:
    """``agent:gpu_missing`` from what NVML saw: ``count`` GPUs, ``lost`` ones (index: why)."""
    usable = count - len(lost)
    evidence: dict[str, Any] = {
        "visible": count,
        "usable": usable,
        "expected": expected,
        "lost": [{"gpu": i, "error": why} for i, why in sorted(lost.items())],
        "driver_version": driver,
        "gpus": inventory,
    }
    text = TEXT[GPU_MISSING]
    if lost or (expected is not None and usable < expected):
        if lost:
            summary = f"GPU lost: {', '.join(str(i) for i in sorted(lost))}"
        else:
            summary = f"GPU missing: {usable} of {expected} expected"
        return CheckResult(
            GPU_MISSING, CheckStatus.FAILING, summary, text.description, text.severity, evidence
        )
    if count == 0:
        return CheckResult(
            GPU_MISSING, CheckStatus.NOT_PRESENT, "No GPU visible to NVML", evidence=evidence
        )
    summary = f"{usable} GPU{'s' if usable != 1 else ''} visible"
    return CheckResult(GPU_MISSING, CheckStatus.OK, summary, text.description, evidence=evidence)


def absent_results(why: str, expected: int | None) -> list[CheckResult]:
    """Every key without the NVML library or driver: ``not_present``; ``agent:gpu_missing``
    fails instead when GPUs are expected."""
    evidence: dict[str, Any] = {"reason": why}
    results = [
        CheckResult(key, CheckStatus.NOT_PRESENT, "No NVIDIA GPU or driver", evidence=evidence)
        for key in GPU_KEYS
        if key != GPU_MISSING
    ]
    if expected:
        text = TEXT[GPU_MISSING]
        summary = f"GPU missing: NVIDIA driver unavailable, {expected} expected"
        evidence = {**evidence, "expected": expected, "visible": 0}
        missing = CheckResult(
            GPU_MISSING, CheckStatus.FAILING, summary, text.description, text.severity, evidence
        )
    else:
        missing = CheckResult(
            GPU_MISSING, CheckStatus.NOT_PRESENT, "No NVIDIA GPU or driver", evidence=evidence
        )
    return [*results, missing]
