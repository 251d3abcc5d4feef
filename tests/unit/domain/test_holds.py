"""The hold mark medic writes into a job's admin comment: read back exactly, kept apart from the
text that was there, replaced rather than stacked, and ignored when hand-edited past reading."""

from __future__ import annotations

from datetime import UTC, datetime

from medic.domain.holds import HoldMark, read_mark, with_mark, without_mark
from medic.domain.ids import AdviceId, NodeName

MARK = HoldMark(
    advice_id=AdviceId(12),
    generation=3,
    attempt=1,
    held_at=datetime(2026, 12, 4, 19, 0, 5, tzinfo=UTC),
    excluded=frozenset({NodeName("gpu-b07"), NodeName("gpu-a01")}),
)


def test_a_mark_reads_back_as_written() -> None:
    text = with_mark(None, MARK)
    assert text == (
        "[medic-hold advice=12 generation=3 attempt=1 held_at=1796410805 excluded=gpu-a01,gpu-b07]"
    )
    assert read_mark(text) == MARK
    nothing = HoldMark(AdviceId(1), 1, 0, MARK.held_at, frozenset())
    assert read_mark(with_mark("", nothing)) == nothing


def test_the_admins_text_is_kept_and_given_back() -> None:
    marked = with_mark("ticket INC-42: keep off rack 3", MARK)
    assert marked.startswith("ticket INC-42: keep off rack 3 [medic-hold ")
    assert read_mark(marked) == MARK
    assert without_mark(marked) == "ticket INC-42: keep off rack 3"
    again = with_mark(marked, HoldMark(AdviceId(13), 1, 2, MARK.held_at, frozenset()))
    assert again.count("[medic-hold") == 1 and read_mark(again) is not None
    assert read_mark(again).advice_id == 13  # type: ignore[union-attr]


def test_no_mark_or_a_broken_one_reads_as_none() -> None:
    assert read_mark(None) is None and read_mark("") is None
    assert read_mark("just words [not-medic x=1]") is None
    assert read_mark("[medic-hold advice=12 generation=3 attempt=one held_at=1 excluded=-]") is None
    assert read_mark("[medic-hold advice=12 attempt=1]") is None
    assert without_mark(None) == ""
