"""Tests for ``medic.telemetry.logging``: formats, validation and the context logger."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from medic.errors import ConfigError
from medic.telemetry.logging import ContextLogger, configure_logging


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def test_json_lines_parse_and_carry_context() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    log = ContextLogger(logging.getLogger("medic.test"), cluster="east", job="17")
    log.info("requeued after %s", "xid-79")
    log.bind(node="n3").warning("draining")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in lines] == ["requeued after xid-79", "draining"]
    assert lines[0]["cluster"] == "east"
    assert lines[0]["job"] == "17"
    assert "node" not in lines[0]
    assert lines[1]["node"] == "n3"
    assert lines[1]["level"] == "warning"
    assert lines[1]["logger"] == "medic.test"


def test_json_lines_include_exceptions() -> None:
    stream = io.StringIO()
    configure_logging("debug", "json", stream=stream)
    try:
        raise ValueError("bad")
    except ValueError:
        logging.getLogger("medic.test").exception("failed")
    line = json.loads(stream.getvalue())
    assert "ValueError: bad" in line["exception"]


def test_text_messages_are_prefixed_with_context() -> None:
    stream = io.StringIO()
    configure_logging("info", "text", stream=stream)
    log = ContextLogger(logging.getLogger("medic.test"), cluster="c%1", node="n1")
    log.info("50% done")
    log.info("at %d%%", 50)
    assert stream.getvalue().splitlines()[0].endswith("medic.test: [cluster=c%1 node=n1] 50% done")
    assert stream.getvalue().splitlines()[1].endswith("[cluster=c%1 node=n1] at 50%")


def test_level_filters_records() -> None:
    stream = io.StringIO()
    configure_logging("WARNING", stream=stream)
    logging.getLogger("medic.test").info("quiet")
    assert stream.getvalue() == ""


def test_configuring_twice_does_not_duplicate_lines() -> None:
    stream = io.StringIO()
    configure_logging(stream=stream)
    configure_logging(stream=stream)
    logging.getLogger("medic.test").info("once")
    assert stream.getvalue().count("once") == 1


@pytest.mark.parametrize(("level", "fmt"), [("loud", "text"), ("info", "xml")])
def test_invalid_level_or_format_is_a_config_error(level: str, fmt: str) -> None:
    with pytest.raises(ConfigError, match="expected one of"):
        configure_logging(level, fmt)


def test_records_name_the_real_caller(caplog: pytest.LogCaptureFixture) -> None:
    log = ContextLogger(logging.getLogger("medic.test"), job="1")
    with caplog.at_level(logging.INFO, logger="medic.test"):
        log.info("hello")
    (record,) = caplog.records
    assert record.funcName == "test_records_name_the_real_caller"
    assert record.getMessage() == "[job=1] hello"
    assert record.__dict__["job"] == "1"


def test_bind_rejects_unknown_keys() -> None:
    with pytest.raises(TypeError):
        ContextLogger(logging.getLogger("medic.test")).bind(colour="red")
