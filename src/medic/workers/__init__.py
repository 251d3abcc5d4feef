"""Shard workers: one process per shard of job recovery (``loop.workers`` above 1).

:class:`ProcessShardPool` is the :class:`~medic.control.shards.ShardPool` the composition root
gives the loop. Each worker is a process started with ``spawn`` (never ``fork``: ``medic serve``
runs threads) that builds its own store connection (same database), signature matcher and
:class:`~medic.control.evaluation.JobEvaluator`, then answers the loop's requests over a pipe.
A request goes to every worker before any reply is read, so the shards work in parallel.

A worker that dies (killed, out of memory) is started again at the next request: its watches
resume from the store, as after a restart of medic; the lines of the pass it died in are not
matched again (the pass fails and says so). A worker that answers with an error fails the pass
the same way. In-memory SQLite cannot be shared between processes, so workers refuse it.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import signal
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from medic.config.settings import Settings
from medic.control.evaluation import JobEvaluator
from medic.control.external import SecondOpinion
from medic.control.shards import (
    EvaluateRequest,
    ObserveRequest,
    RecordingMetrics,
    ShardClock,
    ShardReply,
    ShardWork,
)
from medic.detect.catalogue import site_catalogue
from medic.detect.matcher import SignatureDiagnoser
from medic.domain.ids import ClusterName
from medic.errors import ConfigError, TransientError
from medic.external.attribution_http import HttpAttributionProvider
from medic.ports import AuditLog, Clock
from medic.store import create_store, default_database_url

__all__ = ["REPLY_TIMEOUT_SECONDS", "ProcessShardPool", "second_opinion"]

logger = logging.getLogger(__name__)

_STOP = "stop"
REPLY_TIMEOUT_SECONDS = 120.0
"""A worker silent this long is taken for hung: killed and started again (the pass fails)."""


def second_opinion(settings: Settings, audit: AuditLog, clock: Clock) -> SecondOpinion | None:
    """The external attribution service, when one is configured (``attribution.url``)."""
    if not settings.attribution.url:
        return None
    provider = HttpAttributionProvider(
        settings.attribution.url,
        timeout_s=settings.attribution.timeout_seconds,
        name=settings.attribution.name,
    )
    return SecondOpinion(provider, audit=audit, clock=clock)


@dataclass(slots=True)
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    served: bool = False


class ProcessShardPool:
    """``loop.workers`` processes, one shard each."""

    def __init__(self, settings: Settings) -> None:
        url = settings.store.url or default_database_url()
        if url.startswith("sqlite") and url.split("://", 1)[-1] in ("", "/", "/:memory:"):
            raise ConfigError(
                "loop.workers",
                "workers need a database they can share; an in-memory SQLite database cannot "
                "be (use a file, PostgreSQL or MySQL, or loop.workers: 1)",
            )
        self._settings = settings
        self._context = multiprocessing.get_context("spawn")
        self._workers = [self._start(i) for i in range(settings.loop.workers)]

    @property
    def shards(self) -> int:
        return len(self._workers)

    def fresh(self, shard: int) -> bool:
        return not self._workers[shard].served

    def observe(self, requests: Sequence[ObserveRequest]) -> list[ShardReply]:
        return self._ask("observe", requests)

    def evaluate(self, requests: Sequence[EvaluateRequest]) -> list[ShardReply]:
        return self._ask("evaluate", requests)

    def close(self) -> None:
        for worker in self._workers:
            with contextlib.suppress(OSError, ValueError):  # gone already
                worker.conn.send((_STOP, None))
        for worker in self._workers:
            worker.process.join(5.0)
            if worker.process.is_alive():
                worker.process.kill()
            worker.conn.close()

    # --- internals -----------------------------------------------------------------------
    def _start(self, index: int) -> _Worker:
        ours, theirs = self._context.Pipe()
        process = self._context.Process(
            target=_main,
            args=(self._settings, index, theirs),
            name=f"medic-shard-{index}",
            daemon=True,
        )
        process.start()
        theirs.close()
        return _Worker(process, ours)

    def _ask(self, kind: str, requests: Sequence[object]) -> list[ShardReply]:
        failures: dict[int, str] = {}
        for i, request in enumerate(requests):  # every worker gets its request first ...
            worker = self._workers[i]
            try:
                if not worker.process.is_alive():
                    raise OSError(f"exit code {worker.process.exitcode}")
                worker.conn.send((kind, request))
            except Exception as exc:  # a dead pipe, or a request that would not pickle
                failures[i] = f"its worker was down ({exc}); started again"
                self._restart(i, repr(exc))
        replies: dict[int, ShardReply] = {}
        for i in range(len(requests)):  # ... then the replies are read: the shards work at once
            if i in failures:
                continue
            worker = self._workers[i]
            try:
                if not worker.conn.poll(REPLY_TIMEOUT_SECONDS):
                    raise TimeoutError(f"no reply within {REPLY_TIMEOUT_SECONDS:g} s")
                status, body = worker.conn.recv()
            except Exception as exc:  # died (EOF), hung (timeout), or a reply that would not load
                failures[i] = f"its worker died or hung ({exc!r}); started again"
                self._restart(i, repr(exc))
                continue
            worker.served = True
            if status == "ok":
                replies[i] = body
            else:
                failures[i] = str(body)
        if failures:
            raise TransientError(
                "; ".join(f"shard {i}: {why}" for i, why in sorted(failures.items()))
            )
        return [replies[i] for i in range(len(requests))]

    def _restart(self, index: int, why: str) -> None:
        logger.warning("shard worker %d is gone (%s): starting it again", index, why)
        old = self._workers[index]
        if old.process.is_alive():
            old.process.kill()
        old.conn.close()
        self._workers[index] = self._start(index)


def _main(settings: Settings, index: int, conn: multiprocessing.connection.Connection) -> None:
    """A worker process: build the shard's collaborators, then answer requests until told to
    stop (or the pipe closes)."""
    # Ctrl-C or a service manager's SIGTERM reaches the whole process group: the loop's process
    # stops first and then its workers (a stop message, or the pipe closing if it died).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    store = create_store(settings.store.url or default_database_url())
    clock = ShardClock()
    metrics = RecordingMetrics()
    counts: defaultdict[str, int] = defaultdict(int)
    holder: dict[str, ShardWork] = {}
    evaluator = JobEvaluator(
        cluster=ClusterName(settings.scheduler.cluster),
        store=store,
        modes=store,
        clock=clock,
        metrics=metrics,
        settings=settings,
        counts=counts,
        placement_exclusions=lambda: holder["work"].placement,
        second_opinion=second_opinion(settings, store, clock),
    )
    work = holder["work"] = ShardWork(
        evaluator=evaluator,
        diagnoser=SignatureDiagnoser(site_catalogue(settings.detect.extra_signature_files)),
        clock=clock,
        metrics=metrics,
        counts=counts,
    )
    handlers: dict[str, Any] = {"observe": work.observe, "evaluate": work.evaluate}
    try:
        while True:
            try:
                kind, request = conn.recv()
            except EOFError:
                return
            if kind == _STOP:
                return
            try:
                conn.send(("ok", handlers[kind](request)))
            except Exception as exc:  # the pass fails; the worker lives on
                logger.exception("shard %d: %s failed", index, kind)
                conn.send(("error", f"{kind} failed: {exc!r}"))
    finally:
        store.close()
