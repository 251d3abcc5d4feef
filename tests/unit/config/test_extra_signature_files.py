"""``detect.extra_signature_files``: how the setting is read from each layer, and that medic
refuses a bad site file at start-up with exit code 2 and one line naming the file and signature."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from medic.config.loading import load_settings, load_settings_with_sources
from medic.errors import ConfigError
from medic.wiring import build

SITE = (Path(__file__).parents[2] / "assets" / "site_signatures.yaml").read_text(encoding="utf-8")


def test_default_is_no_site_file() -> None:
    assert load_settings(env={}).detect.extra_signature_files == ()


def test_a_yaml_list_in_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "medic.yaml"
    config.write_text(
        "detect:\n  extra_signature_files:\n    - /etc/medic/site.yaml\n    - /etc/medic/more/\n",
        encoding="utf-8",
    )
    settings, sources = load_settings_with_sources(config_path=str(config), env={})
    assert settings.detect.extra_signature_files == ("/etc/medic/site.yaml", "/etc/medic/more/")
    assert sources["detect.extra_signature_files"] == str(config)


def test_colon_separated_paths_in_the_environment() -> None:
    env = {"MEDIC_DETECT_EXTRA_SIGNATURE_FILES": "/etc/medic/site.yaml: /etc/medic/more/ :"}
    settings = load_settings(env=env)
    assert settings.detect.extra_signature_files == ("/etc/medic/site.yaml", "/etc/medic/more/")


@pytest.mark.parametrize("raw", [[1], [""], {"a": 1}, 3])
def test_anything_but_paths_is_refused(raw: object) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(env={}, overrides={"detect.extra_signature_files": raw})
    assert str(raised.value).startswith(
        "detect.extra_signature_files (from override): expected a list of paths"
    )


def test_build_adds_the_site_signatures(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(SITE, encoding="utf-8")
    settings = load_settings(
        env={},
        overrides={
            "store.url": f"sqlite:///{tmp_path / 'medic.db'}",
            "detect.extra_signature_files": [str(site)],
        },
    )
    services = build(settings)
    try:
        diagnoser = services.loop._diagnoser  # the loop's matcher: what it will match
        assert "site.train_step" in {s.id for s in diagnoser.signatures}
    finally:
        services.close()


def test_a_bad_site_file_stops_medic_serve_with_exit_2_and_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from medic.cli import main

    site = tmp_path / "site.yaml"
    site.write_text(SITE.replace("global step 120 of", "step 120 of"), encoding="utf-8")
    for name in [n for n in os.environ if n.startswith("MEDIC_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MEDIC_DATABASE_URL", f"sqlite:///{tmp_path / 'medic.db'}")
    monkeypatch.setenv("MEDIC_DETECT_EXTRA_SIGNATURE_FILES", str(site))
    monkeypatch.setattr(sys, "argv", ["medic", "serve"])

    with pytest.raises(SystemExit) as exited:
        main()

    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        f"medic: configuration error: detect.extra_signature_files ({site}:site.train_step):"
        " example 1 does not match the pattern: '[train] step 120 of 5000 done'\n"
    )
    assert not (tmp_path / "medic.db").exists()  # refused before anything was opened
