"""Load and validate the YAML signature catalogue (schema and rules: docs/signatures.md).

:func:`load_catalogue` reads every ``*.yaml`` file of a directory, sorted by name (default: the
package's ``catalogue/`` directory through ``importlib.resources``), then a site's own files
(``extra``: files, or directories whose ``*.yaml`` files are read sorted by name; the setting
``detect.extra_signature_files``, through :func:`site_catalogue`), and returns the signatures in
file order, then in-file order. Reading those files is the only I/O in ``medic.detect``.
Everything the document lists is checked, and a bad file stops medic: the first problem raises
``ConfigError(setting="<file>:<signature id>", message=<why>)``, on one line. Checked: keys
(required, unknown, duplicate), enum values, unique ids across files, canonical field names, the
pattern rules (statically on the ``re`` parse tree, then it must compile in ``re`` and, when
installed, in Hyperscan), every example matches with exactly its fields and is won by its own
signature over the whole catalogue (site files included: a site signature that would win a
built-in example is refused, naming the site's file and signature), no counter-example matches.
One entry's own checks live in
:mod:`medic.detect.catalogue_entry`; this module reads the files and checks what spans signatures
and files (duplicate keys, unique ids, Hyperscan, which signature wins each example).

``python -m medic.detect.catalogue [DIR] [--site PATH ...]`` validates a directory (default: the
package's) with a site's files and prints the count per file (exit status 2 and the error on
stderr when a file is wrong).
"""

from __future__ import annotations

import argparse
import functools
import importlib.resources
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from medic.detect.catalogue_entry import parse_signature
from medic.detect.engines import hyperscan_errors
from medic.detect.patterns import MAX_MATCH_CHARS, compile_pattern, strip_rank_prefix
from medic.detect.signatures import Signature
from medic.errors import ConfigError

__all__ = [
    "SITE_SETTING",
    "default_catalogue",
    "load_catalogue",
    "main",
    "node_actions",
    "site_catalogue",
]

SITE_SETTING = "detect.extra_signature_files"
"""The setting that names a site's own catalogue files."""

_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it


class _Loader(_SAFE_LOADER):  # type: ignore[misc]
    """The safe loader, refusing a key given twice in one mapping."""


