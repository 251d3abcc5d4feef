"""GPU checks: decisions from NVML values (a fake NVML module passed to the constructor), and the
real pynvml on this machine (no GPU here: every key not_present; on a GPU machine: real values)."""

from __future__ import annotations

from typing import Any

import pytest

from medic.agent.checks import CheckResult, CheckStatus, run_check
from medic.agent.gpu import (
    CLOCK_THROTTLE,
    ECC_DBE,
    GPU_KEYS,
    GPU_MISSING,
    PCIE_REPLAY,
    RETIRED_PAGES,
    ROW_REMAP_FAILURE,
    ROW_REMAP_PENDING,
    THERMAL,
    GpuThresholds,
    ecc_failing,
    replay_rate,
    throttle_reasons,
)
from medic.agent.nvml import GpuChecks
from medic.domain.diagnosis import Severity
from medic.testing import FakeClock

from .fakes import (
    DRIVER_NOT_LOADED,
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    LIBRARY_NOT_FOUND,
    NO_PERMISSION,
    NOT_SUPPORTED,
    UNKNOWN,
    Fail,
    FakeGpu,
    FakeNvml,
)

OK, FAILING, ERROR = CheckStatus.OK, CheckStatus.FAILING, CheckStatus.ERROR


def _gpus(n: int = 2, **values: Any) -> list[FakeGpu]:
    return [
        FakeGpu(uuid=f"GPU-{i}", pci=f"00000000:{0x18 + i:02x}:00.0", **values) for i in range(n)
    ]


def _by_key(results: list[CheckResult]) -> dict[str, CheckResult]:
    assert len({r.key for r in results}) == len(results), "one result per key"
    return {r.key: r for r in results}


def _run(checks: GpuChecks) -> dict[str, CheckResult]:
    return _by_key(checks.run())


def _gpu_values(result: CheckResult, index: int) -> dict[str, Any]:
    entry: dict[str, Any] = next(g for g in result.evidence["gpus"] if g["gpu"] == index)
    return entry


def test_healthy_gpus_report_ok_with_their_values() -> None:
    nvml = FakeNvml(_gpus(2, temperature=41))
    results = _run(GpuChecks(nvml))

    assert set(results) == set(GPU_KEYS)
    for key in GPU_KEYS:
        expected = CheckStatus.NOT_SUPPORTED if key == RETIRED_PAGES else OK
        assert results[key].status is expected, (key, results[key])
    assert _gpu_values(results[ECC_DBE], 1) | {"volatile_dbe": 0, "aggregate_dbe": 0} == (
        _gpu_values(results[ECC_DBE], 1)
    )
    thermal = _gpu_values(results[THERMAL], 0)
    assert (thermal["temperature_c"], thermal["limit_c"], thermal["throttle_count"]) == (41, 87, 0)
    missing = results[GPU_MISSING].evidence
    assert missing["visible"] == missing["usable"] == 2 and missing["lost"] == []
    assert [g["name"] for g in missing["gpus"]] == ["NVIDIA H200"] * 2
    assert missing["gpus"][1]["pci"] == "00000000:19:00.0"
    assert nvml.inits == 1


def test_volatile_double_bit_errors_fail_the_gpu_that_has_them() -> None:
    gpus = _gpus(3)
    gpus[1].volatile_dbe = 2
    result = _run(GpuChecks(FakeNvml(gpus)))[ECC_DBE]

    assert result.status is FAILING and result.severity is Severity.CRITICAL
    assert result.summary == "Uncorrectable (double-bit) ECC errors on GPU 1"
    assert result.evidence["failing_gpus"] == [1]
    assert _gpu_values(result, 1)["volatile_dbe"] == 2
    assert _gpu_values(result, 0)["status"] == "ok"


def test_a_growing_aggregate_count_fails_once_per_increase() -> None:
    gpus = _gpus(1, aggregate_dbe=5)
    checks = GpuChecks(FakeNvml(gpus))

    first = _run(checks)[ECC_DBE].status  # old errors from before: not new
    gpus[0].aggregate_dbe = 6
    second = _run(checks)[ECC_DBE].status
    third = _run(checks)[ECC_DBE].status

    assert (first, second, third) == (OK, FAILING, OK)


