"""Slurm host lists: expansion, compression and their round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from medic.errors import InputError
from medic.schedulers.slurm.hostlist import compress_hostlist, expand_hostlist


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("node1", ("node1",)),
        ("node[1-3,5]", ("node1", "node2", "node3", "node5")),
        ("gpu[08-10]", ("gpu08", "gpu09", "gpu10")),
        ("gpu[098-100]", ("gpu098", "gpu099", "gpu100")),
        ("node[9-10]", ("node9", "node10")),
        ("a[1-2],b3,c[01]", ("a1", "a2", "b3", "c01")),
        ("r[1-2]n[1-2]", ("r1n1", "r1n2", "r2n1", "r2n2")),
        ("rack1-node[1-2]", ("rack1-node1", "rack1-node2")),
        (" node1 , node2 ", ("node1", "node2")),
        ("node1,node1", ("node1",)),
        ("", ()),
        ("(null)", ()),
        (None, ()),
    ],
)
def test_expand(text: str | None, names: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == names


@pytest.mark.parametrize("bad", ["node[1-", "node1]", "node[a-b]", "node[3-1]", "n[1-9999999]"])
def test_expand_rejects_malformed_lists(bad: str) -> None:
    with pytest.raises(InputError):
        expand_hostlist(bad)


@pytest.mark.parametrize(
    ("names", "text"),
    [
        (["node1", "node2", "node3", "node5"], "node[1-3,5]"),
        (["node5", "node1", "node2"], "node[1-2,5]"),
        (["gpu08", "gpu09", "gpu10"], "gpu[08-10]"),
        (["node9", "node10"], "node[9-10]"),
        (["node1"], "node1"),
        (["login", "node1", "node2"], "login,node[1-2]"),
        (["node0"], "node0"),
        ([], ""),
    ],
)
def test_compress(names: list[str], text: str) -> None:
    assert compress_hostlist(names) == text


_names = st.builds(
    lambda prefix, n, width: f"{prefix}{str(n).zfill(width)}",
    st.sampled_from(["node", "gpu", "r1n", "a-b"]),
    st.integers(0, 300),
    st.integers(1, 4),
)


@given(st.lists(_names | st.sampled_from(["login", "head"]), max_size=30))
def test_compress_then_expand_gives_the_same_names(names: list[str]) -> None:
    assert set(expand_hostlist(compress_hostlist(names))) == set(names)
