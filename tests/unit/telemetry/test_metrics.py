"""Tests for ``medic.telemetry.metrics``: the families appear in the exposition after use."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from medic.domain.ids import ClusterName
from medic.ports import Metrics
from medic.telemetry.metrics import NullMetrics, PrometheusMetrics

EAST = ClusterName("east")


def samples(metrics: PrometheusMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, _ = metrics.render()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def record(metrics: Metrics) -> None:
    metrics.detection(EAST, "xid-79")
    metrics.detection(EAST, "xid-79")
    metrics.advice(EAST, "requeue")
    metrics.detection_latency(0.3)
    metrics.action_latency(42.0)
    metrics.loop_pass(0.004)
    metrics.loop_error("act")


def test_exposition_has_every_family_after_recording() -> None:
    metrics = PrometheusMetrics()
    record(metrics)
    got = samples(metrics)
    assert got[("medic_detections_total", (("cluster", "east"), ("signature", "xid-79")))] == 2
    assert got[("medic_advice_total", (("action", "requeue"), ("cluster", "east")))] == 1
    assert got[("medic_loop_errors_total", (("stage", "act"),))] == 1
    assert got[("medic_detection_latency_seconds_count", ())] == 1
    assert got[("medic_detection_latency_seconds_bucket", (("le", "0.5"),))] == 1
    assert got[("medic_detection_latency_seconds_bucket", (("le", "0.25"),))] == 0
    assert got[("medic_action_latency_seconds_sum", ())] == 42.0
    assert got[("medic_action_latency_seconds_bucket", (("le", "300.0"),))] == 1
    assert got[("medic_loop_pass_seconds_count", ())] == 1


def test_render_returns_prometheus_content_type() -> None:
    body, content_type = PrometheusMetrics().render()
    assert content_type.startswith("text/plain")
    assert b"# TYPE medic_detections_total counter" in body
    assert b"# TYPE medic_loop_pass_seconds histogram" in body


def test_instances_have_separate_registries() -> None:
    first, second = PrometheusMetrics(), PrometheusMetrics()
    first.loop_error("observe")
    assert ("medic_loop_errors_total", (("stage", "observe"),)) in samples(first)
    assert ("medic_loop_errors_total", (("stage", "observe"),)) not in samples(second)


def test_null_metrics_accepts_everything_and_renders_nothing() -> None:
    metrics = NullMetrics()
    record(metrics)
    body, content_type = metrics.render()
    assert body == b""
    assert content_type.startswith("text/plain")
