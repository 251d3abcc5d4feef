"""HTTP attribution provider: an external service's verdict on one attempt (advisory only).

Request: ``POST <url>`` with a JSON body (``Content-Type: application/json``)::

    {"schema": "medic.attribution.request/v1",
     "job": {"id", "cluster", "name", "state", "partition", "nodes", "restart_count"},
     "attempt": 3,
     "evidence": [{"time", "node", "rank", "signature", "domain", "role", "action",
                   "implicates_node", "text"}, ...],
     "evidence_truncated": false}

``evidence`` holds the attempt's detections except progress and noise, oldest first, at most
``max_evidence`` of them, each text cut at 2,000 characters.

Answer: HTTP 200 with a JSON object ``{"domain", "action", "implicated_nodes", "confidence",
"summary"}`` (``root_signature`` optional), with ``domain`` one of medic's fault domains,
``action`` one of ``restart``, ``stop``, ``none``, ``implicated_nodes`` a list of the job's nodes,
``confidence`` a number in [0, 1] and ``summary`` a string.

Errors: connection failures, timeouts, HTTP 5xx, 408 and 429 raise ``TransientError`` (with
``retry_after`` from a numeric ``Retry-After``); any other status, a body that is not JSON or
does not have that shape raises ``PermanentError`` naming the field. Each network phase (connect,
send, every read) is bounded by ``timeout_s``, and the exchange is abandoned as soon as
``timeout_s`` has passed in all; an answer is read up to 1 MiB.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from medic.domain.cluster import Job
from medic.domain.diagnosis import Detection, FaultDomain, JobAction, Role, Verdict
from medic.domain.ids import NodeName, SignatureId
from medic.errors import ConfigError, PermanentError, TransientError

__all__ = ["MAX_ANSWER_BYTES", "REQUEST_SCHEMA", "HttpAttributionProvider"]

REQUEST_SCHEMA = "medic.attribution.request/v1"
MAX_ANSWER_BYTES = 1 << 20
_MAX_TEXT = 2_000
_MAX_SUMMARY = 1_000
_RETRYABLE_STATUS = frozenset({408, 429})
_DOMAINS = ", ".join(d.value for d in FaultDomain)
_ACTIONS = ", ".join(a.value for a in JobAction)
_E = TypeVar("_E", FaultDomain, JobAction)


class HttpAttributionProvider:
    """Implements ``medic.ports.AttributionProvider`` over HTTP (see the module docstring).

    Thread-safe (one ``httpx.Client``); call :meth:`close` (or use it as a context manager) to
    release its connections. ``transport`` is for tests and proxies.
    """

    def __init__(
        self,
        url: str,
        timeout_s: float = 5.0,
        name: str = "http",
        *,
        max_evidence: int = 200,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError("attribution.url", f"must be an http(s) URL, got {url!r}")
        if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ConfigError(
                "attribution.timeout_s", f"must be a positive number, got {timeout_s!r}"
            )
        if max_evidence < 1:
            raise ConfigError("attribution.max_evidence", f"must be at least 1, got {max_evidence}")
        self._url = url
        self._timeout = float(timeout_s)
        self._name = name
        self._max_evidence = max_evidence
        self._client = httpx.Client(
            timeout=httpx.Timeout(self._timeout), follow_redirects=False, transport=transport
        )

    @property
    def name(self) -> str:
        return self._name

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpAttributionProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def attribute(self, job: Job, attempt: int, detections: Sequence[Detection]) -> Verdict:
        """The service's verdict on ``attempt`` of ``job`` (raises Transient/PermanentError)."""
        body = json.dumps(self._request(job, attempt, detections), default=str).encode()
        status, reason, headers, raw = self._post(body)
        if status >= 500 or status in _RETRYABLE_STATUS:
            raise TransientError(
                self._where(f"answered HTTP {status} {reason}{_snippet(raw)}"),
                retry_after=_retry_after(headers.get("retry-after")),
            )
        if status != 200:
            raise PermanentError(self._where(f"answered HTTP {status} {reason}{_snippet(raw)}"))
        try:
            answer = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PermanentError(self._where(f"answered a body that is not JSON: {exc}")) from None
        return self._verdict(job, attempt, answer)

    # --- request ------------------------------------------------------------------------------
    def _request(self, job: Job, attempt: int, detections: Sequence[Detection]) -> dict[str, Any]:
        relevant = sorted(
            (d for d in detections if d.role not in (Role.PROGRESS, Role.NOISE)),
            key=lambda d: (d.time.isoformat(), d.seq),
        )
        return {
            "schema": REQUEST_SCHEMA,
            "job": {
                "id": job.id,
                "cluster": job.cluster,
                "name": job.name,
                "state": job.state.value,
                "partition": job.partition,
                "nodes": list(job.nodes),
                "restart_count": job.restart_count,
            },
            "attempt": attempt,
            "evidence": [_line(d) for d in relevant[: self._max_evidence]],
            "evidence_truncated": len(relevant) > self._max_evidence,
        }

    def _post(self, body: bytes) -> tuple[int, str, httpx.Headers, bytes]:
        deadline = time.monotonic() + self._timeout
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        try:
            with self._client.stream("POST", self._url, content=body, headers=headers) as resp:
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise PermanentError(
                            self._where(f"answer exceeds {MAX_ANSWER_BYTES} bytes")
                        )
                    if time.monotonic() > deadline:
                        raise TransientError(self._where(f"timed out after {self._timeout:g} s"))
                    chunks.append(chunk)
                return resp.status_code, resp.reason_phrase, resp.headers, b"".join(chunks)
        except httpx.TimeoutException:
            raise TransientError(self._where(f"timed out after {self._timeout:g} s")) from None
        except httpx.DecodingError as exc:
            raise PermanentError(self._where(f"answer cannot be decoded: {exc}")) from None
        except httpx.HTTPError as exc:
            raise TransientError(self._where(f"cannot be reached: {exc}")) from None

    # --- answer -------------------------------------------------------------------------------
    def _verdict(self, job: Job, attempt: int, answer: object) -> Verdict:
        if not isinstance(answer, dict):
            raise self._invalid("the answer", f"must be a JSON object, got {_kind(answer)}")
        domain = self._choice(answer, "domain", FaultDomain, _DOMAINS)
        action = self._choice(answer, "action", JobAction, _ACTIONS)
        nodes = answer.get("implicated_nodes")
        if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            raise self._invalid(
                "implicated_nodes", f"must be a list of strings, got {_kind(nodes)}"
            )
        outside = sorted(set(nodes) - set(job.nodes)) if job.nodes else []
        if outside:
            raise self._invalid("implicated_nodes", f"names nodes outside the job: {outside}")
        confidence = answer.get("confidence")
        if (
            isinstance(confidence, bool)
            or not isinstance(confidence, int | float)
            or not 0.0 <= confidence <= 1.0
        ):
            raise self._invalid("confidence", f"must be a number in [0, 1], got {confidence!r}")
        summary = answer.get("summary")
        if not isinstance(summary, str):
            raise self._invalid("summary", f"must be a string, got {_kind(summary)}")
        root = answer.get("root_signature")
        if root is not None and not isinstance(root, str):
            raise self._invalid("root_signature", f"must be a string or null, got {_kind(root)}")
        flat = " ".join(summary.split())
        return Verdict(
            job_id=job.id,
            attempt=attempt,
            domain=domain,
            action=action,
            implicated_nodes=frozenset(NodeName(n) for n in nodes),
            confidence=float(confidence),
            root_signature=SignatureId(root) if root else None,
            summary=flat[:_MAX_SUMMARY],
        )

    def _choice(self, answer: dict[str, Any], key: str, kind: type[_E], allowed: str) -> _E:
        value = answer.get(key)
        if isinstance(value, str):
            try:
                return kind(value)
            except ValueError:
                pass
        raise self._invalid(key, f"must be one of {allowed}, got {value!r}")

    def _invalid(self, field: str, message: str) -> PermanentError:
        return PermanentError(self._where(f"answered an invalid verdict: {field} {message}"))

    def _where(self, message: str) -> str:
        return f"attribution provider {self._name!r} at {self._url} {message}"


def _line(d: Detection) -> dict[str, Any]:
    return {
        "time": d.time.isoformat(),
        "node": d.node,
        "rank": d.rank,
        "signature": d.signature_id,
        "domain": d.domain.value,
        "role": d.role.value,
        "action": d.action.value,
        "implicates_node": d.implicates_node,
        "text": d.text[:_MAX_TEXT],
    }


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _snippet(raw: bytes, limit: int = 200) -> str:
    text = " ".join(raw[: limit * 4].decode("utf-8", errors="replace").split())
    if not text:
        return ""
    return ": " + (text if len(text) <= limit else text[: limit - 1] + "…")


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: not worth parsing for an advisory call
    return seconds if seconds is not None and math.isfinite(seconds) and seconds >= 0 else None
