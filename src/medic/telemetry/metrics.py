"""Prometheus metrics behind the :class:`medic.ports.Metrics` port.

Each :class:`PrometheusMetrics` owns a private ``CollectorRegistry`` (never the process-global
one), so several instances, and tests, do not clash. :meth:`PrometheusMetrics.render` gives the
exposition text for a ``/metrics`` endpoint. :class:`NullMetrics` records nothing.
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from medic.domain.ids import ClusterName

__all__ = ["LATENCY_BUCKETS", "LOOP_PASS_BUCKETS", "NullMetrics", "PrometheusMetrics"]

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds; detection and action latencies range from sub-second to minutes."""
LOOP_PASS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds; a control-loop pass should take milliseconds, well under the loop interval."""


class PrometheusMetrics:
    """:class:`medic.ports.Metrics` recorded into its own Prometheus registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True) if registry is None else registry
        self._detections = Counter(
            "medic_detections_total",
            "Detections stored, by cluster and failure signature.",
            ("cluster", "signature"),
            registry=self.registry,
        )
        self._advice = Counter(
            "medic_advice_total",
            "Advice published, by cluster and action.",
            ("cluster", "action"),
            registry=self.registry,
        )
        self._detection_latency = Histogram(
            "medic_detection_latency_seconds",
            "Seconds from a log line being emitted to its detection being stored.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._action_latency = Histogram(
            "medic_action_latency_seconds",
            "Seconds from the deciding detection being stored to the scheduler action done.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._loop_pass = Histogram(
            "medic_loop_pass_seconds",
            "Seconds one control-loop pass took.",
            buckets=LOOP_PASS_BUCKETS,
            registry=self.registry,
        )
        self._alerts = Counter(
            "medic_alerts_total",
            "Node health alerts that started firing, by cluster and alert key.",
            ("cluster", "key"),
            registry=self.registry,
        )
        self._unmapped = Counter(
            "medic_alerts_unmapped_total",
            "Alerts that started firing with no repair mapped to them (listed, never repaired).",
            ("cluster", "key"),
            registry=self.registry,
        )
        self._repairs = Counter(
            "medic_repairs_total",
            "Repairs entering a state, by cluster, action and state.",
            ("cluster", "action", "state"),
            registry=self.registry,
        )
        self._recommendation_latency = Histogram(
            "medic_alert_recommendation_latency_seconds",
            "Seconds from an alert firing to the repair recommended for it.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._loop_errors = Counter(
            "medic_loop_errors_total",
            "Control-loop stages that raised, by stage (observe, evaluate, act, repair).",
            ("stage",),
            registry=self.registry,
        )

        self._lease_held = Gauge(
            "medic_lease_held",
            "1 while this process holds the lease (it does the lease's control work), else 0.",
            ("lease",),
            registry=self.registry,
        )
        self._lease_renewal = Histogram(
            "medic_lease_renewal_seconds",
            "Seconds one take-or-renew of a lease took in the database.",
            buckets=LOOP_PASS_BUCKETS,
            registry=self.registry,
        )
        self._lease_failovers = Counter(
            "medic_lease_failovers_total",
            "Leases this process took over from another holder whose lease had run out.",
            ("lease",),
            registry=self.registry,
        )

    def detection(self, cluster: ClusterName, signature_id: str) -> None:
        """Count one stored detection."""
        self._detections.labels(cluster=cluster, signature=signature_id).inc()

    def detection_latency(self, seconds: float) -> None:
        """Seconds from a line being emitted to its detection being stored."""
        self._detection_latency.observe(seconds)

    def action_latency(self, seconds: float) -> None:
        """Seconds from the deciding detection being stored to the scheduler action done."""
        self._action_latency.observe(seconds)

    def advice(self, cluster: ClusterName, action: str) -> None:
        """Count one published advice."""
        self._advice.labels(cluster=cluster, action=action).inc()

    def loop_pass(self, seconds: float) -> None:
        """Duration of one control-loop pass."""
        self._loop_pass.observe(seconds)

    def loop_error(self, stage: str) -> None:
        """Count a pass stage (observe, evaluate, act) that raised."""
        self._loop_errors.labels(stage=stage).inc()

    def lease_renewal(self, lease: str, seconds: float, held: bool) -> None:
        """One take-or-renew of ``lease``: how long it took, whether this process holds it."""
        self._lease_renewal.observe(seconds)
        self._lease_held.labels(lease=lease).set(1 if held else 0)

    def lease_failover(self, lease: str) -> None:
        """This process took ``lease`` over from a holder whose lease ran out."""
        self._lease_failovers.labels(lease=lease).inc()

    # --- node repair (``medic.repair.lifecycle.RepairMetrics``) -------------------------------
    def alert_fired(self, cluster: ClusterName, key: str, mapped: bool) -> None:
        """Count an alert that started firing; an unmapped one is counted apart too."""
        self._alerts.labels(cluster=cluster, key=key).inc()
        if not mapped:
            self._unmapped.labels(cluster=cluster, key=key).inc()

    def repair_state(self, cluster: ClusterName, action: str, state: str) -> None:
        """Count a repair entering ``state``."""
        self._repairs.labels(cluster=cluster, action=action, state=state).inc()

    def recommendation_latency(self, seconds: float) -> None:
        """Seconds from an alert firing to the repair recommended for it."""
        self._recommendation_latency.observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """The exposition text of this registry and its HTTP content type."""
        return generate_latest(self.registry), str(CONTENT_TYPE_LATEST)


class NullMetrics:
    """:class:`medic.ports.Metrics` that records nothing (tests, one-shot tools)."""

    def detection(self, cluster: ClusterName, signature_id: str) -> None:
        """Ignore a detection."""

    def detection_latency(self, seconds: float) -> None:
        """Ignore a latency."""

    def action_latency(self, seconds: float) -> None:
        """Ignore a latency."""

    def advice(self, cluster: ClusterName, action: str) -> None:
        """Ignore an advice."""

    def loop_pass(self, seconds: float) -> None:
        """Ignore a pass duration."""

    def loop_error(self, stage: str) -> None:
        """Ignore a failed stage."""

    def lease_renewal(self, lease: str, seconds: float, held: bool) -> None:
        """Ignore a lease renewal."""

    def lease_failover(self, lease: str) -> None:
        """Ignore a failover."""

    def alert_fired(self, cluster: ClusterName, key: str, mapped: bool) -> None:
        """Ignore an alert."""

    def repair_state(self, cluster: ClusterName, action: str, state: str) -> None:
        """Ignore a repair state."""

    def recommendation_latency(self, seconds: float) -> None:
        """Ignore a latency."""

    def render(self) -> tuple[bytes, str]:
        """Empty exposition text and the Prometheus content type."""
        return b"", str(CONTENT_TYPE_LATEST)
