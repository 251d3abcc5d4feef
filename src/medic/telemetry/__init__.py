"""Telemetry for operators: Prometheus metrics and logging setup (text or JSON lines).

Counters and timings go to :class:`PrometheusMetrics`; decisions and actions are audit events in
the store, never only log lines.
"""

from __future__ import annotations

from medic.telemetry.logging import ContextLogger, configure_logging
from medic.telemetry.metrics import NullMetrics, PrometheusMetrics

__all__ = ["ContextLogger", "NullMetrics", "PrometheusMetrics", "configure_logging"]
