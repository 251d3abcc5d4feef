"""The README's Slurm section stays in step with what the local cluster and the e2e suite use."""

from __future__ import annotations

import re
from pathlib import Path

from medic.dev.slurm_config import CRED_EXPIRE_S, SLURM_SETTINGS

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^### {re.escape(title)}[^\n]*\n(.*?)(?=^## )", text, re.M | re.S)
    assert match, f"README has no '### {title}' section"
    return match.group(1)


def test_readme_lists_every_slurm_setting_with_its_value() -> None:
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `(\w+)` \| `([^`]*)` \|", _section("Slurm settings"), re.M)
    }
    assert rows == {key: value for key, (value, _why) in SLURM_SETTINGS.items()}
    assert f"cred_expire={CRED_EXPIRE_S}" in _section("Slurm settings")


def test_readme_names_the_e2e_suite_and_the_benchmark() -> None:
    text = README.read_text(encoding="utf-8")
    assert (ROOT / "tests" / "slurm" / "e2e" / "train.py").exists()
    assert "tests/slurm/e2e" in text
    assert "benchmarks/bench_slurm_recovery.py" in text
    assert (ROOT / "benchmarks" / "bench_slurm_recovery.py").exists()
