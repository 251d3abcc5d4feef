"""JSON Schema for rules that pydantic's own schema leaves out, so that the OpenAPI document states
what the API enforces (a request valid per the document is not refused for a rule it hides).

- :func:`only`: an enum field that takes some of its values (``kind`` of a controller's audit event,
  a finished step's ``status``): the schema lists those values, the model's validator enforces.
- :func:`keys_by_pattern`: a dict whose keys have a pattern. Pydantic writes the pattern under
  ``patternProperties``, which constrains matching keys and lets every other key through; this
  moves it to ``propertyNames`` (every key must match) with the values under
  ``additionalProperties``.
"""

from __future__ import annotations

import enum

from pydantic import WithJsonSchema
from pydantic.config import JsonDict

__all__ = ["keys_by_pattern", "only"]


def only(*values: enum.Enum | int) -> WithJsonSchema:
    """The schema of a field that takes just ``values`` (all strings or all integers)."""
    plain = sorted({v.value if isinstance(v, enum.Enum) else v for v in values})
    kind = "integer" if all(isinstance(v, int) for v in plain) else "string"
    return WithJsonSchema({"type": kind, "enum": plain})


def keys_by_pattern(schema: JsonDict) -> None:
    """``json_schema_extra`` of a dict field whose key type has a ``pattern``."""
    patterns = schema.pop("patternProperties", None)
    if not isinstance(patterns, dict) or len(patterns) != 1:
        raise TypeError(f"expected one key pattern, got {patterns!r}")
    ((pattern, values),) = patterns.items()
    names = schema.get("propertyNames")
    names = dict(names) if isinstance(names, dict) else {}
    names["pattern"] = pattern
    schema["propertyNames"] = names
    schema["additionalProperties"] = values
