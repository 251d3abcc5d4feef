"""GPU checks through NVML (``pynvml``, package nvidia-ml-py): the agent's view of what DCGM's
health watches report (shared/reference/xid-catalog.md §8, §10).

One :class:`GpuChecks` run reads every GPU and returns one result per key of
:mod:`medic.agent.gpu` (where each key's decision is described), aggregated over the GPUs: an
alert is per node and key, and the evidence lists every GPU with its values.

``NVML_ERROR_NOT_SUPPORTED`` (or a function the driver lacks) makes that metric
``not_supported``, never a failure. Without the library or the driver every key is
``not_present`` (``agent:gpu_missing`` fails instead when GPUs are expected). The NVML module is
a constructor argument, so tests pass a fake one.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from medic.agent.checks import CheckResult, CheckStatus, worst
from medic.agent.gpu import (
    CLOCK_THROTTLE,
    DEFAULT_LIMIT_C,
    ECC_DBE,
    GPU_KEYS,
    HW_SLOWDOWN,
    HW_THERMAL,
    PCIE_REPLAY,
    RETIRED_PAGES,
    ROW_REMAP_FAILURE,
    ROW_REMAP_PENDING,
    TEXT,
    THERMAL,
    THERMAL_ANY,
    GpuThresholds,
    absent_results,
    ecc_failing,
    presence_result,
    replay_rate,
    throttle_reasons,
)
from medic.ports import Clock

__all__ = ["GpuChecks"]

logger = logging.getLogger(__name__)

# NVML return codes (nvml.h; stable across driver versions).
_NOT_SUPPORTED, _DRIVER_NOT_LOADED, _LIBRARY_NOT_FOUND = 3, 9, 12
_FUNCTION_NOT_FOUND, _GPU_IS_LOST = 13, 15
_ABSENT = frozenset({_DRIVER_NOT_LOADED, _LIBRARY_NOT_FOUND})
_UNSUPPORTED = frozenset({_NOT_SUPPORTED, _FUNCTION_NOT_FOUND})


class _Unsupported(Exception):
    pass


class _Lost(Exception):
    pass


@dataclass(slots=True)
class _Gpu:
    index: int
    handle: Any
    uuid: str
    pci: str | None


@dataclass(slots=True)
class _History:
    """What one GPU's checks remember between runs (by UUID, so reordering cannot mix them)."""

    aggregate_dbe: int | None = None
    replays: int | None = None
    replays_at: datetime | None = None
    replay_rate: float | None = None
    replay_failing: bool = False
    peak_c: int | None = None
    throttle_count: int = 0
    thermal_active: bool = False


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class _UtcClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


_Reader = Callable[[_Gpu], tuple[bool, dict[str, Any]]]