def test_row_remap_failure_and_pending_are_separate_findings() -> None:
    gpus = _gpus(2)
    gpus[0].remapped = (3, 1, 0, 1)
    gpus[1].remapped = (0, 1, 1, 0)
    results = _run(GpuChecks(FakeNvml(gpus)))

    failure, pending = results[ROW_REMAP_FAILURE], results[ROW_REMAP_PENDING]
    assert failure.status is FAILING and failure.evidence["failing_gpus"] == [0]
    assert pending.status is FAILING and pending.evidence["failing_gpus"] == [1]
    assert failure.severity is Severity.CRITICAL and pending.severity is Severity.WARNING
    assert _gpu_values(failure, 0) | {"correctable_rows": 3, "uncorrectable_rows": 1} == (
        _gpu_values(failure, 0)
    )


@pytest.mark.parametrize(
    ("dbe", "sbe", "pending", "status"),
    [(0, 0, 0, OK), (2, 1, 0, OK), (2, 0, 1, FAILING), (40, 20, 0, FAILING)],
)
def test_retired_pages_where_supported(dbe: int, sbe: int, pending: int, status: Any) -> None:
    gpus = _gpus(1, retired_dbe=dbe, retired_sbe=sbe, retired_pending=pending)
    result = _run(GpuChecks(FakeNvml(gpus)))[RETIRED_PAGES]

    assert result.status is status
    assert _gpu_values(result, 0) | {"dbe_pages": dbe, "sbe_pages": sbe, "limit": 60} == (
        _gpu_values(result, 0)
    )


def test_pcie_replays_fail_only_when_they_grow_faster_than_the_rate() -> None:
    clock = FakeClock()
    gpus = _gpus(1, replays=1000)
    checks = GpuChecks(FakeNvml(gpus), clock=clock)
    statuses, rates = [], []
    for advance, replays in [(0, 1000), (60, 1005), (60, 1105), (30, 1105), (60, 3)]:
        clock.advance(advance)
        gpus[0].replays = replays
        result = _run(checks)[PCIE_REPLAY]
        statuses.append(result.status)
        rates.append(_gpu_values(result, 0)["replays_per_minute"])

    # baseline, 5/min, 100/min, 0/min, counter reset (a new baseline)
    assert statuses == [OK, OK, FAILING, OK, OK]
    assert rates == [None, 5.0, 100.0, 0.0, None]


def test_pcie_replay_rate_needs_a_long_enough_window() -> None:
    clock = FakeClock()
    gpus = _gpus(1, replays=0)
    checks = GpuChecks(FakeNvml(gpus), clock=clock)
    seen = []
    for advance, replays in [(0, 0), (1, 1), (1, 1), (8, 1), (1, 50), (5, 50), (4, 50)]:
        clock.advance(advance)
        gpus[0].replays = replays
        result = _run(checks)[PCIE_REPLAY]
        seen.append((result.status, _gpu_values(result, 0)["replays_per_minute"]))

    # 1 replay in 1 s is not "60 a minute": the rate waits for 10 s between readings
    assert seen == [
        (OK, None),
        (OK, None),
        (OK, None),
        (OK, 6.0),  # 1 replay in 10 s
        (OK, 6.0),  # too soon: the last decision holds
        (OK, 6.0),
        (FAILING, 294.0),  # 49 in 10 s
    ]


def test_pcie_replay_threshold_is_configurable() -> None:
    clock = FakeClock()
    gpus = _gpus(1, replays=0)
    checks = GpuChecks(
        FakeNvml(gpus), clock=clock, thresholds=GpuThresholds(pcie_replays_per_minute=1)
    )
    checks.run()
    clock.advance(60)
    gpus[0].replays = 2

    assert _run(checks)[PCIE_REPLAY].status is FAILING


@pytest.mark.parametrize(
    ("mask", "status", "reasons"),
    [
        (0x1, OK, ["gpu_idle"]),
        (0x4, OK, ["sw_power_cap"]),
        (0x8, FAILING, ["hw_slowdown"]),
        (0x80 | 0x4, FAILING, ["sw_power_cap", "hw_power_brake_slowdown"]),
    ],
)
def test_clock_throttle_fails_on_hardware_slowdowns(mask: int, status: Any, reasons: Any) -> None:
    result = _run(GpuChecks(FakeNvml(_gpus(1, event_reasons=mask))))[CLOCK_THROTTLE]

    assert result.status is status
    assert _gpu_values(result, 0)["reasons"] == reasons


def test_throttle_reasons_fall_back_to_the_older_function() -> None:
    old_driver = _gpus(1, event_reasons=Fail(FUNCTION_NOT_FOUND), throttle_reasons=0x8)
    neither = _gpus(1, event_reasons=Fail(NOT_SUPPORTED), throttle_reasons=Fail(NOT_SUPPORTED))

    assert _run(GpuChecks(FakeNvml(old_driver)))[CLOCK_THROTTLE].status is FAILING
    assert _run(GpuChecks(FakeNvml(neither)))[CLOCK_THROTTLE].status is CheckStatus.NOT_SUPPORTED
    assert _run(GpuChecks(FakeNvml(neither)))[THERMAL].status is OK  # temperature alone


