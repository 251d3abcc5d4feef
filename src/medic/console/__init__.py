"""The medic web console: static HTML, CSS and small JavaScript modules served beside the API.

The console is one more client of the JSON API (``/api/v1``): every value it shows comes from
there, and every change it makes goes through the same endpoints, signed in with a session cookie
and the CSRF header. Nothing is rendered on the server and nothing is loaded from a CDN: htmx and
uPlot are vendored under ``static/vendor`` (``tools/vendor_console_assets.sh``).

``mount_console(app)`` adds ``GET /`` (the page) and ``/console/static`` (its assets).
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI
from starlette.responses import FileResponse, Response
from starlette.staticfiles import PathLike, StaticFiles
from starlette.types import Scope

__all__ = ["CONTENT_SECURITY_POLICY", "STATIC_DIR", "STATIC_PREFIX", "mount_console"]

STATIC_DIR = Path(__file__).with_name("static")
STATIC_PREFIX = "/console/static"

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
"""Only this origin: the page can load nothing from elsewhere and runs no inline script."""

_PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class _ConsoleFiles(StaticFiles):
    """Static files that are revalidated (ETag) on every load, so an upgrade shows at once."""

    def file_response(
        self,
        full_path: PathLike,
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def mount_console(app: FastAPI) -> None:
    """Serve the console at ``/`` and its assets under ``/console/static``."""
    index = STATIC_DIR / "index.html"

    @app.get("/", include_in_schema=False)
    def console_index() -> FileResponse:
        return FileResponse(index, media_type="text/html", headers=_PAGE_HEADERS)

    app.mount(STATIC_PREFIX, _ConsoleFiles(directory=STATIC_DIR), name="console-static")
