"""A fake NVML module: the pynvml functions the agent calls, over GPUs described as plain values.

It has its own ``NVMLError`` (with pynvml's ``value`` attribute and return codes), so the agent
must classify errors by code, not by pynvml's classes. A value given as :class:`Fail` makes that
call raise ``NVMLError(code)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NOT_SUPPORTED, NO_PERMISSION, DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND = 3, 4, 9, 12
FUNCTION_NOT_FOUND, GPU_IS_LOST, UNKNOWN = 13, 15, 999


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass(frozen=True)
class Fail:
    code: int


@dataclass
class FakeGpu:
    uuid: str = "GPU-0"
    pci: str = "00000000:18:00.0"
    name: str = "NVIDIA H200"
    volatile_dbe: Any = 0
    aggregate_dbe: Any = 0
    remapped: Any = (0, 0, 0, 0)
    """(correctable rows, uncorrectable rows, pending, failure)."""
    retired_dbe: Any = field(default_factory=lambda: Fail(NOT_SUPPORTED))
    retired_sbe: Any = field(default_factory=lambda: Fail(NOT_SUPPORTED))
    retired_pending: Any = field(default_factory=lambda: Fail(NOT_SUPPORTED))
    replays: Any = 0
    event_reasons: Any = 0x1
    throttle_reasons: Any = 0x1
    temperature: Any = 40
    slowdown_c: Any = 87
    handle_error: int | None = None


def _value(value: Any) -> Any:
    if isinstance(value, Fail):
        raise NVMLError(value.code)
    return value


class FakeNvml:
    """Module-like object: ``FakeNvml([FakeGpu(...), ...])``; ``init_error`` fails nvmlInit."""

    NVMLError = NVMLError
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.inits = 0
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.86.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        gpu = self.gpus[index]
        if gpu.handle_error is not None:
            raise NVMLError(gpu.handle_error)
        return gpu

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return gpu.uuid

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(busId=gpu.pci.encode())

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> bytes:
        return gpu.name.encode()

    def nvmlDeviceGetTotalEccErrors(self, gpu: FakeGpu, error_type: int, counter: int) -> int:
        assert error_type == 1, "only uncorrected (double-bit) errors are read"
        return int(_value(gpu.volatile_dbe if counter == 0 else gpu.aggregate_dbe))

    def nvmlDeviceGetRemappedRows(self, gpu: FakeGpu) -> tuple[int, int, int, int]:
        result: tuple[int, int, int, int] = _value(gpu.remapped)
        return result

    def nvmlDeviceGetRetiredPages(self, gpu: FakeGpu, cause: int) -> list[int]:
        count = _value(gpu.retired_dbe if cause == 1 else gpu.retired_sbe)
        return [0x1000 * i for i in range(count)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, gpu: FakeGpu) -> int:
        return int(_value(gpu.retired_pending))

    def nvmlDeviceGetPcieReplayCounter(self, gpu: FakeGpu) -> int:
        return int(_value(gpu.replays))

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu) -> int:
        return int(_value(gpu.event_reasons))

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: FakeGpu) -> int:
        return int(_value(gpu.throttle_reasons))

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        return int(_value(gpu.temperature))

    def nvmlDeviceGetTemperatureThreshold(self, gpu: FakeGpu, threshold: int) -> int:
        return int(_value(gpu.slowdown_c))