def test_thermal_keeps_peak_temperature_and_throttle_count_across_runs() -> None:
    gpus = _gpus(1)
    checks = GpuChecks(FakeNvml(gpus))
    seen = []
    # (temperature, reasons): thermal slowdown in consecutive runs is one episode; HW thermal fails
    for temperature, mask in [(70, 0x20), (75, 0x20), (60, 0x1), (72, 0x20), (65, 0x40), (50, 0)]:
        gpus[0].temperature, gpus[0].event_reasons = temperature, mask
        result = _run(checks)[THERMAL]
        values = _gpu_values(result, 0)
        seen.append((result.status, values["peak_temperature_c"], values["throttle_count"]))

    assert seen == [
        (OK, 70, 1),
        (OK, 75, 1),
        (OK, 75, 1),
        (OK, 75, 2),
        (FAILING, 75, 2),  # still throttled: the same episode
        (OK, 75, 2),
    ]
    assert result.summary == "Temperature normal (1 GPU)"


def test_thermal_fails_at_the_limit() -> None:
    at_slowdown = _gpus(2, temperature=60)
    at_slowdown[1].temperature = 87
    configured = GpuChecks(
        FakeNvml(_gpus(1, temperature=80)), thresholds=GpuThresholds(temperature_limit_c=80)
    )
    no_threshold = GpuChecks(FakeNvml(_gpus(1, temperature=90, slowdown_c=Fail(NOT_SUPPORTED))))

    result = _run(GpuChecks(FakeNvml(at_slowdown)))[THERMAL]
    assert result.status is FAILING and result.summary == "Thermal slowdown on GPU 1"
    assert _run(configured)[THERMAL].status is FAILING
    limited = _run(no_threshold)[THERMAL]
    assert limited.status is FAILING and _gpu_values(limited, 0)["limit_c"] == 90


def test_not_supported_is_not_a_failure() -> None:
    unsupported = _gpus(2, volatile_dbe=Fail(NOT_SUPPORTED), remapped=Fail(NOT_SUPPORTED))
    mixed = _gpus(2)
    mixed[0].volatile_dbe = Fail(NOT_SUPPORTED)

    results = _run(GpuChecks(FakeNvml(unsupported)))
    assert results[ECC_DBE].status is CheckStatus.NOT_SUPPORTED
    assert results[ROW_REMAP_FAILURE].status is CheckStatus.NOT_SUPPORTED
    assert results[ECC_DBE].summary.endswith("not supported on these GPUs")
    assert _run(GpuChecks(FakeNvml(mixed)))[ECC_DBE].status is OK


def test_aggregate_counter_unsupported_keeps_the_volatile_one() -> None:
    gpus = _gpus(1, aggregate_dbe=Fail(NOT_SUPPORTED), volatile_dbe=1)
    result = _run(GpuChecks(FakeNvml(gpus)))[ECC_DBE]

    assert result.status is FAILING
    assert _gpu_values(result, 0)["aggregate_dbe"] is None


def test_a_metric_that_errors_is_an_error_for_that_key_only() -> None:
    gpus = _gpus(2)
    gpus[0].replays = Fail(UNKNOWN)
    gpus[1].remapped = (1, 2)  # a broken binding: wrong shape
    results = _run(GpuChecks(FakeNvml(gpus)))

    assert results[PCIE_REPLAY].status is ERROR
    assert "NVML error 999" in _gpu_values(results[PCIE_REPLAY], 0)["error"]
    assert results[ROW_REMAP_FAILURE].status is ERROR
    assert "ValueError" in _gpu_values(results[ROW_REMAP_FAILURE], 1)["error"]
    assert results[ECC_DBE].status is OK and results[GPU_MISSING].status is OK


def test_a_failing_gpu_outweighs_an_error_on_another() -> None:
    gpus = _gpus(2)
    gpus[0].volatile_dbe = Fail(UNKNOWN)
    gpus[1].volatile_dbe = 1

    assert _run(GpuChecks(FakeNvml(gpus)))[ECC_DBE].status is FAILING


