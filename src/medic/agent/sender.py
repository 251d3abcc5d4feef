"""Posts the agent's findings to the control plane (``POST /api/v1/alerts``).

Only changes go out, not every healthy reading:

* a key that starts failing is sent ``firing``; while it keeps failing it is sent again every
  ``refire_seconds`` (the store counts and time-stamps each one);
* a failing key whose check says ``ok`` again is sent ``resolved``; ``error``, ``not_supported``
  and ``not_present`` neither fire nor resolve;
* an event finding (a kernel line) is sent every time it happens.

Each alert carries the agent's own detector identity (``agent:<hostname>`` by default). A send is
retried a few times with backoff when the API does not answer (or answers 5xx); after that the
alert, and everything after it, waits in a JSON-lines spool file and goes out, in order, with the
next delivery. A 4xx other than "resolved an alert the store does not have" is logged and
dropped: sending it again cannot succeed. Which keys are firing survives a restart in a state
file next to the spool, so a condition that cleared while the agent was down is still resolved.

Every post carries ``Authorization: Bearer <token>`` (a ``detector`` token named after the
detector identity, or a prefix of it: a token named ``agent`` may post as ``agent:<host>``). A 401
(token missing, unknown or revoked) keeps the alert in the spool, unretried, until a valid token
is configured; a 403 (this token may not post as this detector) is logged and dropped like any
other refusal.

HTTP outcomes map to medic errors as in :class:`medic.remote.MedicApiClient`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from medic.agent.checks import CheckResult, CheckStatus
from medic.errors import ConflictError, NotFoundError, PermanentError, TransientError
from medic.ports import Clock

__all__ = ["MAX_EVIDENCE_BYTES", "AlertSender", "Delivery", "default_detector", "fit_evidence"]

logger = logging.getLogger(__name__)

_PATH = "/api/v1/alerts"
MAX_EVIDENCE_BYTES = 16_384


def default_detector() -> str:
    return f"agent:{socket.gethostname().split('.')[0] or 'unknown'}"


def _size(value: Any) -> int:
    return len(json.dumps(value, default=str, separators=(",", ":")).encode())


def fit_evidence(evidence: dict[str, Any], limit: int = MAX_EVIDENCE_BYTES - 512) -> dict[str, Any]:
    """``evidence`` within ``limit`` bytes of JSON: long lists are cut (``<name>_truncated``
    says how many items were left out), then long strings; never raises."""
    if _size(evidence) <= limit:
        return evidence
    out = dict(evidence)
    for name, value in sorted(out.items(), key=lambda kv: -_size(kv[1])):
        if isinstance(value, list) and len(value) > 1:
            keep = len(value)
            while keep > 1 and _size({**out, name: value[:keep]}) > limit:
                keep //= 2
            out[name] = value[:keep]
            out[f"{name}_truncated"] = len(value) - keep
        if _size(out) <= limit:
            return out
    text = json.dumps(out, default=str)
    return {"truncated": True, "excerpt": text[: limit // 2]}


@dataclass(frozen=True, slots=True)
class Delivery:
    sent: int = 0
    spooled: int = 0
    """Alerts waiting in the spool after this delivery."""
    dropped: int = 0


class _Unauthenticated(TransientError):
    """The API refused the agent's token: spool, and do not retry before the next delivery."""


