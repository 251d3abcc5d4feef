"""HTTP client of the medic advice API, for a controller that runs outside the medic process.

It is the remote controller's :class:`~medic.ports.ControllerLedger` (the same step ledger and
audit trail as the embedded controller, kept by the server) and its advice feed. HTTP outcomes
become medic errors at this boundary, so the controller decides without looking at status codes:

* no answer (refused, timed out, reset) or a 5xx: ``TransientError`` (try again next poll);
* 401/403 (the token is missing, unknown, revoked, or not a controller's): ``TransientError`` as
  well, so the fail-open watchdog keeps running and keeps its records queued until the token is
  fixed, instead of dropping them as undeliverable;
* 404: ``NotFoundError`` (``None`` from the ``get_*`` reads); 409: ``ConflictError``;
* any other 4xx: ``PermanentError`` carrying the problem+json ``detail``.

Every request carries ``Authorization: Bearer <token>`` (a ``controller`` role token; ``medic
controller --token`` or ``MEDIC_TOKEN``).

Times passed in (``now``, ``started_at``, an event's ``time``) are not sent: the server stamps
its own, so one skewed controller clock cannot reorder the audit trail.
"""

from __future__ import annotations

from datetime import datetime
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from medic.domain.actions import ActionKind, ActionRecord, ActionStatus
from medic.domain.advice import Advice, AdviceAction, Reconciliation
from medic.domain.audit import AuditEvent
from medic.domain.cluster import Mode
from medic.domain.ids import AdviceId, ClusterName, JobId, NodeName
from medic.domain.leases import Fence, Lease
from medic.errors import ConflictError, NotFoundError, PermanentError, TransientError

__all__ = ["MedicApiClient"]

_API = "/api/v1"


class MedicApiClient:
    """The advice API at ``base_url`` (e.g. ``http://medic:8765``); ``timeout`` in seconds per
    request; ``token``: the API token sent as a bearer token. ``transport`` replaces the network
    (tests)."""

    def __init__(
        self,
        base_url: str,
        timeout: float = 10.0,
        *,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"accept": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token.strip()}"
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            headers=headers,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MedicApiClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MedicApiClient({self.base_url!r})"

    # --- advice feed -----------------------------------------------------------------------
    def list_active_advice(self, cluster: ClusterName) -> list[Advice]:
        """The cluster's advice that a controller still has to reconcile."""
        body = self._call("GET", "/advice", params={"active": "true", "cluster": cluster})
        if not isinstance(body, list):
            raise TransientError(f"{self.base_url}: the advice feed is not a list")
        return [_advice(item) for item in body]

    def get_advice(self, advice_id: AdviceId) -> Advice | None:
        try:
            return _advice(self._call("GET", f"/advice/{int(advice_id)}"))
        except NotFoundError:
            return None

    def report_reconciliation(
        self,
        advice_id: AdviceId,
        observed_generation: int,
        status: Reconciliation,
        reason: str,
        now: datetime,
    ) -> Advice:
        body = {"observed_generation": observed_generation, "status": status.value}
        body["reason"] = reason[:1000] or "-"
        return _advice(self._call("PUT", f"/advice/{int(advice_id)}/reconciliation", json=body))

    # --- step ledger -----------------------------------------------------------------------
    def get_action(self, key: str) -> ActionRecord | None:
        try:
            return _action(self._call("GET", f"/actions/{_key(key)}"))
        except NotFoundError:
            return None

    def begin_action(
        self, record: ActionRecord, fence: Fence | None = None, event: AuditEvent | None = None
    ) -> bool:
        body: dict[str, Any] = {
            "key": record.key,
            "cluster": record.cluster,
            "kind": record.kind.value,
            "job_id": record.job_id,
            "node": record.node,
            "advice_id": record.advice_id,
        }
        if fence is not None:
            body["fence"] = {"lease": fence.lease, "holder": fence.holder, "token": fence.token}
        response = self._send("POST", "/actions", json=body)
        begun = response.status_code == 201
        if begun and event is not None:  # over HTTP: right after it, not in its transaction
            self.append_audit(event)
        return begun

    def finish_action(
        self,
        key: str,
        status: ActionStatus,
        now: datetime,
        error: str | None = None,
        begun_by: tuple[str, int] | None = None,
        event: AuditEvent | None = None,
    ) -> None:
        body: dict[str, Any] = {"status": status.value}
        body["error"] = None if error is None else error[:2000]
        if begun_by is not None:
            body["begun_by"] = {"holder": begun_by[0], "token": begun_by[1]}
        self._call("PUT", f"/actions/{_key(key)}", json=body)
        if event is not None:
            self.append_audit(event)

    # --- leases ----------------------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, now: datetime, ttl_seconds: float) -> Lease:
        body = {"holder": holder, "ttl_seconds": ttl_seconds}
        return _lease(self._call("PUT", f"/leases/{_key(name)}", json=body))

    def release_lease(self, name: str, holder: str, now: datetime) -> bool:
        try:
            self._send("DELETE", f"/leases/{_key(name)}", params={"holder": holder})
        except NotFoundError:
            return False
        return True

    def list_leases(self) -> list[Lease]:
        body = self._call("GET", "/leases")
        if not isinstance(body, list):
            raise TransientError(f"{self.base_url}: the lease list is not a list")
        return [_lease(item) for item in body]

    # --- audit -----------------------------------------------------------------------------
    def append_audit(self, event: AuditEvent) -> int:
        body = {
            "actor": event.actor,
            "kind": event.kind.value,
            "subject_type": event.subject_type.value,
            "subject_id": event.subject_id,
            "cluster": event.cluster,
            "action": event.action,
            "mode": event.mode.value if event.mode else None,
            "payload": event.payload,
        }
        created = self._call("POST", "/audit", json=body)
        try:
            return int(created["id"])
        except (KeyError, TypeError, ValueError) as exc:
            raise TransientError(f"{self.base_url}: unexpected audit response: {exc}") from exc

    # --- HTTP ------------------------------------------------------------------------------
    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._send(method, path, **kwargs)
        try:
            return response.json()
        except ValueError as exc:
            raise TransientError(f"{method} {path}: response is not JSON") from exc

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        where = f"{method} {self.base_url}{_API}{path}"
        try:
            response = self._http.request(method, _API + path, **kwargs)
        except httpx.TransportError as exc:
            raise TransientError(f"{where}: {type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status < 400:
            return response
        detail = f"{where}: {status} {_detail(response)}"
        if status >= 500:
            retry = response.headers.get("retry-after")
            after = float(retry) if retry and retry.isdigit() else None
            raise TransientError(detail, retry_after=after)
        if status in (401, 403):
            raise TransientError(f"{detail} (check the controller's API token: --token)")
        if status == 404:
            raise NotFoundError(detail)
        if status == 409:
            raise ConflictError(detail)
        raise PermanentError(detail)


def _key(key: str) -> str:
    # Keys contain slashes (advice/12/g1/release): the route takes them as a path.
    return quote(key, safe="/")


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])
    return response.text[:300]


