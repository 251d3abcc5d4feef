"""Job options from the job comment: whose comment it is, and exact error messages."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medic.domain.cluster import Mode
from medic.errors import InputError
from medic.policy.options import JobOptions, parse_job_options


@pytest.mark.parametrize(
    "comment",
    [
        None,
        "",
        "   ",
        "nightly run, owner alice",
        "medic test run",  # mentions medic but is plain text: the owner's
        "medic: act",
        "{not json and not ours}",
        "[1, 2",
        '{"owner": "alice"}',
        '["medic"]',
        '"medic"',
        "42",
        '{"medic": null}',
        "[" * 100_000,  # absurdly nested, not medic's
    ],
)
def test_comments_that_are_not_medics(comment: str | None) -> None:
    assert parse_job_options(comment) == JobOptions()


def test_full_options() -> None:
    options = parse_job_options(
        json.dumps(
            {
                "owner": "alice",
                "medic": {
                    "mode": "observe",
                    "environment": "prod",
                    "max_attempts_without_progress": 3,
                },
            }
        )
    )
    assert options == JobOptions(
        mode=Mode.OBSERVE, environment="prod", max_attempts_without_progress=3
    )
    assert options.to_dict() == {
        "mode": "observe",
        "environment": "prod",
        "max_attempts_without_progress": 3,
    }


def test_partial_options_and_nulls() -> None:
    options = parse_job_options('{"medic": {"mode": "act", "environment": null}}')
    assert options == JobOptions(mode=Mode.ACT)
    assert options.to_dict() == {"mode": "act"}
    assert parse_job_options('{"medic": {}}') == JobOptions()


@pytest.mark.parametrize(
    ("comment", "message"),
    [
        (
            '{"medic": {"mode": "acts"}}',
            'job comment: medic.mode: expected "observe" or "act", got "acts"',
        ),
        (
            '{"medic": {"mode": 1}}',
            'job comment: medic.mode: expected "observe" or "act", got 1',
        ),
        (
            '{"medic": {"mode": "ACT"}}',
            'job comment: medic.mode: expected "observe" or "act", got "ACT"',
        ),
        (
            '{"medic": {"max_attempts_without_progress": 0}}',
            "job comment: medic.max_attempts_without_progress: expected an integer from 1 to 100,"
            " got 0",
        ),
        (
            '{"medic": {"max_attempts_without_progress": "3"}}',
            "job comment: medic.max_attempts_without_progress: expected an integer from 1 to 100,"
            ' got "3"',
        ),
        (
            '{"medic": {"max_attempts_without_progress": true}}',
            "job comment: medic.max_attempts_without_progress: expected an integer from 1 to 100,"
            " got true",
        ),
        (
            '{"medic": {"max_attempts_without_progress": 2.5}}',
            "job comment: medic.max_attempts_without_progress: expected an integer from 1 to 100,"
            " got 2.5",
        ),
        (
            '{"medic": {"max_attempts_without_progress": 101}}',
            "job comment: medic.max_attempts_without_progress: expected an integer from 1 to 100,"
            " got 101",
        ),
        (
            '{"medic": {"environment": 5}}',
            "job comment: medic.environment: expected a string, got 5",
        ),
        (
            '{"medic": {"environment": " "}}',
            'job comment: medic.environment: expected 1 to 64 characters, got " "',
        ),
        (
            '{"medic": {"modes": "act"}}',
            'job comment: medic.modes: unknown option; did you mean "mode"? the options are'
            " environment, max_attempts_without_progress, mode",
        ),
        (
            '{"medic": {"zzz": 1}}',
            "job comment: medic.zzz: unknown option; the options are environment,"
            " max_attempts_without_progress, mode",
        ),
        (
            '{"medic": "act"}',
            'job comment: medic: expected an object such as {"medic": {"mode": "observe"}},'
            ' got "act"',
        ),
        (
            '{"medic": {"mode": "act", "mode": "observe"}}',
            'job comment: the key "mode" appears twice; keep one',
        ),
        (
            '{"medic": {"mode": "act"}, "medic": {}}',
            'job comment: the key "medic" appears twice; keep one',
        ),
        (
            '{"medic": {"mode": "act",}}',
            "job comment: invalid JSON at line 1 column 26: Expecting property name enclosed in"
            ' double quotes; write medic\'s options as JSON, e.g. {"medic": {"mode": "observe"}}',
        ),
        (
            "{medic: {mode: act}}",
            "job comment: invalid JSON at line 1 column 2: Expecting property name enclosed in"
            ' double quotes; write medic\'s options as JSON, e.g. {"medic": {"mode": "observe"}}',
        ),
    ],
)
def test_invalid_medic_options(comment: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_job_options(comment)
    assert str(caught.value) == message
    assert caught.value.where == "job comment"


def test_long_values_are_shortened_in_messages() -> None:
    with pytest.raises(InputError) as caught:
        parse_job_options(json.dumps({"medic": {"environment": "x" * 500}}))
    assert len(str(caught.value)) < 200 and "..." in str(caught.value)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(), st.text().map(lambda t: '{"medic": ' + t)))
def test_parse_raises_only_input_error(comment: str) -> None:
    with contextlib.suppress(InputError):
        parse_job_options(comment)