class _UtcClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class AlertSender:
    """Turns findings into alert posts for one node. ``token``: the API token (bearer);
    ``spool``: the JSON-lines file that holds unsent alerts (None: kept in memory only);
    ``transport`` replaces the network (tests)."""

    def __init__(
        self,
        api: str,
        *,
        cluster: str,
        node: str,
        detector: str | None = None,
        token: str | None = None,
        spool: Path | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        refire_seconds: float = 300.0,
        max_spool: int = 10_000,
        clock: Clock | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api.rstrip("/")
        self.cluster, self.node = cluster, node
        self.detector = detector or default_detector()
        self.spool = spool
        self.retries, self.backoff = max(1, retries), backoff
        self.refire_seconds, self.max_spool = refire_seconds, max_spool
        self._clock = clock or _UtcClock()
        self._sleep = sleep
        headers = {"accept": "application/json", "user-agent": f"medic-agent {self.detector}"}
        if token:
            headers["authorization"] = f"Bearer {token.strip()}"
        self._http = httpx.Client(
            base_url=self.api, timeout=timeout, transport=transport, headers=headers
        )
        self._memory: list[dict[str, Any]] = []
        self._firing: dict[str, datetime] = self._load_state()

    # --- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AlertSender:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def firing(self) -> frozenset[str]:
        """Keys this agent has reported firing and not yet resolved."""
        return frozenset(self._firing)

    # --- transitions -----------------------------------------------------------------------
    def observe(self, results: Iterable[CheckResult]) -> list[dict[str, Any]]:
        """The alert bodies these findings call for (and the firing state updated)."""
        now = self._clock.now()
        bodies = []
        for result in results:
            if result.event:
                bodies.append(self._body(result, "firing", now))
            elif result.status is CheckStatus.FAILING:
                last = self._firing.get(result.key)
                if last is None or (now - last).total_seconds() >= self.refire_seconds:
                    self._firing[result.key] = now
                    bodies.append(self._body(result, "firing", now))
            elif result.status is CheckStatus.OK and result.key in self._firing:
                del self._firing[result.key]
                bodies.append(self._body(result, "resolved", now))
        if bodies:
            self._save_state()
        return bodies

    def process(self, results: Iterable[CheckResult]) -> Delivery:
        """:meth:`observe` then :meth:`deliver`."""
        return self.deliver(self.observe(results))

    def _body(self, result: CheckResult, state: str, now: datetime) -> dict[str, Any]:
        evidence = fit_evidence({**result.evidence, "observed_at": now.isoformat()})
        return {
            "cluster": self.cluster,
            "node": self.node,
            "key": result.key,
            "detector": self.detector,
            "summary": result.summary[:200] or result.key,
            "description": result.description[:4000],
            "severity": result.severity.value,
            "evidence": evidence,
            "xid": result.xid,
            "state": state,
        }

    # --- delivery --------------------------------------------------------------------------
    def deliver(self, bodies: Sequence[dict[str, Any]] = ()) -> Delivery:
        """Send the spooled alerts, then ``bodies``, in order; what cannot be sent now is
        spooled (the oldest dropped beyond ``max_spool``)."""
        pending = [*self._read_spool(), *bodies]
        sent = dropped = 0
        for index, body in enumerate(pending):
            try:
                self._post(body)
                sent += 1
            except TransientError as exc:
                left = pending[index:]
                if len(left) > self.max_spool:
                    dropped += len(left) - self.max_spool
                    logger.warning("alert spool full: dropped the %d oldest", dropped)
                    left = left[-self.max_spool :]
                if isinstance(exc, _Unauthenticated):
                    logger.error(
                        "medic API refused the token (%s); %d alert(s) spooled", exc, len(left)
                    )
                else:
                    logger.warning(
                        "medic API unreachable (%s); %d alert(s) spooled", exc, len(left)
                    )
                self._write_spool(left)
                return Delivery(sent, len(left), dropped)
            except NotFoundError as exc:
                if body.get("state") != "resolved":
                    logger.error("alert %s refused: %s", body.get("key"), exc)
                    dropped += 1
            except PermanentError as exc:
                logger.error("alert %s refused; not retried: %s", body.get("key"), exc)
                dropped += 1
        self._write_spool([])
        return Delivery(sent, 0, dropped)

    def _post(self, body: dict[str, Any]) -> None:
        delay = self.backoff
        for attempt in range(1, self.retries + 1):
            try:
                self._send(body)
                return
            except _Unauthenticated:
                raise  # the same token again cannot succeed now
            except TransientError:
                if attempt == self.retries:
                    raise
                self._sleep(delay)
                delay *= 2

    def _send(self, body: dict[str, Any]) -> None:
        where = f"POST {self.api}{_PATH}"
        try:
            response = self._http.post(_PATH, json=body)
        except httpx.TransportError as exc:
            raise TransientError(f"{where}: {type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status < 400:
            return
        detail = f"{where}: {status} {_detail(response)}"
        if status >= 500 or status == 429:
            raise TransientError(detail)
        if status == 401:
            raise _Unauthenticated(f"{detail} (check the agent's API token: --token)")
        if status == 404:
            raise NotFoundError(detail)
        if status == 409:
            raise ConflictError(detail)
        raise PermanentError(detail)

    # --- spool and state files -------------------------------------------------------------
    def _read_spool(self) -> list[dict[str, Any]]:
        if self.spool is None:
            return list(self._memory)
        try:
            text = self.spool.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        entries = []
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                logger.warning("skipping a corrupt line of %s", self.spool)
                continue
            if isinstance(entry, dict):
                entries.append(entry)
        return entries

    def _write_spool(self, entries: list[dict[str, Any]]) -> None:
        if self.spool is None:
            self._memory = list(entries)
            return
        if not entries:
            self.spool.unlink(missing_ok=True)
            return
        text = "".join(json.dumps(e, default=str) + "\n" for e in entries)
        _atomic_write(self.spool, text)

    @property
    def _state_path(self) -> Path | None:
        return None if self.spool is None else self.spool.with_name(self.spool.name + ".state")

    def _load_state(self) -> dict[str, datetime]:
        path = self._state_path
        if path is None:
            return {}
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return {str(k): datetime.fromisoformat(v) for k, v in raw.items()}
        except FileNotFoundError:
            return {}
        except (ValueError, TypeError, AttributeError) as exc:
            logger.warning("ignoring unreadable agent state %s: %s", path, exc)
            return {}

    def _save_state(self) -> None:
        path = self._state_path
        if path is not None:
            text = json.dumps({k: v.isoformat() for k, v in sorted(self._firing.items())})
            _atomic_write(path, text)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return response.text[:300]
