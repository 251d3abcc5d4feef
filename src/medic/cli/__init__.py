"""The ``medic`` command line (Typer + rich). Commands are thin: each calls one library function.

Bad configuration exits with code 2 and a one-line message naming the setting, a database that
cannot be reached or read with code 2 and one line naming it (password masked); no traceback.
"""

from __future__ import annotations

import sys

from medic.cli.app import app
from medic.errors import ConfigError, StoreError

__all__ = ["app", "main"]


def main() -> None:
    """Entry point of the ``medic`` console script."""
    try:
        app()
    except ConfigError as exc:
        print(f"medic: configuration error: {exc}", file=sys.stderr)
        sys.exit(2)
    except StoreError as exc:
        print(f"medic: {exc}", file=sys.stderr)
        sys.exit(2)
