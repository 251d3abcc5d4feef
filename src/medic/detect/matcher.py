"""Signature matching: log lines in, detections out (the first ``Diagnoser``).

:class:`SignatureDiagnoser` compiles the catalogue once and tests every physical line against it
with stdlib ``re``: a combined keyword pre-filter first (most lines are progress or chatter), then
the signatures whose keywords occur, in catalogue order; the first match wins. A line carrying
embedded newlines is split, so no pattern can match across them.

Pure and total: no I/O, no clock reads, no logging, and it never raises on any text. Lines longer
than :data:`MAX_MATCH_CHARS` are matched on their head only (every known signature sits at the
start of its line), which also bounds the work per line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from medic.detect.signatures import CATALOGUE, Signature
from medic.domain.diagnosis import Detection
from medic.domain.ids import SignatureId
from medic.domain.logs import LogLine

__all__ = ["MAX_MATCH_CHARS", "MAX_TEXT_CHARS", "SignatureDiagnoser", "strip_rank_prefix"]

MAX_MATCH_CHARS = 16_384
"""Characters of a line that are matched; the rest is ignored."""
MAX_TEXT_CHARS = 2_000
"""Characters of the matched line kept in ``Detection.text`` (evidence, audit, API)."""

# torchrun/srun prefixes: ``[rank3]:`` (global rank, kept) and ``[default3]:`` (torchrun --tee,
# a local rank, dropped).
_RANK_PREFIX = re.compile(r"\[(?:rank(?P<rank>\d{1,7})|default\d{1,7})\]:[ \t]*")
# str.splitlines() also splits on \x0b, \x0c, \x1c-\x1e, \x85, \u2028, \u2029: all of them end a
# line as far as a pattern is concerned.


@dataclass(frozen=True, slots=True)
class _Compiled:
    signature: Signature
    regex: re.Pattern[str]


def strip_rank_prefix(text: str) -> tuple[str, int | None]:
    """The line without its leading ``[rankN]:`` / ``[defaultN]:`` prefix, and the global rank."""
    match = _RANK_PREFIX.match(text)
    if match is None:
        return text.lstrip(" \t"), None
    rank = match.group("rank")
    return text[match.end() :], int(rank) if rank is not None else None


class SignatureDiagnoser:
    """Matches lines against a signature catalogue (the built-in one by default).

    Raises ``ValueError`` at construction for a broken catalogue (duplicate id, uppercase keyword,
    invalid regex): that is a programming error, not input.
    """

    def __init__(self, signatures: Iterable[Signature] = CATALOGUE) -> None:
        compiled: list[_Compiled] = []
        seen: set[SignatureId] = set()
        keywords: set[str] = set()
        for signature in signatures:
            if signature.id in seen:
                raise ValueError(f"duplicate signature id {signature.id!r}")
            seen.add(signature.id)
            if any(k != k.lower() or not k for k in signature.keywords):
                raise ValueError(f"{signature.id}: keywords must be non-empty and lowercase")
            try:
                regex = re.compile(signature.pattern)
            except re.error as exc:
                raise ValueError(f"{signature.id}: invalid pattern: {exc}") from exc
            compiled.append(_Compiled(signature, regex))
            keywords.update(signature.keywords)
        self._compiled = tuple(compiled)
        self._always = any(not c.signature.keywords for c in compiled)
        # One alternation of every keyword: a line that contains none of them skips the loop.
        alternation = "|".join(re.escape(k) for k in sorted(keywords, key=len, reverse=True))
        self._prefilter = re.compile(alternation or r"(?!)", re.IGNORECASE)

    @property
    def signatures(self) -> tuple[Signature, ...]:
        return tuple(c.signature for c in self._compiled)

    def scan(self, lines: Sequence[LogLine]) -> list[Detection]:
        """Detections for the lines that match a signature, in input order (``attempt`` = -1)."""
        detections: list[Detection] = []
        for line in lines:
            for segment in line.text[:MAX_MATCH_CHARS].splitlines():
                detection = self._match(line, segment)
                if detection is not None:
                    detections.append(detection)
        return detections

    def match_text(self, text: str) -> tuple[Signature, dict[str, str]] | None:
        """The first signature matching one physical line (rank prefix allowed), with its fields."""
        segments = text[:MAX_MATCH_CHARS].splitlines()
        body, _ = strip_rank_prefix(segments[0] if segments else "")
        return self._first(body)

    def _first(self, body: str) -> tuple[Signature, dict[str, str]] | None:
        if not body or (not self._always and self._prefilter.search(body) is None):
            return None
        lowered = body.lower()
        for entry in self._compiled:
            keywords = entry.signature.keywords
            if keywords and not any(k in lowered for k in keywords):
                continue
            match = entry.regex.search(body)
            if match is not None:
                fields = {k: v.strip() for k, v in match.groupdict().items() if v is not None}
                return entry.signature, fields
        return None

    def _match(self, line: LogLine, segment: str) -> Detection | None:
        body, prefix_rank = strip_rank_prefix(segment)
        found = self._first(body)
        if found is None:
            return None
        signature, fields = found
        return Detection(
            job_id=line.job_id,
            attempt=-1,
            signature_id=signature.id,
            domain=signature.domain,
            role=signature.role,
            severity=signature.severity,
            action=signature.action,
            time=line.time,
            node=line.node,
            rank=line.rank if line.rank is not None else prefix_rank,
            implicates_node=signature.implicates_node,
            text=segment[:MAX_TEXT_CHARS],
            fields=fields,
            seq=line.seq,
        )
