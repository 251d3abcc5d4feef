"""The remote controller's durable local state: the jobs medic holds and the watchdog's outbox.

A small JSON file, rewritten atomically (temporary file, fsync, rename) on every change and locked
so that one controller process owns it. See :mod:`medic.control.watchdog` for how it is used.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from medic.domain.ids import AdviceId, ClusterName, JobId, NodeName
from medic.errors import (
    ConfigError,
    TransientError,
)

__all__ = ["Hold", "Journal"]

_VERSION = 1
_HISTORY = 500
"""Watchdog actions kept in the journal (the audit trail has them all)."""


@dataclass(frozen=True, slots=True)
class Hold:
    """A job medic is about to hold (or holds), as journalled before the requeue-hold."""

    job_id: JobId
    cluster: ClusterName
    advice_id: AdviceId
    generation: int
    attempt: int
    original_excluded: frozenset[NodeName]
    held_at: datetime
    since: datetime
    """Start of the current wait: the hold, or the latest new generation of advice seen since."""
    releasing: bool = False
    """The watchdog announced its release (audit queued) and may have issued it."""
    observed: bool = False
    """Observe mode recorded what it would do (once per hold)."""

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "original_excluded": sorted(self.original_excluded),
            "held_at": self.held_at.isoformat(),
            "since": self.since.isoformat(),
        }

    @classmethod
    def of_json(cls, data: dict[str, Any]) -> Hold:
        return cls(
            **{
                **data,
                "original_excluded": frozenset(data["original_excluded"]),
                "held_at": datetime.fromisoformat(data["held_at"]),
                "since": datetime.fromisoformat(data["since"]),
            }
        )


class Journal:
    """The controller process's durable local state (see the module docstring).

    Use :meth:`open` (a context manager): it takes an exclusive lock next to the file so that a
    second controller on the same state directory fails at once instead of racing this one.
    Raises ``TransientError`` when the file cannot be written (the caller must not act then).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._holds: dict[JobId, Hold] = {}
        self._outbox: list[dict[str, Any]] = []
        self._history: list[dict[str, Any]] = []
        self._load()

    @classmethod
    @contextlib.contextmanager
    def open(cls, path: Path) -> Iterator[Journal]:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(path.with_name(path.name + ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConfigError(
                    "controller.state_dir",
                    f"{path} is in use by another medic controller; one controller per cluster",
                ) from None
            yield cls(path)
        finally:
            os.close(lock)  # closing the descriptor releases the lock

    # --- reads ----------------------------------------------------------------------------
    def holds(self) -> list[Hold]:
        return list(self._holds.values())

    def hold(self, job_id: JobId) -> Hold | None:
        return self._holds.get(job_id)

    def is_released(self, advice_id: AdviceId, generation: int) -> bool:
        """True while the watchdog's report that it released the job of this advice generation
        waits for delivery (once delivered, the advice is no longer in the feed)."""
        return any(
            item["type"] == "reconciliation"
            and (item["advice_id"], item["generation"]) == (advice_id, generation)
            for item in self._outbox
        )

    def outbox(self) -> list[dict[str, Any]]:
        return list(self._outbox)

    # --- writes ---------------------------------------------------------------------------
    def commit(
        self,
        *,
        put: Hold | None = None,
        drop: JobId | None = None,
        outbox: Iterable[dict[str, Any]] = (),
        history: Iterable[dict[str, Any]] = (),
    ) -> None:
        """Apply one change and write the file before returning (all of it or none of it)."""
        before = (dict(self._holds), list(self._outbox), list(self._history))
        if drop is not None:
            self._holds.pop(drop, None)
        if put is not None:
            self._holds[put.job_id] = put
        self._outbox.extend(outbox)
        self._history = [*self._history, *history][-_HISTORY:]
        try:
            self._save()
        except TransientError:
            self._holds, self._outbox, self._history = before
            raise

    def delivered(self) -> None:
        """Drop the first outbox item: sent, or refused for good."""
        self._outbox = self._outbox[1:]
        self._save()

    def _save(self) -> None:
        data = {
            "version": _VERSION,
            "holds": [h.to_json() for h in self._holds.values()],
            "outbox": self._outbox,
            "history": self._history,
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with tmp.open("w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            # The rename itself must reach the disk, or a crash could bring the old file back.
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            raise TransientError(f"cannot write the controller journal {self.path}: {exc}") from exc

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        try:
            data = json.loads(text)
            if data.get("version") != _VERSION:
                raise ValueError(f"unknown version {data.get('version')!r}")
            self._holds = {h.job_id: h for h in map(Hold.of_json, data["holds"])}
            self._outbox = list(data["outbox"])
            self._history = list(data["history"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Refuse to start rather than forget which jobs wait for a release.
            raise ConfigError(
                "controller.state_dir", f"{self.path} is not a valid controller journal: {exc}"
            ) from exc
