"""The shipped alert rules and dashboard (deploy/) against the real promtool and medic's own
/metrics: the rules load, their unit tests pass, a typo is reported with its place, and every
metric they or the dashboard read is one medic exposes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from medic.config.loading import load_settings
from medic.testing import FakeClock
from medic.wiring import build

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "medic-rules.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "medic-rules.test.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "medic.json"
RUNBOOKS = ROOT / "docs" / "runbooks"
_METRIC = re.compile(r"\bmedic_[a-z_]+\b")


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        why = "promtool is missing (Debian: apt-get install prometheus; make test installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} (CI=true: the rule checks must run)")
        pytest.skip(why)
    return found


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_rules_load() -> None:
    result = _run("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 11 rules found" in result.stdout


def test_the_rules_unit_tests_pass() -> None:
    result = _run("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_a_typo_in_a_rule_is_reported_with_its_rule(tmp_path: Path) -> None:
    broken = RULES.read_text(encoding="utf-8").replace(
        "expr: medic_breaker_tripped == 1", "expr: medic_breaker_tripped === 1"
    )
    (tmp_path / "rules.yaml").write_text(broken, encoding="utf-8")
    result = _run("check", "rules", str(tmp_path / "rules.yaml"))
    assert result.returncode != 0
    said = result.stderr + result.stdout
    assert "FAILED" in said
    # where (line:column), which rule, what
    assert ': 40:15: group "medic", rule 4, "MedicRepairBreakerTripped"' in said
    assert "parse error" in said


def _exposed(tmp_path: Path) -> set[str]:
    """Every sample name medic's /metrics exposition has (a fresh medic on SQLite)."""
    settings = load_settings(env={}, overrides={"store.url": f"sqlite:///{tmp_path / 'm.db'}"})
    services = build(settings, clock=FakeClock())
    try:
        # Label sets appear once something happened; families with no samples print their TYPE.
        text = services.exposition()[0].decode()
    finally:
        services.close()
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
            if kind == "counter":
                names.add(name if name.endswith("_total") else f"{name}_total")
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_rules_and_dashboard_read_only_metrics_medic_exposes(tmp_path: Path) -> None:
    exposed = _exposed(tmp_path)
    used = set(_METRIC.findall(RULES.read_text(encoding="utf-8")))
    for expr in _dashboard_exprs():
        used |= set(_METRIC.findall(expr))
    assert used, "no medic metric read at all"
    assert used <= exposed, sorted(used - exposed)


def test_every_rule_links_an_existing_runbook_listed_in_the_index() -> None:
    text = RULES.read_text(encoding="utf-8")
    alerts = re.findall(r"- alert: (\w+)", text)
    links = re.findall(r'runbook_url: "docs/runbooks/([a-z-]+\.md)"', text)
    assert len(alerts) == len(links) == 11
    index = (RUNBOOKS / "README.md").read_text(encoding="utf-8")
    for alert, page in zip(alerts, links, strict=True):
        assert (RUNBOOKS / page).is_file(), page
        assert f"`{alert}`" in index and f"({page})" in index, alert
        assert (RUNBOOKS / page).read_text(encoding="utf-8").startswith("# "), page


def test_the_dashboard_is_importable() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] == "medic-overview"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) >= 12
    for panel in dashboard["panels"]:
        assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}", panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
