"""The import contracts name what they must: node repair's rules forbid every module around them."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_repair_rules_contract_names_every_engine_module() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    forbidden = set(config["importlinter:contract:repair-rules"]["forbidden_modules"].split())
    package = ROOT / "src" / "medic" / "repair"
    engine_side = {
        f"medic.repair.{path.stem}" for path in package.glob("*.py") if path.stem != "__init__"
    }
    engine_side |= {f"medic.repair.{path.name}" for path in package.iterdir() if path.is_dir()}
    engine_side -= {"medic.repair.rules", "medic.repair.__pycache__"}
    assert engine_side, "medic.repair has no modules outside rules"
    assert engine_side <= forbidden, f"add to .importlinter repair-rules: {engine_side - forbidden}"
