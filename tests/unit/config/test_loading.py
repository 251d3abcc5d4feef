"""Tests for ``medic.config.loading``: layers, strict parsing, errors and sources."""

from __future__ import annotations

import logging
import typing
from pathlib import Path

import pytest

from medic.config.loading import load_settings, load_settings_with_sources
from medic.config.settings import Settings
from medic.config.specs import CONSTRAINTS, Bounds, NonEmpty, setting_specs
from medic.domain.cluster import Mode
from medic.errors import ConfigError


def write(tmp_path: Path, text: str, name: str = "medic.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def error_of(**kwargs: typing.Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_settings(**kwargs)
    return info.value


# --- layers and precedence ------------------------------------------------------------------


def test_defaults_when_nothing_is_given() -> None:
    settings, sources = load_settings_with_sources(env={})
    assert settings == Settings()
    assert set(sources.values()) == {"default"}
    assert set(sources) == {spec.dotted for spec in setting_specs()}


def test_file_then_env_then_override_win_in_turn(tmp_path: Path) -> None:
    path = write(tmp_path, "api:\n  port: 1000\n  host: 0.0.0.0\nloop:\n  interval_seconds: 1\n")
    env = {"MEDIC_API_PORT": "2000", "MEDIC_LOOP_INTERVAL_SECONDS": "2"}
    settings, sources = load_settings_with_sources(
        config_path=path, env=env, overrides={"api.port": 3000}
    )
    assert settings.api.port == 3000
    assert settings.loop.interval_seconds == 2.0
    assert settings.api.host == "0.0.0.0"
    assert sources["api.port"] == "override"
    assert sources["loop.interval_seconds"] == "MEDIC_LOOP_INTERVAL_SECONDS"
    assert sources["api.host"] == path
    assert sources["sim.nodes"] == "default"


def test_config_file_is_named_by_medic_config(tmp_path: Path) -> None:
    path = write(tmp_path, "scheduler:\n  cluster: east\n")
    settings, sources = load_settings_with_sources(env={"MEDIC_CONFIG": path})
    assert settings.scheduler.cluster == "east"
    assert sources["scheduler.cluster"] == path


def test_config_path_argument_beats_medic_config(tmp_path: Path) -> None:
    given = write(tmp_path, "scheduler:\n  cluster: given\n", "a.yaml")
    named = write(tmp_path, "scheduler:\n  cluster: named\n", "b.yaml")
    settings = load_settings(config_path=given, env={"MEDIC_CONFIG": named})
    assert settings.scheduler.cluster == "given"


def test_env_none_reads_os_environ_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIC_SIM_NODES", "5")
    assert load_settings().sim.nodes == 5


def test_none_override_means_not_given() -> None:
    settings, sources = load_settings_with_sources(env={}, overrides={"api.port": None})
    assert settings.api.port == 8765
    assert sources["api.port"] == "default"


def test_override_strings_are_parsed_like_env() -> None:
    settings = load_settings(env={}, overrides={"api.port": "9000", "scheduler.mode": "act"})
    assert settings.api.port == 9000
    assert settings.scheduler.mode is Mode.ACT


# --- strict parsing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"), [("8080", 8080), (" 8080 ", 8080), ("+8080", 8080), (8080, 8080)]
)
def test_int_accepts_integers_and_integer_strings(raw: object, expected: int) -> None:
    assert load_settings(env={}, overrides={"api.port": raw}).api.port == expected


@pytest.mark.parametrize(
    ("raw", "shown"),
    [("80.5", '"80.5"'), (80.5, "80.5"), (8080.0, "8080.0"), (True, "true"), ("", '""'),
     ("0x10", '"0x10"'), ("eighty", '"eighty"'), ("1_000", '"1_000"')],
)  # fmt: skip
def test_int_rejects_floats_bools_and_words(raw: object, shown: str) -> None:
    exc = error_of(env={}, overrides={"api.port": raw})
    assert exc.setting == "api.port (from override)"
    assert exc.message == f"expected an integer from 1 to 65535, got {shown}"


def test_int_from_env_error_text() -> None:
    exc = error_of(env={"MEDIC_SIM_NODES": "1.0"})
    assert str(exc) == 'sim.nodes (from MEDIC_SIM_NODES): expected an integer >= 1, got "1.0"'


