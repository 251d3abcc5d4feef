"""A job comment holding an integer longer than Python converts (4,300 digits) is an invalid
option like any other, not a plain ValueError on every loop pass."""

from __future__ import annotations

import json

import pytest

from medic.domain.cluster import Mode
from medic.errors import InputError
from medic.policy.options import JobOptions, parse_job_options

HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("comment", "path"),
    [
        (f'{{"medic": {{"max_attempts_without_progress": {HUGE}}}}}', "medic.max_attempts"),
        (f'{{"medic": {{"mode": -{HUGE}}}}}', "medic.mode"),
        (f'{{"medic": {{"environment": [1, {HUGE}]}}}}', "medic.environment[1]"),
        (f'{{"medic": {HUGE}}}', "medic:"),
    ],
)
def test_an_over_long_integer_in_medic_options_names_the_option(comment: str, path: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_job_options(comment)
    assert caught.value.where == "job comment"
    assert path in caught.value.message
    assert "5000 digits" in caught.value.message
    if path == "medic.max_attempts":
        assert "expected an integer from 1 to 100" in caught.value.message


def test_an_over_long_integer_outside_medic_options_is_the_owners() -> None:
    assert parse_job_options(json.dumps({"owner": 1}).replace("1", HUGE)) == JobOptions()
    comment = f'{{"ticket": {HUGE}, "medic": {{"mode": "act"}}}}'
    assert parse_job_options(comment) == JobOptions(mode=Mode.ACT)


def test_other_comments_read_as_before() -> None:
    assert parse_job_options(None) == JobOptions()
    assert parse_job_options("plain text") == JobOptions()
    assert parse_job_options('{"medic": {"max_attempts_without_progress": 3}}') == JobOptions(
        max_attempts_without_progress=3
    )
    with pytest.raises(InputError, match=r"medic\.mode"):
        parse_job_options('{"medic": {"mode": "acts"}}')


def test_broken_json_after_the_long_integer_is_still_an_invalid_comment() -> None:
    with pytest.raises(InputError, match="invalid JSON"):
        parse_job_options(f'{{"medic": {{"mode": "act"}}, "x": {HUGE}, ')
    assert parse_job_options(f'{{"other": {HUGE}, ') == JobOptions(), "not medic's"
