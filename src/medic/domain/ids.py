"""Typed identifiers, so a node name can never be passed where a job id is expected."""

from __future__ import annotations

from typing import NewType

__all__ = ["AdviceId", "ClusterName", "JobId", "NodeName", "SignatureId"]

ClusterName = NewType("ClusterName", str)
NodeName = NewType("NodeName", str)
JobId = NewType("JobId", str)
SignatureId = NewType("SignatureId", str)
AdviceId = NewType("AdviceId", int)
