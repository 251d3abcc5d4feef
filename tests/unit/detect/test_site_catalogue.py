"""A site's own signature files (``detect.extra_signature_files``): loaded after the built-in
catalogue, checked exactly like it, and refused with one line naming the file, the signature and
the problem; a site's progress signature then drives progress like a built-in one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from medic.detect.catalogue import (
    SITE_SETTING,
    default_catalogue,
    load_catalogue,
    main,
    site_catalogue,
)
from medic.detect.matcher import SignatureDiagnoser
from medic.detect.progress import ProgressTracker
from medic.domain.diagnosis import Role
from medic.domain.ids import JobId
from medic.domain.logs import LogLine, LogStream
from medic.errors import ConfigError

T0 = datetime(2026, 1, 1, tzinfo=UTC)

# A trainer that prints "[train] global step 120 of 5000 done" (a site's own style).
SITE = (Path(__file__).parents[2] / "assets" / "site_signatures.yaml").read_text(encoding="utf-8")


def _site(directory: Path, text: str = SITE, name: str = "site.yaml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def _error(paths: list[str]) -> str:
    with pytest.raises(ConfigError) as raised:
        site_catalogue(paths)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_no_site_files_is_the_packaged_catalogue() -> None:
    assert site_catalogue(()) is default_catalogue()


def test_a_site_file_is_added_after_the_built_in_catalogue(tmp_path: Path) -> None:
    signatures = site_catalogue([str(_site(tmp_path))])
    assert signatures[: len(default_catalogue())] == default_catalogue()
    assert [s.id for s in signatures[len(default_catalogue()) :]] == ["site.train_step"]


def test_a_directory_gives_its_yaml_files_sorted(tmp_path: Path) -> None:
    other = SITE.replace("area: site", "area: b_more").replace("site.", "more.")
    other = other.replace("[train]", "[trainer]").replace("\\[train", "\\[trainer")
    _site(tmp_path, other, "b_more.yaml")
    _site(tmp_path, SITE.replace("area: site", "area: a_site"), "a_site.yaml")
    (tmp_path / "notes.txt").write_text("not a catalogue", encoding="utf-8")
    extra = [s.id for s in load_catalogue(extra=[tmp_path])][len(default_catalogue()) :]
    assert extra == ["site.train_step", "more.train_step"]


def test_a_site_progress_signature_drives_progress(tmp_path: Path) -> None:
    diagnoser = SignatureDiagnoser(site_catalogue([str(_site(tmp_path))]))
    texts = ["[train] global step 120 of 5000 done", "3: [train] global step 130 of 5000 done"]
    lines = [
        LogLine(LogStream.JOB, text, T0 + timedelta(seconds=n), None, JobId("1"), None, n)
        for n, text in enumerate(texts)
    ]
    detections = diagnoser.scan(lines)
    assert [(d.signature_id, d.role, d.fields, d.rank) for d in detections] == [
        ("site.train_step", Role.PROGRESS, {"step": "120"}, None),
        ("site.train_step", Role.PROGRESS, {"step": "130"}, 3),
    ]
    tracker = ProgressTracker(JobId("1"), 0)
    for detection in detections:
        tracker.observe(detection)
    progress = tracker.progress()
    assert (progress.first_step, progress.last_step) == (120, 130)
    assert progress.last_progress_at == T0 + timedelta(seconds=1)


def test_an_example_that_does_not_match_names_file_and_signature(tmp_path: Path) -> None:
    path = _site(
        tmp_path, SITE.replace("line: '[train] global step 120", "line: '[train] step 120")
    )
    assert _error([str(path)]) == (
        f"{SITE_SETTING} ({path}:site.train_step): example 1 does not match the pattern:"
        " '[train] step 120 of 5000 done'"
    )


def test_an_id_of_the_built_in_catalogue_is_refused(tmp_path: Path) -> None:
    path = _site(tmp_path, SITE.replace("id: site.train_step", "id: megatron.iteration"))
    message = _error([str(path)])
    assert message.startswith(f"{SITE_SETTING} ({path}:megatron.iteration): duplicate id (also in")
    assert "progress.yaml" in message


def test_the_same_file_twice_is_a_duplicate(tmp_path: Path) -> None:
    path = str(_site(tmp_path))
    assert "duplicate id" in _error([path, path])


def test_a_site_signature_may_not_steal_a_built_in_example(tmp_path: Path) -> None:
    greedy = (
        SITE.replace(
            "pattern: '^\\[train\\] global step (?P<step>\\d{1,12}) of \\d{1,12} done'",
            "pattern: 'iteration {1,16}(?P<step>\\d{1,12})/'",
        )
        .replace("line: '[train] global step 120 of 5000 done'", "line: 'iteration 120/ 5000 | x'")
        .replace("priority: 20", "priority: 60")
    )
    path = _site(tmp_path, greedy)
    message = _error([str(path)])
    assert message.startswith(f"{SITE_SETTING} ({path}:site.train_step): wins example 1 of the")
    built_in = "megatron.nan_iterations (in medic/detect/catalogue/application.yaml)"
    assert f"of the built-in {built_in}" in message
    assert message.endswith("narrow the pattern or give it a priority of at most 30")


def test_area_must_be_the_file_stem(tmp_path: Path) -> None:
    path = _site(tmp_path, name="ours.yaml")
    assert _error([str(path)]) == (
        f"{SITE_SETTING} ({path}): area must be the file's stem 'ours', got 'site'"
    )


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda d: d / "missing.yaml", "no such file or directory"),
        (lambda d: d, "no *.yaml catalogue file in this directory"),
    ],
)
def test_missing_paths_and_empty_directories(
    tmp_path: Path, make: Callable[[Path], Path], problem: str
) -> None:
    path = make(tmp_path)
    assert _error([str(path)]) == f"{SITE_SETTING} ({path}): {problem}"


def test_invalid_yaml_is_one_line(tmp_path: Path) -> None:
    path = _site(tmp_path, "area: site\nsignatures: [\n")
    message = _error([str(path)])
    assert message.startswith(f"{SITE_SETTING} ({path}): invalid YAML:")


def test_command_line_validates_site_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _site(tmp_path)
    assert main(["--site", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [f"{path}: 1", f"total: {len(default_catalogue()) + 1}"]
    bad = _site(tmp_path / "bad", SITE.replace("role: progress", "role: progres"))
    assert main(["--site", str(bad)]) == 2
    assert f"{bad}:site.train_step: role must be one of" in capsys.readouterr().err


def test_the_worked_example_of_the_documentation(tmp_path: Path) -> None:
    """docs/job-logs.md's site file loads, and its lines give what the page says."""
    page = (Path(__file__).parents[3] / "docs" / "job-logs.md").read_text(encoding="utf-8")
    worked = page[page.index("### Worked example") :]
    blocks = worked.split("```")
    lines = blocks[1].removeprefix("text\n").splitlines()
    yaml_text = blocks[3].removeprefix("yaml\n")
    path = tmp_path / "trainer.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    diagnoser = SignatureDiagnoser(site_catalogue([str(path)]))
    found = diagnoser.scan(
        [
            LogLine(LogStream.JOB, text, T0, None, JobId("1"), None, n)
            for n, text in enumerate(lines)
        ]
    )
    assert [(d.signature_id, d.fields, d.rank) for d in found] == [
        ("trainer.step", {"step": "120", "iter_ms": "812.5"}, 0),
        ("trainer.checkpoint_saved", {"step": "1000", "checkpoint": "saved"}, 0),
        ("trainer.checkpoint_loaded", {"step": "1000", "checkpoint": "loaded"}, 0),
    ]
    broken = yaml_text.replace("'0: [train] global step 120", "'0: [train] step 120")
    path.write_text(broken, encoding="utf-8")
    expected = next(line for line in page.splitlines() if line.startswith("medic: configuration"))
    message = _error([str(path)])
    assert f"medic: configuration error: {message}" == expected.replace(
        "/etc/medic/signatures/trainer.yaml", str(path)
    )