def test_a_lost_gpu_is_missing() -> None:
    gpus = _gpus(3)
    gpus[1].handle_error = GPU_IS_LOST
    gpus[2].temperature = Fail(GPU_IS_LOST)
    results = _run(GpuChecks(FakeNvml(gpus)))

    missing = results[GPU_MISSING]
    assert missing.status is FAILING and missing.summary == "GPU lost: 1, 2"
    assert missing.evidence["usable"] == 1 and len(missing.evidence["lost"]) == 2
    assert results[THERMAL].status is ERROR
    assert [g["gpu"] for g in results[ECC_DBE].evidence["gpus"]] == [0, 2]


def test_fewer_gpus_than_expected_is_missing() -> None:
    results = _run(GpuChecks(FakeNvml(_gpus(7)), expected_gpus=8))

    assert results[GPU_MISSING].status is FAILING
    assert results[GPU_MISSING].summary == "GPU missing: 7 of 8 expected"
    assert _run(GpuChecks(FakeNvml(_gpus(8)), expected_gpus=8))[GPU_MISSING].status is OK


@pytest.mark.parametrize("code", [LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED])
def test_without_library_or_driver_every_key_is_not_present(code: int) -> None:
    results = _run(GpuChecks(FakeNvml([], init_error=code)))

    assert {r.status for r in results.values()} == {CheckStatus.NOT_PRESENT}
    assert set(results) == set(GPU_KEYS)


def test_without_driver_but_expected_gpus_the_gpus_are_missing() -> None:
    results = _run(GpuChecks(FakeNvml([], init_error=DRIVER_NOT_LOADED), expected_gpus=8))

    assert results[GPU_MISSING].status is FAILING
    assert results[ECC_DBE].status is CheckStatus.NOT_PRESENT


def test_no_gpus_visible() -> None:
    results = _run(GpuChecks(FakeNvml([])))

    assert {r.status for r in results.values()} == {CheckStatus.NOT_PRESENT}


def test_another_init_error_reports_error_on_every_key_and_retries_init() -> None:
    nvml = FakeNvml(_gpus(1), init_error=NO_PERMISSION)
    checks = GpuChecks(nvml)

    results = _by_key(run_check(checks))
    assert {r.status for r in results.values()} == {ERROR}
    assert "NVML error 4" in results[ECC_DBE].description
    nvml.init_error = None
    assert _run(checks)[ECC_DBE].status is OK and nvml.inits == 1


def test_close_shuts_nvml_down_once() -> None:
    nvml = FakeNvml(_gpus(1))
    checks = GpuChecks(nvml)
    checks.run()
    checks.run()
    checks.close()
    checks.close()

    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_decision_functions() -> None:
    assert ecc_failing(1, None, None) and not ecc_failing(0, 4, None)
    assert ecc_failing(0, 5, 4) and not ecc_failing(0, 5, 5)
    assert replay_rate(10, None, 60) is None and replay_rate(5, 10, 60) is None
    assert replay_rate(130, 10, 120) == 60.0 and replay_rate(10, 10, 0) is None
    assert throttle_reasons(0x48) == ["hw_slowdown", "hw_thermal_slowdown"]
    assert throttle_reasons(0) == []


# --- the real pynvml -----------------------------------------------------------------------------
def _real_nvml_has_a_gpu() -> bool:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    try:
        return int(pynvml.nvmlDeviceGetCount()) > 0
    finally:
        pynvml.nvmlShutdown()


def test_real_nvml() -> None:
    """No GPU or driver (this machine): every key not_present. With GPUs (the device check):
    every key ok or not_supported, with real values."""
    checks = GpuChecks()
    try:
        results = _run(checks)
        results = _run(checks)  # a second run uses the kept state (replay rate, peak)
    finally:
        checks.close()
    assert set(results) == set(GPU_KEYS)
    if not _real_nvml_has_a_gpu():
        assert {r.status for r in results.values()} == {CheckStatus.NOT_PRESENT}
        return
    for key, result in results.items():
        assert result.status in {OK, CheckStatus.NOT_SUPPORTED}, (key, result)
    for entry in results[THERMAL].evidence["gpus"]:
        assert 0 < entry["temperature_c"] < 120 and entry["peak_temperature_c"] > 0
    for entry in results[ECC_DBE].evidence["gpus"]:
        if entry["status"] == "ok":
            assert isinstance(entry["volatile_dbe"], int) and entry["volatile_dbe"] >= 0
    for entry in results[PCIE_REPLAY].evidence["gpus"]:
        if entry["status"] == "ok":
            assert isinstance(entry["replay_counter"], int)
    missing = results[GPU_MISSING].evidence
    assert missing["visible"] >= 1 and missing["driver_version"]
    assert all(g["uuid"].startswith("GPU-") for g in missing["gpus"])
