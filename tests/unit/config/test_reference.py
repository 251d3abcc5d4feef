"""Tests for ``medic.config.reference``: every setting documented, the page up to date."""

from __future__ import annotations

from pathlib import Path

from medic.config.reference import field_docstrings, render_reference, undocumented_settings
from medic.config.specs import setting_specs

PAGE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_every_setting_has_a_docstring() -> None:
    assert undocumented_settings() == [], "add an attribute docstring in settings.py"


def test_configuration_page_is_up_to_date() -> None:
    assert PAGE.read_text(encoding="utf-8") == render_reference(), (
        "docs/configuration.md is stale; run: "
        "python -m medic.config.reference > docs/configuration.md"
    )


def test_missing_docstrings_are_reported() -> None:
    everything = [spec.dotted for spec in setting_specs()]
    assert undocumented_settings({}) == everything
    docs = dict(field_docstrings())
    docs["ApiSettings.port"] = "  "
    assert undocumented_settings(docs) == ["api.port"]


def test_docstrings_are_read_from_source() -> None:
    source = 'class A:\n    x: int = 1\n    """First\n    line two."""\n    y: int = 2\n'
    assert field_docstrings(source) == {"A.x": "First\nline two."}


def test_page_has_one_row_per_setting_with_env_var() -> None:
    page = render_reference()
    for spec in setting_specs():
        rows = [line for line in page.splitlines() if line.startswith(f"| `{spec.dotted}` |")]
        assert len(rows) == 1, spec.dotted
        assert f"`{spec.env[0]}`" in rows[0]
        assert rows[0].replace("\\|", "").count("|") == 6, rows[0]
    assert "`MEDIC_DATABASE_URL`" in page
