"""API models for node health alerts from agents and detectors. Separate from the store's tables
and the domain types.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, field_validator

from medic.api.schemas import MAX_PAYLOAD_BYTES, Name, Request
from medic.domain.diagnosis import Severity
from medic.domain.repairs import Alert, AlertState

__all__ = ["AGENT_PREFIX", "AlertIn", "AlertKey", "AlertOut"]

AlertKey = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[a-z0-9_.:-]+$")]
"""Stable identity of a signal: ``agent:ecc_dbe``, ``xid:79``, ``sig:<signature id>``."""
DetectorName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[\w.:@+-]+$")]
AGENT_PREFIX = "agent:"


class AlertIn(Request):
    """One health finding on one node. The source is ``agent`` when ``detector`` starts with
    ``agent:`` (``medic agent``), else ``detector``; the repair engine, not the caller, maps it to
    an action."""

    cluster: Name
    node: Name
    key: AlertKey
    detector: DetectorName
    summary: Annotated[str, Field(min_length=1, max_length=200)]
    description: Annotated[str, Field(max_length=4000)] = ""
    severity: Severity = Severity.WARNING
    evidence: dict[str, Any] = Field(default_factory=dict)
    xid: int | None = Field(default=None, ge=0, le=65535)
    state: AlertState = AlertState.FIRING

    @field_validator("evidence")
    @classmethod
    def _small(cls, evidence: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(evidence, default=str).encode()) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"evidence larger than {MAX_PAYLOAD_BYTES} bytes of JSON")
        return evidence

    @field_validator("xid")
    @classmethod
    def _xid_matches_key(cls, xid: int | None, info: Any) -> int | None:
        key = info.data.get("key")
        xid_key = isinstance(key, str) and key.startswith("xid:")
        if xid is not None and xid_key and key != f"xid:{xid}":
            raise ValueError(f"xid {xid} does not match key {key!r}")
        return xid

    @property
    def key_xid(self) -> int | None:
        """``xid``, or the code of an ``xid:<code>`` key."""
        if self.xid is not None:
            return self.xid
        code = self.key.removeprefix("xid:")
        return int(code) if self.key.startswith("xid:") and code.isdigit() else None


class AlertOut(BaseModel):
    id: int | None
    cluster: str
    node: str
    key: str
    source: str
    summary: str
    description: str
    severity: str
    evidence: dict[str, Any]
    detector: str
    mapped_action: str | None
    xid: int | None
    state: str
    first_seen: datetime | None
    """The first sighting ever."""
    firing_since: datetime | None
    """Start of the current firing episode (after it cleared and came back: that time)."""
    last_seen: datetime | None
    count: int

    @classmethod
    def of(cls, a: Alert) -> AlertOut:
        return cls(
            id=a.id,
            cluster=a.cluster,
            node=a.node,
            key=a.key,
            source=a.source.value,
            summary=a.summary,
            description=a.description,
            severity=a.severity.value,
            evidence=dict(a.evidence),
            detector=a.detector,
            mapped_action=a.mapped_action.value if a.mapped_action else None,
            xid=a.xid,
            state=a.state.value,
            first_seen=a.first_seen,
            firing_since=a.firing_since or a.first_seen,
            last_seen=a.last_seen,
            count=a.count,
        )
