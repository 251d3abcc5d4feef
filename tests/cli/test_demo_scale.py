"""``medic demo --nodes N --jobs J``: the sizes it sets and a live view that stays readable."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from rich.console import Console

from medic.cli.demo import DEMO_OVERRIDES, ROWS_SHOWN, _view, size_overrides
from medic.config.loading import load_settings
from medic.demo import DemoDriver
from medic.wiring import build


def test_default_size_changes_nothing() -> None:
    assert size_overrides(None, None) == {}


def test_a_large_demo_keeps_a_sixth_of_the_nodes_free_and_prints_production_logs() -> None:
    assert size_overrides(12_500, 2_000) == {
        "sim.nodes": 12_500,
        "sim.jobs": 2_000,
        "sim.nodes_per_job": 4,
        "sim.partitions": 2,
        "sim.log_profile": "production",
    }
    small = size_overrides(64, None)
    assert small["sim.jobs"] == 10 and small["sim.nodes_per_job"] == 4
    assert "sim.log_profile" not in small  # ten jobs still fit in rows


def test_more_jobs_than_nodes_is_a_usage_error() -> None:
    with pytest.raises(typer.BadParameter, match="3 jobs do not fit on 2 nodes"):
        size_overrides(2, 3)


def _render(tmp_path: Path, nodes: int, jobs: int) -> str:
    overrides = {**DEMO_OVERRIDES, **size_overrides(nodes, jobs)}
    overrides["store.url"] = f"sqlite:///{tmp_path / 'demo.db'}"
    services = build(load_settings(env={}, overrides=overrides))
    try:
        driver = DemoDriver(services, fault_every=1.0)
        driver.tick()
        services.loop.run_once()
        console = Console(width=100, record=True)
        console.print(_view(services, driver))
        return console.export_text()
    finally:
        services.close()


def test_the_live_view_of_a_large_cluster_is_counts_not_rows(tmp_path: Path) -> None:
    text = _render(tmp_path, 600, 100)

    assert "Jobs on simulated cluster 'demo' (act mode): 100 (" in text
    assert "nodes: 600 total" in text
    assert "last loop pass:" in text and "100 jobs" in text
    assert len(text.splitlines()) < 30, text


def test_the_live_view_of_the_default_cluster_lists_its_jobs(tmp_path: Path) -> None:
    text = _render(tmp_path, 32, ROWS_SHOWN)

    assert text.count("running") + text.count("pending") >= ROWS_SHOWN