class GpuChecks:
    """Every NVML check over every GPU. ``nvml``: the ``pynvml`` module or a fake with the same
    functions (None: import ``pynvml``); ``expected_gpus``: how many this node should have."""

    name = "gpu"
    keys = GPU_KEYS

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        expected_gpus: int | None = None,
        thresholds: GpuThresholds | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._nvml = nvml
        self.expected_gpus = expected_gpus
        self.thresholds = thresholds or GpuThresholds()
        self._clock = clock or _UtcClock()
        self._initialized = False
        self._history: dict[str, _History] = {}
        self._lost: dict[int, str] = {}

    # --- lifecycle -------------------------------------------------------------------------
    def _module(self) -> Any | None:
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError:
                return None
        return self._nvml

    def close(self) -> None:
        if self._initialized and self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception as exc:  # shutting down: nothing left to do about it
                logger.debug("nvmlShutdown: %r", exc)
        self._initialized = False

    def _code(self, exc: BaseException) -> int | None:
        base = getattr(self._nvml, "NVMLError", None)
        if isinstance(base, type) and isinstance(exc, base):
            value = getattr(exc, "value", None)
            return value if isinstance(value, int) else None
        return None

    # --- the run ---------------------------------------------------------------------------
    def run(self) -> list[CheckResult]:
        nvml = self._module()
        if nvml is None:
            return self._absent("pynvml (package nvidia-ml-py) is not installed")
        try:
            if not self._initialized:
                nvml.nvmlInit()
                self._initialized = True
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            self.close()
            if self._code(exc) in _ABSENT:
                return self._absent(str(exc))
            raise
        self._lost = {}
        gpus = self._devices(nvml, count)
        t = self.thresholds
        results = [
            self._metric(ECC_DBE, gpus, self._ecc),
            self._metric(ROW_REMAP_FAILURE, gpus, self._remap_failure),
            self._metric(ROW_REMAP_PENDING, gpus, self._remap_pending),
            self._metric(RETIRED_PAGES, gpus, self._retired),
            self._metric(PCIE_REPLAY, gpus, self._replays, f"{t.pcie_replays_per_minute:g}/min"),
            self._metric(CLOCK_THROTTLE, gpus, self._throttle),
            self._metric(THERMAL, gpus, self._thermal),
        ]
        results.append(self._missing(nvml, count, gpus))
        return results

    def _devices(self, nvml: Any, count: int) -> list[_Gpu]:
        gpus = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except Exception as exc:
                self._lost[index] = f"{type(exc).__name__}: {exc}"
                continue
            try:
                pci: str | None = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            except Exception:
                pci = None
            gpus.append(_Gpu(index, handle, uuid, pci))
        return gpus

    def _call(self, fn: str, *args: Any) -> Any:
        """One NVML call: ``_Unsupported`` for a metric this GPU or driver lacks, ``_Lost`` when
        NVML says the GPU is gone, anything else as raised."""
        function = getattr(self._nvml, fn, None)
        if function is None:
            raise _Unsupported(f"{fn} not in this pynvml")
        try:
            return function(*args)
        except Exception as exc:
            code = self._code(exc)
            if code in _UNSUPPORTED:
                raise _Unsupported(str(exc)) from exc
            if code == _GPU_IS_LOST:
                raise _Lost(str(exc)) from exc
            raise

    def _optional(self, fn: str, *args: Any) -> Any:
        try:
            return self._call(fn, *args)
        except _Unsupported:
            return None

    def _metric(
        self, key: str, gpus: list[_Gpu], read: _Reader, limit: str | None = None
    ) -> CheckResult:
        statuses: dict[str, CheckStatus] = {}
        entries: list[dict[str, Any]] = []
        failing: list[int] = []
        for gpu in gpus:
            entry: dict[str, Any] = {"gpu": gpu.index, "uuid": gpu.uuid, "pci": gpu.pci}
            try:
                bad, values = read(gpu)
                status = CheckStatus.FAILING if bad else CheckStatus.OK
                entry.update(values)
            except _Unsupported:
                status = CheckStatus.NOT_SUPPORTED
            except _Lost as exc:
                self._lost[gpu.index] = str(exc)
                status, entry["error"] = CheckStatus.ERROR, f"GPU is lost: {exc}"
            except Exception as exc:
                status, entry["error"] = CheckStatus.ERROR, f"{type(exc).__name__}: {exc}"
            entry["status"] = status.value
            statuses[gpu.uuid] = status
            entries.append(entry)
            if status is CheckStatus.FAILING:
                failing.append(gpu.index)
        overall = worst(statuses) if gpus else CheckStatus.NOT_PRESENT
        evidence: dict[str, Any] = {"gpus": entries, "failing_gpus": failing}
        if limit:
            evidence["limit"] = limit
        text = TEXT[key]
        if overall is CheckStatus.FAILING:
            which = "GPU" if len(failing) == 1 else "GPUs"
            summary = f"{text.failing} on {which} {', '.join(map(str, failing))}"
            return CheckResult(key, overall, summary, text.description, text.severity, evidence)
        summary = {
            CheckStatus.OK: f"{text.ok} ({len(gpus)} GPU{'s' if len(gpus) != 1 else ''})",
            CheckStatus.NOT_SUPPORTED: f"{text.failing}: not supported on these GPUs",
            CheckStatus.NOT_PRESENT: "No GPU visible to NVML",
            CheckStatus.ERROR: f"{key}: could not read every GPU",
        }[overall]
        return CheckResult(key, overall, summary, text.description, text.severity, evidence)

    # --- readers: (failing, values) for one GPU ---------------------------------------------
    def _history_of(self, gpu: _Gpu) -> _History:
        return self._history.setdefault(gpu.uuid, _History())

    def _ecc(self, gpu: _Gpu) -> tuple[bool, dict[str, Any]]:
        nvml, h = self._nvml, gpu.handle
        uncorrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
        volatile = int(
            self._call(
                "nvmlDeviceGetTotalEccErrors", h, uncorrected, getattr(nvml, "NVML_VOLATILE_ECC", 0)
            )
        )
        aggregate = self._optional(
            "nvmlDeviceGetTotalEccErrors", h, uncorrected, getattr(nvml, "NVML_AGGREGATE_ECC", 1)
        )
        aggregate = None if aggregate is None else int(aggregate)
        history = self._history_of(gpu)
        bad = ecc_failing(volatile, aggregate, history.aggregate_dbe)
        history.aggregate_dbe = aggregate if aggregate is not None else history.aggregate_dbe
        return bad, {"volatile_dbe": volatile, "aggregate_dbe": aggregate}

    def _remap(self, gpu: _Gpu) -> dict[str, Any]:
        corrected, uncorrected, pending, failure = self._call(
            "nvmlDeviceGetRemappedRows", gpu.handle
        )
        return {
            "correctable_rows": int(corrected),
            "uncorrectable_rows": int(uncorrected),
            "pending": bool(pending),
            "failure": bool(failure),
        }

    def _remap_failure(self, gpu: _Gpu) -> tuple[bool, dict[str, Any]]:
        values = self._remap(gpu)
        return values["failure"], values

    def _remap_pending(self, gpu: _Gpu) -> tuple[bool, dict[str, Any]]:
        values = self._remap(gpu)
        return values["pending"], values

    def _retired(self, gpu: _Gpu) -> tuple[bool, dict[str, Any]]:
        nvml, h = self._nvml, gpu.handle
        dbe_cause = getattr(nvml, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)
        sbe_cause = getattr(nvml, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0)
        dbe = len(self._call("nvmlDeviceGetRetiredPages", h, dbe_cause))
        sbe = self._optional("nvmlDeviceGetRetiredPages", h, sbe_cause)
        sbe_count = 0 if sbe is None else len(sbe)
        pending = self._optional("nvmlDeviceGetRetiredPagesPendingStatus", h)
        is_pending = bool(pending)
        limit = self.thresholds.retired_pages_limit
        values = {"dbe_pages": dbe, "sbe_pages": sbe_count, "pending": is_pending, "limit": limit}
        return is_pending or dbe + sbe_count >= limit, values

    def _replays(self, gpu: _Gpu) -> tuple[bool, dict[str, Any]]:
        count = int(self._call("nvmlDeviceGetPcieReplayCounter", gpu.handle))
        now = self._clock.now()
        history = self._history_of(gpu)
        elapsed = (now - history.replays_at).total_seconds() if history.replays_at else 0.0
        baseline = history.replays
        if baseline is not None and count >= baseline and elapsed < self.thresholds.pcie_window_s:
            # Too soon for a rate: keep the baseline and the last decision.
            values = {"replay_counter": count, "replays_per_minute": history.replay_rate}
            return history.replay_failing, values
        rate = replay_rate(count, baseline, elapsed)
        per_minute = None if rate is None else round(rate, 3)
        bad = rate is not None and rate > self.thresholds.pcie_replays_per_minute
        history.replays, history.replays_at = count, now
        history.replay_rate, history.replay_failing = per_minute, bad
        return bad, {"replay_counter": count, "replays_per_minute": per_minute}

    def _reasons(self, gpu: _Gpu) -> int | None:
        for fn in (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        ):
            try:
                return int(self._call(fn, gpu.handle))
            except _Unsupported:
                continue
        return None

    def _throttle(self, gpu: _Gpu) -> tuple[bool, dict[str, Any]]:
        mask = self._reasons(gpu)
        if mask is None:
            raise _Unsupported("clock event reasons")
        return bool(mask & HW_SLOWDOWN), {"reasons": throttle_reasons(mask), "mask": hex(mask)}

    def _thermal(self, gpu: _Gpu) -> tuple[bool, dict[str, Any]]:
        nvml, h = self._nvml, gpu.handle
        sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        temperature = int(self._call("nvmlDeviceGetTemperature", h, sensor))
        limit = self.thresholds.temperature_limit_c
        if limit is None:
            slowdown = getattr(nvml, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1)
            limit = self._optional("nvmlDeviceGetTemperatureThreshold", h, slowdown)
            limit = limit or DEFAULT_LIMIT_C
        mask = self._reasons(gpu)
        throttled = mask is not None and bool(mask & THERMAL_ANY)
        history = self._history_of(gpu)
        if throttled and not history.thermal_active:
            history.throttle_count += 1
        history.thermal_active = throttled
        history.peak_c = max(temperature, history.peak_c or temperature)
        hw_thermal = mask is not None and bool(mask & HW_THERMAL)
        values = {
            "temperature_c": temperature,
            "peak_temperature_c": history.peak_c,
            "throttle_count": history.throttle_count,
            "thermal_slowdown": throttled,
            "limit_c": limit,
        }
        return hw_thermal or temperature >= float(limit), values

    # --- presence --------------------------------------------------------------------------
    def _missing(self, nvml: Any, count: int, gpus: list[_Gpu]) -> CheckResult:
        try:
            driver: str | None = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:
            driver = None
        inventory = []
        for gpu in gpus:
            if gpu.index in self._lost:
                continue
            try:
                name: str | None = _text(nvml.nvmlDeviceGetName(gpu.handle))
            except Exception:
                name = None
            inventory.append({"gpu": gpu.index, "uuid": gpu.uuid, "pci": gpu.pci, "name": name})
        return presence_result(count, self._lost, self.expected_gpus, driver, inventory)

    def _absent(self, why: str) -> list[CheckResult]:
        return absent_results(why, self.expected_gpus)
