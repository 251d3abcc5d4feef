"""Every row of the public corpus is classified consistently with its labelled domain.

``public-log-lines.tsv`` next to this file is a verbatim copy of shared/corpus/public-log-lines.tsv
(real lines quoted from public issue threads, each row citing its source). The copy keeps the test
self-contained; when the shared original sits beside the repository, a test checks they agree.

How corpus domains map to v1 (see the corpus README): ``infrastructure`` lines are cascades;
``config`` counts as ``application`` in a verdict; ``noise`` lines match nothing (or noise).
Structural lines of a failure (advice, stack headers, ``terminate called``) are labelled with the
failure's domain but carry no cause themselves: they match as noise or cascade, never as a root.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest

from medic.detect.matcher import SignatureDiagnoser
from medic.detect.signatures import Signature
from medic.domain.diagnosis import FaultDomain, Role

HERE = Path(__file__).parent
FIXTURE = HERE / "public-log-lines.tsv"
SHARED = HERE.parents[2].parent / "shared" / "corpus" / "public-log-lines.tsv"
DIAGNOSER = SignatureDiagnoser()


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


ROWS = _rows(FIXTURE)

Check = Callable[[Signature], bool]
BY_DOMAIN: dict[str, Check] = {
    "hardware": lambda s: s.domain is FaultDomain.HARDWARE and s.role is Role.ROOT,
    "network": lambda s: s.domain is FaultDomain.NETWORK,
    "system_software": lambda s: s.domain is FaultDomain.SYSTEM_SOFTWARE,
    "application": lambda s: s.domain is FaultDomain.APPLICATION,
    "config": lambda s: s.domain is FaultDomain.APPLICATION,
    "infrastructure": lambda s: s.role is Role.CASCADE,
    "noise": lambda s: s.role is Role.NOISE,
}

# Rows v1 deliberately does not match, and why.
NOT_COVERED = {
    "28b": "structural 'terminate called after throwing' a generic c10::Error: the cause is on the"
    " line before (28a)",
}

# Structural rows matched as what they are (noise or cascade, never a root), and why.
STRUCTURAL: dict[str, tuple[str, Role, str]] = {
    "21b": (
        "cuda.async_hint",
        Role.NOISE,
        "CUDA's asynchronous-reporting advice: diagnostic text, never a failure (NVRx)",
    ),
    "21c": (
        "cuda.launch_blocking_hint",
        Role.NOISE,
        "CUDA_LAUNCH_BLOCKING advice: diagnostic text, never a failure (NVRx)",
    ),
    "23": ("nccl.watchdog_frame", Role.NOISE, "a stack frame inside ProcessGroupNCCL"),
    "27a": (
        "cuda.terminate_cuda_error",
        Role.CASCADE,
        "'terminate called after throwing' a c10::CUDAError: the cause is on the next line (27b)",
    ),
    "27c": ("cuda.raised_from", Role.NOISE, "'Exception raised from ...' location line"),
}

# Rows v1 classifies differently from the label, and why.
DIVERGES = {
    "18": (
        "nccl.system_error",
        "ncclSystemError is a cascade of domain system_software in v1; the config cause (the "
        "NCCL_SOCKET_IFNAME fix) is only visible in NCCL_DEBUG=INFO output",
    ),
}


def test_fixture_has_every_row() -> None:
    assert len(ROWS) == 53
    assert {row["domain"] for row in ROWS} <= set(BY_DOMAIN)


@pytest.mark.skipif(not SHARED.exists(), reason="shared/ is not beside the repository")
def test_fixture_is_a_copy_of_the_shared_corpus() -> None:
    assert _rows(SHARED) == ROWS


@pytest.mark.parametrize("row", ROWS, ids=[row["id"] for row in ROWS])
def test_corpus_row(row: dict[str, str]) -> None:
    found = DIAGNOSER.match_text(row["line"])
    row_id = row["id"]
    if row_id in NOT_COVERED:
        assert found is None, f"{row_id} is listed as not covered but matched {found}"
        return
    assert found is not None, f"{row_id} ({row['label']}) matched no signature"
    signature, _ = found
    if row_id in STRUCTURAL:
        signature_id, role, _why = STRUCTURAL[row_id]
        assert (signature.id, signature.role) == (signature_id, role)
        assert not signature.implicates_node
        return
    if row_id in DIVERGES:
        assert signature.id == DIVERGES[row_id][0]
        return
    assert BY_DOMAIN[row["domain"]](signature), (
        f"{row_id} labelled {row['domain']} matched {signature.id}"
        f" ({signature.domain.value}, {signature.role.value})"
    )


@pytest.mark.parametrize(
    ("row_id", "signature_id"),
    [
        ("01", "nccl.watchdog_timeout"),
        ("10", "nccl.ib_completion_error"),  # the IB root inside NCCL's remote-error message
        ("14a", "nccl.remote_error"),
        ("22", "cuda.illegal_access"),  # the CUDA error inside the watchdog's exception
        ("25", "cuda.ecc_uncorrectable"),  # idem: the ECC error wins over the watchdog wrapper
        ("30", "cuda.oom"),
        ("34", "torchelastic.child_failed"),
        ("35", "process.crash_signal"),
        ("38", "python.dataloader_shm"),  # not the generic bus-error signal
        ("40", "xid.memory_remap"),
    ],
)
def test_specific_signature_wins(row_id: str, signature_id: str) -> None:
    row = next(r for r in ROWS if r["id"] == row_id)
    found = DIAGNOSER.match_text(row["line"])
    assert found is not None and found[0].id == signature_id
