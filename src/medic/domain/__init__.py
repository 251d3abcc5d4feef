"""Immutable value types and enums of medic's domain. No I/O, no clock reads, no logging.

Modules: ``ids`` (typed ids), ``cluster`` (nodes, jobs, states, modes), ``attempts`` (runs of a job
and their progress), ``logs`` (log lines), ``diagnosis`` (detections, verdicts), ``advice``
(recommendations and reconciliation), ``actions`` (scheduler steps), ``audit`` (audit events).
"""
