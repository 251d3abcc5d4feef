"""Print shell exports for the database URLs the store tests use, for the servers that answer.

``make test`` evaluates this: PostgreSQL and MariaDB on localhost join the store suite when they
accept connections (they do on the CI machine). A URL already set in the environment is kept.
"""

from __future__ import annotations

import os
import socket

CANDIDATES = {
    "MEDIC_TEST_POSTGRES_URL": (
        "127.0.0.1",
        5432,
        "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    ),
    "MEDIC_TEST_MYSQL_URL": ("127.0.0.1", 3306, "mysql+pymysql://root@127.0.0.1:3306/test"),
}


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def main() -> None:
    for var, (host, port, url) in CANDIDATES.items():
        if os.environ.get(var):
            print(f"export {var}={os.environ[var]!r}")
        elif answers(host, port):
            print(f"export {var}={url!r}")


if __name__ == "__main__":
    main()