@pytest.mark.parametrize(
    ("raw", "expected"), [("0.5", 0.5), (".5", 0.5), ("1e-1", 0.1), ("3", 3.0), (2, 2.0)]
)
def test_float_accepts_numbers(raw: object, expected: float) -> None:
    settings = load_settings(env={}, overrides={"loop.interval_seconds": raw})
    assert settings.loop.interval_seconds == expected
    assert isinstance(settings.loop.interval_seconds, float)


@pytest.mark.parametrize("raw", ["fast", "nan", "inf", "-inf", float("inf"), True, "1,5", ""])
def test_float_rejects_words_bools_and_non_finite(raw: object) -> None:
    exc = error_of(env={}, overrides={"loop.interval_seconds": raw})
    assert exc.message.startswith("expected a number > 0, got ")


def test_float_error_text_names_env_var() -> None:
    exc = error_of(env={"MEDIC_LOOP_INTERVAL_SECONDS": "fast"})
    assert str(exc) == (
        "loop.interval_seconds (from MEDIC_LOOP_INTERVAL_SECONDS): "
        'expected a number > 0, got "fast"'
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("FALSE", False), ("Yes", True), ("no", False), ("1", True), ("0", False),
     (True, True), (False, False), (1, True), (0, False)],
)  # fmt: skip
def test_bool_accepts_only_the_listed_spellings(raw: object, expected: bool) -> None:
    settings = load_settings(env={}, overrides={"policy.restart_on_straggler": raw})
    assert settings.policy.restart_on_straggler is expected


@pytest.mark.parametrize("raw", ["on", "off", "y", "maybe", "", 2, 1.0])
def test_bool_rejects_anything_else(raw: object) -> None:
    exc = error_of(env={}, overrides={"policy.restart_on_straggler": raw})
    assert exc.message.startswith("expected a boolean (true/false/yes/no/1/0), got ")


def test_bool_from_env_error_text() -> None:
    exc = error_of(env={"MEDIC_POLICY_RESTART_ON_STRAGGLER": "on"})
    assert str(exc) == (
        "policy.restart_on_straggler (from MEDIC_POLICY_RESTART_ON_STRAGGLER): "
        'expected a boolean (true/false/yes/no/1/0), got "on"'
    )


def test_str_rejects_non_strings_from_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "scheduler:\n  cluster: 2024\n")
    exc = error_of(config_path=path, env={})
    assert exc.setting == f"scheduler.cluster (from {path}:2)"
    assert exc.message == "expected a non-empty string, got 2024"


def test_empty_string_allowed_where_unconstrained() -> None:
    assert load_settings(env={"MEDIC_STORE_URL": ""}).store.url == ""


def test_blank_string_rejected_where_non_empty() -> None:
    exc = error_of(env={"MEDIC_SCHEDULER_CLUSTER": "  "})
    assert exc.message == 'expected a non-empty string, got "  "'


@pytest.mark.parametrize("raw", ["act", "ACT", " Act "])
def test_enum_is_case_insensitive(raw: str) -> None:
    assert load_settings(env={"MEDIC_SCHEDULER_MODE": raw}).scheduler.mode is Mode.ACT


def test_enum_error_lists_allowed_values() -> None:
    exc = error_of(env={"MEDIC_SCHEDULER_MODE": "auto"})
    assert str(exc) == (
        'scheduler.mode (from MEDIC_SCHEDULER_MODE): expected one of observe, act, got "auto"'
    )


@pytest.mark.parametrize(
    ("dotted", "raw", "ok"),
    [("api.port", 1, True), ("api.port", 65535, True), ("api.port", 0, False),
     ("api.port", 65536, False), ("detect.straggler_drop", 0.5, True),
     ("detect.straggler_drop", 0, False), ("detect.straggler_drop", 1, False),
     ("sim.nodes", 1, True), ("sim.nodes", 0, False), ("loop.interval_seconds", 0, False),
     ("loop.error_backoff_seconds", 0, True), ("loop.error_backoff_seconds", -1, False)],
)  # fmt: skip
def test_ranges(dotted: str, raw: object, ok: bool) -> None:
    if ok:
        load_settings(env={}, overrides={dotted: raw})
    else:
        assert error_of(env={}, overrides={dotted: raw}).setting == f"{dotted} (from override)"


