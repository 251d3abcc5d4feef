"""Text every database and every JSON reader can hold: NUL and lone surrogates become U+FFFD.

Two kinds of character break medic far from where they came in. PostgreSQL refuses NUL (U+0000)
in any text, so one log line or API body holding it fails the whole write (a detection lost, a
loop pass aborted). A lone UTF-16 surrogate (``"\\udfff"`` in JSON: Python decodes it, UTF-8
cannot encode it) is stored as a JSON escape and then fails every read that answers it (a 500 on
each page that lists it). medic replaces both by U+FFFD, the replacement character it already
shows for bytes it cannot decode in logs, wherever such text enters: the API's JSON bodies
(``medic.api.sanitize``) and every value written to or read from the store (``medic.store``).

A surrogate *pair* written as two JSON escapes (``"\\ud83d\\ude00"``, one emoji) is one valid
character and is kept. Pure functions, no I/O.
"""

from __future__ import annotations

import re

__all__ = ["REPLACEMENT", "clean_json", "clean_json_bytes", "clean_text", "has_unstorable"]

REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# ``\u0000``, a surrogate pair, or a lone surrogate, each escaped in JSON text and preceded by an
# even number of backslashes (an odd number escapes the first backslash: it is literal text).
_ESCAPE = (
    r"(?<!\\)((?:\\\\)*)\\u("
    r"0000|[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|[dD][89a-fA-F][0-9a-fA-F]{2})"
)
_JSON_ESCAPE = re.compile(_ESCAPE)
_JSON_ESCAPE_BYTES = re.compile(_ESCAPE.encode("ascii"))
_PAIR = len("d83d\\ude00")


def has_unstorable(text: str) -> bool:
    """Whether ``text`` holds a NUL or a surrogate (which no UTF-8 text can)."""
    if text.isascii():
        return "\x00" in text
    return _UNSTORABLE.search(text) is not None


def clean_text(text: str) -> str:
    """``text`` with each NUL and each surrogate replaced by U+FFFD."""
    return _UNSTORABLE.sub(REPLACEMENT, text) if has_unstorable(text) else text


def _escape(match: re.Match[str]) -> str:
    return match[0] if len(match[2]) == _PAIR else match[1] + "\\ufffd"


def _escape_bytes(match: re.Match[bytes]) -> bytes:
    return match[0] if len(match[2]) == _PAIR else match[1] + b"\\ufffd"


def clean_json(text: str) -> str:
    """JSON text whose strings hold no NUL or lone surrogate, escaped or not: each becomes
    U+FFFD (as the escape ``\\ufffd``, which keeps the text's length)."""
    if "\\u" in text:
        text = _JSON_ESCAPE.sub(_escape, text)
    return clean_text(text)


def clean_json_bytes(body: bytes) -> bytes:
    """:func:`clean_json` for a UTF-8 JSON body, on its bytes: only escapes are rewritten (raw
    NUL is not valid JSON, a raw surrogate not valid UTF-8: the JSON parser refuses both)."""
    return _JSON_ESCAPE_BYTES.sub(_escape_bytes, body) if b"\\u" in body else body