def _mapping(loader: Any, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return dict(loader.construct_mapping(node, deep=True))


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _parse_file(label: str, stem: str, text: str) -> list[Signature]:
    try:
        document = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(label, f"invalid YAML: {' '.join(str(exc).split())}") from exc
    if not isinstance(document, dict):
        raise ConfigError(label, "expected a mapping with the keys area and signatures")
    if extra := sorted(map(str, set(document) - {"area", "signatures"})):
        raise ConfigError(label, f"unknown top-level key(s): {', '.join(extra)}")
    if document.get("area") != stem:
        raise ConfigError(
            label, f"area must be the file's stem {stem!r}, got {document.get('area')!r}"
        )
    entries = document.get("signatures")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(label, "signatures must be a non-empty list")
    return [parse_signature(label, n, entry) for n, entry in enumerate(entries)]


def _files(directory: Path | None) -> list[tuple[str, str, str]]:
    """(label, stem, text) of each catalogue file, sorted by name."""
    if directory is None:
        root = importlib.resources.files("medic.detect") / "catalogue"
        entries = [e for e in root.iterdir() if e.name.endswith(".yaml")] if root.is_dir() else []
        where = "medic/detect/catalogue"
    else:
        if not directory.is_dir():
            raise ConfigError(str(directory), "not a directory")
        entries = list(directory.glob("*.yaml"))
        where = str(directory)
    if not entries:
        raise ConfigError(where, "no *.yaml catalogue file")
    files = sorted(entries, key=lambda e: e.name)
    return [(f"{where}/{e.name}", e.name[: -len(".yaml")], e.read_text("utf-8")) for e in files]


def _site_files(paths: Sequence[str | Path]) -> list[tuple[str, str, str]]:
    """(label, stem, text) of each site file: a file as given, a directory's ``*.yaml`` sorted."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            entries = sorted(path.glob("*.yaml"), key=lambda e: e.name)
            if not entries:
                raise ConfigError(str(path), "no *.yaml catalogue file in this directory")
            found += entries
        elif path.is_file():
            found.append(path)
        else:
            raise ConfigError(str(path), "no such file or directory")
    files = []
    for path in found:
        try:
            files.append((str(path), path.stem, path.read_text("utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(str(path), f"cannot read: {exc}") from exc
    return files


def _load(
    directory: Path | None, extra: Sequence[str | Path] = ()
) -> list[tuple[str, list[Signature]]]:
    loaded: list[tuple[str, list[Signature]]] = []
    origin: dict[str, str] = {}
    site = _site_files(extra)
    for label, stem, text in [*_files(directory), *site]:
        signatures = _parse_file(label, stem, text)
        for signature in signatures:
            if signature.id in origin:
                raise ConfigError(
                    f"{label}:{signature.id}", f"duplicate id (also in {origin[signature.id]})"
                )
            origin[signature.id] = label
        loaded.append((label, signatures))
    signatures = [s for _, group in loaded for s in group]
    for index, error in hyperscan_errors([s.pattern for s in signatures]).items():
        where = f"{origin[signatures[index].id]}:{signatures[index].id}"
        raise ConfigError(where, f"pattern does not compile in Hyperscan: {error}")
    _check_winners(signatures, origin, {label for label, _, _ in site})
    return loaded


def _check_winners(
    signatures: list[Signature], origin: dict[str, str], site: set[str] | None = None
) -> None:
    """Each example must be won by its own signature: priority first, then catalogue order.

    A site signature (one from a file in ``site``) that wins a built-in example is the problem.
    """
    ranked = sorted(signatures, key=lambda s: -s.priority)
    regexes = {s.id: compile_pattern(s.pattern) for s in signatures}
    site = site or set()
    for signature in signatures:
        for number, example in enumerate(signature.examples, 1):
            body = strip_rank_prefix(example.line.splitlines()[0])[0][:MAX_MATCH_CHARS]
            winner = next(s for s in ranked if regexes[s.id].search(body))
            if winner.id == signature.id:
                continue
            if origin[winner.id] in site and origin[signature.id] not in site:
                raise ConfigError(
                    f"{origin[winner.id]}:{winner.id}",
                    f"wins example {number} of the built-in {signature.id} (in"
                    f" {origin[signature.id]}): narrow the pattern or give it a priority of"
                    f" at most {signature.priority}",
                )
            raise ConfigError(
                f"{origin[signature.id]}:{signature.id}",
                f"example {number} is won by {winner.id} (priority {winner.priority}, in"
                f" {origin[winner.id]}): raise this priority or narrow {winner.id}",
            )


@functools.cache
def default_catalogue() -> tuple[Signature, ...]:
    """The packaged catalogue, loaded and validated once per process (about a second)."""
    return load_catalogue()


def node_actions(signatures: Sequence[Signature] | None = None) -> dict[str, str]:
    """Signature id -> the node repair its line calls for (``node_action``; none left out), for
    :func:`medic.attribute.recommended_node_action`. Default: the packaged catalogue."""
    chosen = default_catalogue() if signatures is None else signatures
    return {
        s.id: s.node_action.value
        for s in chosen
        if s.node_action is not None and s.node_action.value != "none"
    }


def load_catalogue(
    directory: Path | None = None, *, extra: Sequence[str | Path] = ()
) -> tuple[Signature, ...]:
    """Every signature of the catalogue directory (default: the package's), then of the site
    files and directories in ``extra``, validated together.

    Raises ``ConfigError`` naming the file, the signature and the problem.
    """
    return tuple(s for _, group in _load(directory, extra) for s in group)


def site_catalogue(extra: Sequence[str]) -> tuple[Signature, ...]:
    """The packaged catalogue with a site's files (``detect.extra_signature_files``) added.

    Raises ``ConfigError`` naming the setting, then the file, the signature and the problem:
    ``detect.extra_signature_files (/etc/medic/site.yaml:site.step): example 1 does not ...``.
    """
    if not extra:
        return default_catalogue()
    try:
        return load_catalogue(extra=extra)
    except ConfigError as exc:
        raise ConfigError(f"{SITE_SETTING} ({exc.setting})", exc.message) from exc


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m medic.detect.catalogue [DIR] [--site PATH ...]``: validate, print the count
    per file."""
    parser = argparse.ArgumentParser(prog="python -m medic.detect.catalogue")
    parser.add_argument("directory", nargs="?", type=Path, help="default: the package's")
    parser.add_argument("--site", action="append", default=[], help="a site file or directory")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        loaded = _load(args.directory, args.site)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for label, signatures in loaded:
        print(f"{label}: {len(signatures)}")
    print(f"total: {sum(len(group) for _, group in loaded)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
