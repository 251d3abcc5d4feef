"""Slurm JSON of every supported version -> the v0.0.38 shape: the only place that knows the
version differences (``normalise`` reads the v0.0.38 shape into canonical records).

``squeue --json``, ``sinfo --json``, ``sacct --json`` (and slurmrestd, which shares the
serialiser) print records whose shape follows the *data_parser* plugin version, named in the
payload's ``meta`` (22.05: ``openapi/v0.0.38``; 23.02+: ``meta.plugin.data_parser``)::

    Slurm    data_parser  notable for medic
    22.05    v0.0.38      plain ints and strings; ``sinfo --json`` lists ``nodes``
    23.02    v0.0.39      state lists; numbers as {"set","infinite","number"}; ``sinfo`` entries
    23.11    v0.0.40      exit codes as objects of number objects; more number objects
    24.05    v0.0.41      job_resources restructured (medic does not read it)

A payload passes through a chain of small adapters, one per version, from its own version down
to v0.0.38: each rewrites a record of its version into the shape of the version before, and lists
in its docstring the differences it handles (:func:`chain`; :func:`payload_version` reads the
version). :mod:`medic.schedulers.slurm.normalise` then reads the v0.0.38 shape into the canonical
``CanonicalJob`` / ``CanonicalNode`` dicts. A version newer than the newest adapter starts at the
newest one (and is logged once): the adapters are tolerant, so a renamed field degrades to a
default rather than a crash.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from medic.schedulers.slurm.records import mapping, number, text

__all__ = [
    "ADAPTERS",
    "OLDEST",
    "Adapter",
    "Raw",
    "Version",
    "chain",
    "first_and_rest",
    "payload_errors",
    "payload_version",
    "sinfo_entries",
    "wait_status",
]

logger = logging.getLogger(__name__)

Raw = dict[str, Any]
Version = tuple[int, int, int]
OLDEST: Version = (0, 0, 38)

_BASE_NODE_STATES = {"UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE"}
_RELEASE_TO_PARSER = {(22, 5): (0, 0, 38), (23, 2): (0, 0, 39), (23, 11): (0, 0, 40)}


def _unwrap_numbers(raw: Mapping[str, Any], keys: tuple[str, ...]) -> Raw:
    out = dict(raw)
    for key in keys:
        if isinstance(out.get(key), Mapping):
            out[key] = number(out[key])
    return out


def first_and_rest(states: Any) -> tuple[str, list[str]]:
    """``["RUNNING", "COMPLETING"]`` or ``"RUNNING"`` -> base state and flags, upper case."""
    items = [str(s).upper() for s in (states if isinstance(states, list) else [states]) if s]
    if not items:
        return "UNKNOWN", []
    return items[0], items[1:]


def wait_status(exit_code: Any) -> int | None:
    """v0.0.39 ``{"status", "return_code", "signal"}`` -> a v0.0.38 raw wait status."""
    if not isinstance(exit_code, Mapping):
        return number(exit_code)
    signal = exit_code.get("signal")
    sig = None
    if isinstance(signal, Mapping):
        sig = number(signal.get("id", signal.get("signal_id")))
    status = exit_code.get("status")
    statuses = [str(s).upper() for s in (status if isinstance(status, list) else [status])]
    if sig and "SIGNALED" in statuses:
        return sig & 0x7F
    code = number(exit_code.get("return_code"))
    return None if code is None else (code & 0xFF) << 8


# --- the adapter chain ----------------------------------------------------------------------
class v0_0_41:
    """Slurm 24.05 (data_parser v0.0.41) -> v0.0.40.

    Differences: ``job_resources`` became ``{"nodes": {"count", "list", "allocation": [...]}}``
    instead of a host-list string plus ``allocated_nodes`` (medic reads the top-level ``nodes``
    instead, unchanged). Nodes and accounting records: none that medic reads.
    """

    @staticmethod
    def job(raw: Raw) -> Raw:
        return raw

    @staticmethod
    def node(raw: Raw) -> Raw:
        return raw

    @staticmethod
    def accounting_job(raw: Raw) -> Raw:
        return raw


class v0_0_40:
    """Slurm 23.11 (data_parser v0.0.40) -> v0.0.39.

    Differences: ``exit_code`` / ``derived_exit_code`` carry ``status`` as a list (``["ERROR"]``,
    ``["SIGNALED"]``), ``return_code`` as a number object and ``signal.id`` as a number object;
    node times (``boot_time``, ``last_busy``, ``reason_changed_at``, ``slurmd_start_time``) are
    number objects; accounting ``state.current`` is a list.
    """

    @staticmethod
    def _exit(value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        status = value.get("status")
        signal = value.get("signal")
        return {
            "status": (status[0] if status else "") if isinstance(status, list) else status,
            "return_code": number(value.get("return_code")),
            "signal": {"id": number(signal.get("id"))} if isinstance(signal, Mapping) else None,
        }

    @staticmethod
    def job(raw: Raw) -> Raw:
        out = dict(raw)
        for key in ("exit_code", "derived_exit_code"):
            out[key] = v0_0_40._exit(raw.get(key))
        return out

    @staticmethod
    def node(raw: Raw) -> Raw:
        keys = ("boot_time", "last_busy", "reason_changed_at", "slurmd_start_time")
        return _unwrap_numbers(raw, keys)

    @staticmethod
    def accounting_job(raw: Raw) -> Raw:
        out = v0_0_40.job(raw)
        state = raw.get("state")
        if isinstance(state, Mapping) and isinstance(state.get("current"), list):
            current = state["current"]
            out["state"] = {**state, "current": current[0] if current else "UNKNOWN"}
            out["state_flags"] = [str(s).upper() for s in current[1:]]
        return out


class v0_0_39:
    """Slurm 23.02 (data_parser v0.0.39) -> v0.0.38.

    Differences: ``job_state`` is a list (base state first, then flags such as COMPLETING);
    numbers (``priority``, ``submit_time``/``start_time``/``end_time``, ``node_count``,
    ``array_job_id``/``array_task_id``) are ``{"set","infinite","number"}`` objects; ``exit_code``
    is ``{"status", "return_code"}`` instead of a raw wait status; node ``state`` is an upper-case
    list (``["IDLE", "DRAIN"]``) instead of a lower-case base state plus ``state_flags``.
    (The v0.0.39+ ``sinfo --json`` entry list is unpacked into node records before this chain.)
    """

    _JOB_NUMBERS = (
        "priority",
        "submit_time",
        "start_time",
        "end_time",
        "node_count",
        "array_job_id",
        "array_task_id",
        "restart_cnt",
    )

    @staticmethod
    def job(raw: Raw) -> Raw:
        out = _unwrap_numbers(raw, v0_0_39._JOB_NUMBERS)
        state, flags = first_and_rest(raw.get("job_state"))
        out["job_state"] = state
        out["state_flags"] = flags
        for key in ("exit_code", "derived_exit_code"):
            out[key] = wait_status(raw.get(key))
        return out

    @staticmethod
    def node(raw: Raw) -> Raw:
        states = raw.get("state")
        if isinstance(states, list):
            names = [str(s).upper() for s in states]
            base = next((s for s in names if s in _BASE_NODE_STATES), "UNKNOWN")
            return {**raw, "state": base.lower(), "state_flags": [s for s in names if s != base]}
        return raw

    @staticmethod
    def accounting_job(raw: Raw) -> Raw:
        out = dict(raw)
        out["exit_code"] = wait_status(raw.get("exit_code"))
        return out


Adapter = type[v0_0_39] | type[v0_0_40] | type[v0_0_41]
ADAPTERS: dict[Version, Adapter] = {(0, 0, 41): v0_0_41, (0, 0, 40): v0_0_40, (0, 0, 39): v0_0_39}
"""Newest first; a record of version V passes every adapter whose version is <= V."""

_warned: set[Version] = set()


def chain(version: Version) -> list[Adapter]:
    """The adapters a record of ``version`` passes through, newest first."""
    newest = max(ADAPTERS)
    if version > newest and version not in _warned:
        _warned.add(version)
        logger.warning("Slurm data_parser v%d.%d.%d is newer than medic knows", *version)
    return [ADAPTERS[v] for v in sorted(ADAPTERS, reverse=True) if v <= version]


def _parse_version(value: str) -> Version | None:
    match = re.search(r"v(\d+)\.(\d+)\.(\d+)", value)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def payload_version(payload: Mapping[str, Any]) -> Version:
    """The data_parser version of a payload from its ``meta`` (v0.0.38 when nothing says)."""
    meta = payload.get("meta")
    if not isinstance(meta, Mapping):
        return OLDEST
    plugin = mapping(meta.get("plugin"))
    for key in ("data_parser", "type"):
        found = _parse_version(text(plugin.get(key)))
        if found:
            return max(found, OLDEST)
    release = text(mapping(meta.get("slurm") or meta.get("Slurm")).get("release"))
    match = re.match(r"(\d+)\.(\d+)", release)
    if not match:
        return OLDEST
    slurm = (int(match[1]), int(match[2]))
    newest_known = max(_RELEASE_TO_PARSER)
    default = max(ADAPTERS) if slurm > newest_known else OLDEST
    return _RELEASE_TO_PARSER.get(slurm, default)


def payload_errors(payload: Mapping[str, Any]) -> list[str]:
    """The ``errors`` a command reported inside its JSON (it may still exit 0 with no data)."""
    errors = payload.get("errors")
    if not isinstance(errors, list):
        return []
    out = []
    for error in errors:
        if isinstance(error, Mapping):
            parts = [text(error.get(k)) for k in ("source", "error", "description")]
            out.append(": ".join(p for p in parts if p) or repr(dict(error)))
        else:
            out.append(text(error))
    return out


def sinfo_entries(entries: list[Raw]) -> list[Raw]:
    """v0.0.39+ ``sinfo --json`` rows (one per partition and state, listing their nodes) ->
    one node record each, in the ``/nodes`` shape, partitions merged."""
    nodes: dict[str, Raw] = {}
    for entry in entries:
        group = mapping(entry.get("nodes"))
        partition = mapping(entry.get("partition"))
        node = mapping(entry.get("node"))
        gres = mapping(entry.get("gres"))
        reason = entry.get("reason")
        reason_map = mapping(reason) if isinstance(reason, Mapping) else {"description": reason}
        for name in group.get("nodes") or []:
            record = nodes.setdefault(
                text(name),
                {
                    "name": text(name),
                    "state": node.get("state") or [],
                    "reason": text(reason_map.get("description")),
                    "reason_set_by_user": text(reason_map.get("user")),
                    "gres": text(gres.get("total")),
                    "partitions": [],
                },
            )
            if partition.get("name") and partition["name"] not in record["partitions"]:
                record["partitions"].append(text(partition["name"]))
    return list(nodes.values())