def _advice(data: Any) -> Advice:
    try:
        return Advice(
            id=AdviceId(int(data["id"])),
            cluster=ClusterName(data["cluster"]),
            job_id=JobId(data["job_id"]),
            generation=int(data["generation"]),
            attempt=int(data["attempt"]),
            action=AdviceAction(data["action"]),
            exclude_nodes=frozenset(NodeName(n) for n in data["exclude_nodes"]),
            reason=data["reason"],
            mode=Mode(data["mode"]),
            rule=data["rule"],
            status=Reconciliation(data["status"]),
            observed_generation=int(data["observed_generation"]),
            created_at=datetime.fromisoformat(data["created_at"]),
            updated_at=datetime.fromisoformat(data["updated_at"]),
            repair_id=None if data.get("repair_id") is None else int(data["repair_id"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise TransientError(f"unexpected advice from the medic API: {exc!r}") from exc


def _action(data: Any) -> ActionRecord:
    try:
        finished = data["finished_at"]
        return ActionRecord(
            key=data["key"],
            cluster=ClusterName(data["cluster"]),
            kind=ActionKind(data["kind"]),
            status=ActionStatus(data["status"]),
            job_id=None if data["job_id"] is None else JobId(data["job_id"]),
            node=None if data["node"] is None else NodeName(data["node"]),
            advice_id=None if data["advice_id"] is None else AdviceId(int(data["advice_id"])),
            started_at=datetime.fromisoformat(data["started_at"]),
            finished_at=None if finished is None else datetime.fromisoformat(finished),
            error=data["error"],
            holder=data.get("holder"),
            token=data.get("token"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise TransientError(f"unexpected action record from the medic API: {exc!r}") from exc


def _lease(data: Any) -> Lease:
    try:
        return Lease(
            name=str(data["name"]),
            holder=str(data["holder"]),
            token=int(data["token"]),
            acquired_at=datetime.fromisoformat(data["acquired_at"]),
            renewed_at=datetime.fromisoformat(data["renewed_at"]),
            expires_at=datetime.fromisoformat(data["expires_at"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise TransientError(f"unexpected lease from the medic API: {exc!r}") from exc