def test_range_error_texts() -> None:
    assert error_of(env={}, overrides={"detect.straggler_drop": 1}).message == (
        "expected a number > 0 and < 1, got 1"
    )
    assert error_of(env={}, overrides={"api.port": 0}).message == (
        "expected an integer from 1 to 65535, got 0"
    )


def test_every_constraint_names_a_setting_of_a_fitting_type() -> None:
    specs = {spec.dotted: spec for spec in setting_specs()}
    for dotted, constraint in CONSTRAINTS.items():
        assert dotted in specs, dotted
        wanted = NonEmpty if specs[dotted].type is str else Bounds
        assert isinstance(constraint, wanted), dotted
        assert specs[dotted].type is not bool, dotted


def test_defaults_satisfy_their_constraints() -> None:
    for spec in setting_specs():
        assert spec.constraint is None or spec.constraint.admits(spec.default), spec.dotted


# --- unknown names --------------------------------------------------------------------------


def test_unknown_section_in_file_suggests_close_match(tmp_path: Path) -> None:
    path = write(tmp_path, "loops:\n  interval_seconds: 1\n")
    exc = error_of(config_path=path, env={})
    assert exc.setting == f"loops (from {path}:1)"
    assert exc.message.startswith('unknown section; did you mean "loop"? allowed: store, ')


def test_unknown_key_in_file_suggests_and_lists_allowed(tmp_path: Path) -> None:
    path = write(tmp_path, "loop:\n  interval_seconds: 1\n  intervall: 2\n")
    exc = error_of(config_path=path, env={})
    assert exc.setting == f"loop.intervall (from {path}:3)"
    assert exc.message == (
        'unknown setting; did you mean "interval_seconds"? '
        "allowed: interval_seconds, error_backoff_seconds, workers, skip_quiet_jobs"
    )


def test_unknown_override_suggests_close_match() -> None:
    exc = error_of(env={}, overrides={"api.prot": 1})
    assert exc.setting == "api.prot (from override)"
    assert exc.message == (
        'unknown setting; did you mean "api.port"? allowed: api.host, api.port, api.run_loop,'
        " api.max_body_bytes"
    )


def test_unknown_override_section() -> None:
    exc = error_of(env={}, overrides={"apii.port": 1})
    assert exc.message.startswith("unknown section 'apii'; did you mean \"api.*\"?")


def test_unknown_env_var_is_logged_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="medic.config.loading"):
        settings = load_settings(env={"MEDIC_LOOP_INTERVAL": "1", "MEDIC_LOG_LEVEL": "debug"})
    assert settings == Settings()
    assert len(caplog.records) == 1
    assert "MEDIC_LOOP_INTERVAL" in caplog.text
    assert 'did you mean "MEDIC_LOOP_INTERVAL_SECONDS"' in caplog.text


# --- the YAML file --------------------------------------------------------------------------


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "api:\n  port: 1\n  host: [a\nloop:\n")
    exc = error_of(config_path=path, env={})
    assert exc.setting.startswith(f"{path}:")
    assert int(exc.setting.rsplit(":", 1)[1]) >= 3
    assert exc.message.startswith("invalid YAML: ")


def test_yaml_tab_indent_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, "loop:\n\tinterval_seconds: 1\n")
    assert error_of(config_path=path, env={}).setting == f"{path}:2"


def test_yaml_python_tags_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "api:\n  host: !!python/object/apply:os.getcwd []\n")
    exc = error_of(config_path=path, env={})
    assert exc.setting == f"{path}:2"
    assert "invalid YAML" in exc.message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.yaml")
    exc = error_of(config_path=path, env={})
    assert (exc.setting, exc.message) == (path, "configuration file not found")


