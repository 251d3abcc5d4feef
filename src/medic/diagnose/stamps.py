"""The times offline log lines carry, in the formats the tools print (``medic diagnose``).

ISO 8601 (``2026-06-08 09:00:00,123``, ``2026-06-08T09:00:00``) and nvidia-smi's
``2026/06/08 09:00:00.000``; the Hugging Face example scripts' ``06/08/2026 09:00:00``; glog and
PyTorch's c10 logger (``E0608 09:00:00.123``, ``[W608 09:00:00.123456789 ...]``); dora's
``[06-08 09:00:00]``, vLLM's and OpenRLHF's ``INFO 06-08 09:00:00``, Nanotron's ``06/08
09:00:00``; syslog (``Jun  8 09:00:00 host ...``) and ``dmesg -T``
(``[Mon Jun  8 09:00:00 2026]``). Those without a year take the one given (the directory's first
printed date, :func:`year_of`). Times are UTC: a post-mortem's clocks only need to agree with
each other. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

__all__ = ["line_time", "year_of"]

_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES, 1)}
_MON = "(?P<mon>" + "|".join(_MONTH_NAMES) + ")"
_HMS = r"(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d)"
_ISO = re.compile(
    r"(?<!\d)(?P<y>\d{4})(?P<sep>[-/])(?P<mo>\d\d)(?P=sep)(?P<d>\d\d)[T _]"
    + _HMS
    + r"(?:[.,](?P<f>\d{1,9}))?"
)  # 2026-11-27 13:05:00, and nvidia-smi's 2026/11/27 13:05:00.000
_US_DATE = re.compile(
    r"^(?P<mo>\d\d)/(?P<d>\d\d)/(?P<y>\d{4}) " + _HMS + r"(?:[.,](?P<f>\d{1,9}))?"
)  # the Hugging Face example scripts' datefmt, %m/%d/%Y %H:%M:%S
# glog pads the month (E0609); PyTorch's c10 logger does not ([W501 18:49:36.689142079 ...] is
# 1 May, as quoted in vllm-project/vllm-ascend's issues): one or two digits, then the day's two.
_GLOG = re.compile(r"^\[?[IWEF](?P<mo>1[0-2]|0?[1-9])(?P<d>\d\d) " + _HMS + r"\.(?P<f>\d{1,9})")
_MONTH_DAY = re.compile(
    r"^(?:\[|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) )?(?P<mo>\d\d)(?P<sep>[-/])(?P<d>\d\d) "
    + _HMS
    + r"(?:[\] ]|$)"
)  # dora's [%m-%d %H:%M:%S], vLLM's and OpenRLHF's "INFO %m-%d %H:%M:%S", Nanotron's %m/%d
_SYSLOG = re.compile(r"^(?:<\d{1,3}>)?" + _MON + r" {1,2}(?P<d>\d{1,2}) " + _HMS + r" ")
_DMESG_T = re.compile(r"^\[\w{3} " + _MON + r" {1,2}(?P<d>\d{1,2}) " + _HMS + r" (?P<y>\d{4})\]")


def line_time(text: str, year: int) -> datetime | None:
    """The time a line (without its rank prefix) carries, or None; ``year`` for the stamps that
    print none."""
    head = text[:120]
    try:
        if match := _ISO.search(head) or _US_DATE.match(head):
            g = match.groupdict()
            micro = int((g["f"] or "0")[:6].ljust(6, "0"))
            return datetime(int(g["y"]), int(g["mo"]), int(g["d"]), int(g["h"]), int(g["m"]),
                            int(g["s"]), micro, tzinfo=UTC)  # fmt: skip
        if match := _GLOG.match(head) or _MONTH_DAY.match(head):
            g = match.groupdict()
            micro = int((g.get("f") or "0")[:6].ljust(6, "0"))
            return datetime(year, int(g["mo"]), int(g["d"]), int(g["h"]), int(g["m"]),
                            int(g["s"]), micro, tzinfo=UTC)  # fmt: skip
        if match := _SYSLOG.match(head) or _DMESG_T.match(head):
            g = match.groupdict()
            return datetime(int(g.get("y") or year), _MONTHS[g["mon"]], int(g["d"]), int(g["h"]),
                            int(g["m"]), int(g["s"]), tzinfo=UTC)  # fmt: skip
    except ValueError:  # 30 February and friends
        return None
    return None


def year_of(lines: Iterable[str]) -> int | None:
    """The year of the first printed date in ``lines`` (ISO, US date, ``dmesg -T``), or None."""
    for text in lines:
        if match := _ISO.search(text[:120]) or _US_DATE.match(text) or _DMESG_T.match(text):
            return int(match.group("y"))
    return None
