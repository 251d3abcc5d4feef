"""The sender against the real medic API (uvicorn, SQLite): only transitions and re-fires are
sent, events always, the spool holds alerts while the API is down and flushes them in order, and
the firing state survives a restart. Retry and refusal handling use an in-process transport."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from medic.agent.checks import CheckResult, CheckStatus
from medic.agent.sender import MAX_EVIDENCE_BYTES, AlertSender, Delivery, fit_evidence
from medic.domain.diagnosis import Severity
from medic.testing import FakeClock

from .conftest import CLUSTER, Api

NODE = "gpu-node-017"


def _result(
    key: str = "agent:ecc_dbe", status: CheckStatus = CheckStatus.FAILING, **kw: Any
) -> CheckResult:
    values: dict[str, Any] = {
        "summary": f"{key} summary",
        "description": "what it means",
        "severity": Severity.CRITICAL,
        "evidence": {"gpus": [{"gpu": 0, "volatile_dbe": 2}]},
    }
    values.update(kw)
    return CheckResult(key, status, **values)


def _sender(api: Api, tmp_path: Path, **kw: Any) -> AlertSender:
    options: dict[str, Any] = {
        "cluster": CLUSTER,
        "node": NODE,
        "detector": f"agent:{NODE}",
        "token": api.tokens["agent"],
        "spool": tmp_path / "spool.jsonl",
        "clock": api.clock,
        "timeout": 2.0,
        "retries": 2,
        "backoff": 0.01,
    }
    options.update(kw)
    return AlertSender(api.url, **options)


def test_only_transitions_and_refires_are_sent(api: Api, tmp_path: Path) -> None:
    sender = _sender(api, tmp_path, refire_seconds=300)
    failing, ok = _result(), _result(status=CheckStatus.OK)
    deliveries = []
    for advance, results in [
        (0, [ok]),  # healthy: nothing to say
        (0, [failing]),  # starts failing: fire
        (30, [failing]),  # still failing, within the re-fire interval
        (300, [failing]),  # re-fire
        (0, [_result(status=CheckStatus.ERROR)]),  # unknown: neither fires nor resolves
        (0, [_result(status=CheckStatus.NOT_SUPPORTED)]),
        (10, [ok]),  # recovered: resolve
        (10, [ok]),
    ]:
        api.clock.advance(advance)
        deliveries.append(sender.process(results).sent)
    sender.close()

    assert deliveries == [0, 1, 0, 1, 0, 0, 1, 0]
    [alert] = api.alerts()
    assert (alert["key"], alert["state"], alert["count"]) == ("agent:ecc_dbe", "resolved", 2)
    assert (alert["source"], alert["detector"], alert["node"]) == ("agent", f"agent:{NODE}", NODE)
    assert alert["evidence"]["gpus"] == [{"gpu": 0, "volatile_dbe": 2}]
    assert "observed_at" in alert["evidence"]


def test_events_are_sent_every_time(api: Api, tmp_path: Path) -> None:
    sender = _sender(api, tmp_path)
    event = _result("xid:79", event=True, xid=79, evidence={"xid": 79, "line": "NVRM: Xid ..."})
    sender.process([event])
    sender.process([event])
    sender.close()

    [alert] = api.alerts()
    assert (alert["key"], alert["xid"], alert["count"], alert["state"]) == (
        "xid:79",
        79,
        2,
        "firing",
    )
    assert sender.firing == frozenset(), "events are not tracked for resolution"


def test_alerts_wait_in_the_spool_while_the_api_is_down(api: Api, tmp_path: Path) -> None:
    sender = _sender(api, tmp_path)
    spool = tmp_path / "spool.jsonl"
    api.server.stop()

    down1 = sender.process([_result("agent:thermal")])
    down2 = sender.process([_result("agent:fs_full", severity=Severity.WARNING)])
    down3 = sender.process([_result("agent:thermal", status=CheckStatus.OK)])
    spooled = [json.loads(line) for line in spool.read_text().splitlines()]

    assert [d.spooled for d in (down1, down2, down3)] == [1, 2, 3]
    assert [(b["key"], b["state"]) for b in spooled] == [
        ("agent:thermal", "firing"),
        ("agent:fs_full", "firing"),
        ("agent:thermal", "resolved"),
    ]

    api.server.start()
    flushed = sender.deliver()
    sender.close()

    assert flushed == Delivery(sent=3, spooled=0, dropped=0)
    assert not spool.exists()
    states = {a["key"]: a["state"] for a in api.alerts()}
    assert states == {"agent:thermal": "resolved", "agent:fs_full": "firing"}


def test_the_spool_is_bounded(api: Api, tmp_path: Path) -> None:
    sender = _sender(api, tmp_path, max_spool=3)
    api.server.stop()
    deliveries = [sender.process([_result(f"agent:k{i}")]) for i in range(5)]
    sender.close()

    assert deliveries[-1].spooled == 3 and sum(d.dropped for d in deliveries) == 2
    kept = [json.loads(line)["key"] for line in (tmp_path / "spool.jsonl").read_text().splitlines()]
    assert kept == ["agent:k2", "agent:k3", "agent:k4"]


def test_firing_state_survives_a_restart(api: Api, tmp_path: Path) -> None:
    first = _sender(api, tmp_path)
    first.process([_result("agent:ib_port_down")])
    first.close()

    second = _sender(api, tmp_path)
    assert second.firing == frozenset({"agent:ib_port_down"})
    second.process([_result("agent:ib_port_down", status=CheckStatus.OK)])
    second.close()

    assert [a["state"] for a in api.alerts()] == ["resolved"]


def test_large_evidence_is_cut_to_fit(api: Api, tmp_path: Path) -> None:
    gpus = [{"gpu": i, "uuid": f"GPU-{i:040d}", "note": "x" * 200} for i in range(200)]
    sender = _sender(api, tmp_path)
    delivery = sender.process([_result(evidence={"gpus": gpus, "failing_gpus": [3]})])
    sender.close()

    assert delivery.sent == 1
    [alert] = api.alerts()
    evidence = alert["evidence"]
    assert evidence["failing_gpus"] == [3] and evidence["gpus_truncated"] > 0
    assert len(json.dumps(evidence)) <= MAX_EVIDENCE_BYTES


def test_fit_evidence_leaves_small_evidence_alone() -> None:
    small = {"a": 1, "b": [1, 2]}
    assert fit_evidence(small) is small
    huge = fit_evidence({"blob": "y" * 50_000})
    assert huge["truncated"] is True and len(json.dumps(huge)) < MAX_EVIDENCE_BYTES


# --- retries and refusals (in-process transport) ---------------------------------------------
def _scripted(statuses: list[int], seen: list[dict[str, Any]]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        status = statuses.pop(0) if statuses else 201
        return httpx.Response(status, json={"detail": f"status {status}"})

    return httpx.MockTransport(handle)


def test_a_transient_failure_is_retried_with_backoff(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    sleeps: list[float] = []
    sender = AlertSender(
        "http://medic.invalid",
        cluster=CLUSTER,
        node=NODE,
        transport=_scripted([503, 502], seen),
        sleep=sleeps.append,
        retries=3,
        backoff=0.5,
        clock=FakeClock(),
    )
    delivery = sender.process([_result()])

    assert delivery == Delivery(sent=1)
    assert len(seen) == 3 and sleeps == [0.5, 1.0]
    assert seen[0]["detector"].startswith("agent:"), "the default detector is agent:<host>"


def test_retries_are_bounded_then_spooled_in_memory(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    sender = AlertSender(
        "http://medic.invalid",
        cluster=CLUSTER,
        node=NODE,
        transport=_scripted([503] * 3, seen),
        sleep=lambda _: None,
        retries=3,
        clock=FakeClock(),
    )
    assert sender.process([_result()]) == Delivery(spooled=1)
    assert len(seen) == 3
    assert sender.deliver() == Delivery(sent=1)


def test_refused_alerts_are_dropped_not_spooled(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    clock = FakeClock()
    sender = AlertSender(
        "http://medic.invalid",
        cluster=CLUSTER,
        node=NODE,
        spool=tmp_path / "spool.jsonl",
        transport=_scripted([422, 201, 404], seen),
        sleep=lambda _: None,
        clock=clock,
    )
    refused = sender.process([_result("agent:a"), _result("agent:b")])
    gone = sender.process([_result("agent:b", status=CheckStatus.OK)])  # 404: already gone

    assert refused == Delivery(sent=1, dropped=1)
    assert gone == Delivery(sent=0, dropped=0)
    assert not (tmp_path / "spool.jsonl").exists()


def test_the_token_goes_out_as_a_bearer_token(tmp_path: Path) -> None:
    headers: list[str | None] = []

    def handle(request: httpx.Request) -> httpx.Response:
        headers.append(request.headers.get("authorization"))
        return httpx.Response(201, json={})

    for token in ("medic_abc", None):
        sender = AlertSender(
            "http://medic.invalid",
            cluster=CLUSTER,
            node=NODE,
            token=token,
            transport=httpx.MockTransport(handle),
            clock=FakeClock(),
        )
        sender.process([_result()])
        sender.close()

    assert headers == ["Bearer medic_abc", None]


def test_a_refused_token_spools_without_retries_and_a_forbidden_alert_is_dropped(
    tmp_path: Path,
) -> None:
    seen: list[dict[str, Any]] = []
    sleeps: list[float] = []
    sender = AlertSender(
        "http://medic.invalid",
        cluster=CLUSTER,
        node=NODE,
        token="medic_revoked",
        spool=tmp_path / "spool.jsonl",
        transport=_scripted([401, 403, 201], seen),
        sleep=sleeps.append,
        retries=3,
        clock=FakeClock(),
    )

    refused = sender.process([_result("agent:a")])
    assert refused == Delivery(spooled=1) and len(seen) == 1 and sleeps == []
    assert (tmp_path / "spool.jsonl").exists(), "kept until a valid token is configured"

    retried = sender.process([_result("agent:b")])
    sender.close()

    assert retried == Delivery(sent=1, dropped=1), "403: this token may never post that alert"
    assert [body["key"] for body in seen] == ["agent:a", "agent:a", "agent:b"]
    assert not (tmp_path / "spool.jsonl").exists()


def test_unauthenticated_posts_are_refused_by_the_real_api(api: Api, tmp_path: Path) -> None:
    sender = _sender(api, tmp_path, token=None)
    assert sender.process([_result()]) == Delivery(spooled=1)
    sender.close()

    assert api.alerts() == []
    second = _sender(api, tmp_path)  # the same spool, now with a token
    assert second.deliver() == Delivery(sent=1)
    second.close()
    assert [a["key"] for a in api.alerts()] == ["agent:ecc_dbe"]