def test_missing_file_named_by_env_says_so(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.yaml")
    exc = error_of(env={"MEDIC_CONFIG": path})
    assert exc.message == "configuration file not found (named by MEDIC_CONFIG)"


def test_directory_instead_of_file(tmp_path: Path) -> None:
    exc = error_of(config_path=str(tmp_path), env={})
    assert exc.message.startswith("cannot read configuration file")


@pytest.mark.parametrize("text", ["", "# nothing\n", "loop:\n", "loop: null\n"])
def test_empty_file_or_section_gives_defaults(tmp_path: Path, text: str) -> None:
    assert load_settings(config_path=write(tmp_path, text), env={}) == Settings()


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "- loop\n")
    exc = error_of(config_path=path, env={})
    assert exc.setting == f"top level (from {path}:1)"
    assert exc.message.startswith("expected a mapping of sections: store, scheduler")


def test_section_must_be_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "loop: 3\n")
    exc = error_of(config_path=path, env={})
    assert exc.setting == f"loop (from {path}:1)"
    assert exc.message == (
        "expected a mapping of settings: interval_seconds, error_backoff_seconds, workers, "
        "skip_quiet_jobs"
    )


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "api:\n  port: 1\n  port: 2\n")
    assert error_of(config_path=path, env={}).message == "given twice in the same file"


def test_several_documents_are_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "api:\n  port: 1\n---\napi:\n  port: 2\n")
    assert error_of(config_path=path, env={}).message.startswith("invalid YAML")


def test_yaml_value_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "detect:\n  hang_k: 4\n  straggler_drop: 20%\n")
    exc = error_of(config_path=path, env={})
    assert str(exc) == (
        f'detect.straggler_drop (from {path}:3): expected a number > 0 and < 1, got "20%"'
    )


def test_yaml_env_and_file_references(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("postgresql+psycopg://u:p@db/medic\n", encoding="utf-8")
    path = write(
        tmp_path,
        'store:\n  url: {"$file": "secret"}\napi:\n  host: {"$env": "HOST"}\n',
    )
    settings = load_settings(config_path=path, env={"HOST": "10.0.0.1"})
    assert settings.store.url == "postgresql+psycopg://u:p@db/medic"
    assert settings.api.host == "10.0.0.1"


def test_yaml_env_reference_to_unset_variable(tmp_path: Path) -> None:
    path = write(tmp_path, 'store:\n  url: {"$env": "DB_URL"}\n')
    exc = error_of(config_path=path, env={})
    assert (exc.setting, exc.message) == (
        f"store.url (from {path}:2)",
        "environment variable DB_URL is not set",
    )


def test_yaml_mapping_value_is_a_type_error(tmp_path: Path) -> None:
    path = write(tmp_path, "api:\n  port: {a: 1}\n")
    assert error_of(config_path=path, env={}).message.endswith("got a mapping")


# --- environment aliases and files ----------------------------------------------------------


def test_database_url_alias_sets_store_url() -> None:
    settings, sources = load_settings_with_sources(env={"MEDIC_DATABASE_URL": "sqlite:///x.db"})
    assert settings.store.url == "sqlite:///x.db"
    assert sources["store.url"] == "MEDIC_DATABASE_URL"


def test_alias_and_primary_agreeing_is_fine() -> None:
    env = {"MEDIC_DATABASE_URL": "sqlite://", "MEDIC_STORE_URL": "sqlite://"}
    assert load_settings(env=env).store.url == "sqlite://"


def test_alias_and_primary_disagreeing_is_an_error() -> None:
    exc = error_of(env={"MEDIC_DATABASE_URL": "sqlite://", "MEDIC_STORE_URL": "sqlite:///b"})
    assert exc.setting == "store.url"
    assert "MEDIC_STORE_URL and MEDIC_DATABASE_URL" in exc.message


def test_file_suffix_reads_value_from_file(tmp_path: Path) -> None:
    secret = tmp_path / "db"
    secret.write_text("mysql+pymysql://u:p@db/medic\n", encoding="utf-8")
    settings, sources = load_settings_with_sources(env={"MEDIC_DATABASE_URL_FILE": str(secret)})
    assert settings.store.url == "mysql+pymysql://u:p@db/medic"
    assert sources["store.url"] == "MEDIC_DATABASE_URL_FILE"


def test_file_suffix_with_missing_file(tmp_path: Path) -> None:
    exc = error_of(env={"MEDIC_API_PORT_FILE": str(tmp_path / "nope")})
    assert exc.setting == "api.port (from MEDIC_API_PORT_FILE)"
    assert exc.message.startswith("cannot read ")
