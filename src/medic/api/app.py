"""The HTTP API application: explicit routes, problem+json errors, and a lifespan that runs the
control loop beside the API when asked to.

``create_app(services)`` is all a caller needs; it holds no global state. Every ``/api/v1`` route
needs a token or a console session (``medic.api.auth``); ``/healthz`` (the process answers),
``/readyz`` (the store answers too: 503 problem+json when it does not), ``/metrics`` and the
OpenAPI document stay open. When no API token exists yet, starting the app logs how to create the
first admin token.

Two middlewares stand before the routes: the outer one bounds each request body
(``api.max_body_bytes``) and refuses a protected route's caller without valid credentials before
reading its body (``medic.api.limits``); the inner one replaces NUL and lone surrogates in what is
left (``medic.api.sanitize``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response

import medic
from medic.api.advice import router as advice_router
from medic.api.alerts import router as alerts_router
from medic.api.auth import refuse_before_body, startup_notice
from medic.api.auth import router as tokens_router
from medic.api.clusters import router as clusters_router
from medic.api.leases import router as leases_router
from medic.api.limits import BodyGuard, BodyLimits
from medic.api.openapi import install_openapi, problems
from medic.api.policy import router as policy_router
from medic.api.problems import flush_denials, install_problem_handlers
from medic.api.repairs import router as repairs_router
from medic.api.routes import router
from medic.api.sanitize import UnstorableReplacing
from medic.api.schemas_auth import (
    ReadyOut,
)
from medic.api.session import router as session_router
from medic.config.settings import ApiSettings, Settings
from medic.console import mount_console
from medic.control.tasks import LoopThread
from medic.errors import MedicError, StoreError
from medic.services import Services

__all__ = ["create_app"]

logger = logging.getLogger(__name__)

READY_PROBE = "medic.readyz"
"""A cursor name nothing writes: reading it is one primary-key lookup, the cheapest query."""


def create_app(services: Services, *, run_loop: bool = False) -> FastAPI:
    """The API over ``services``; with ``run_loop`` the control loop runs for the app's lifetime."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            notice = startup_notice(services.tokens)
        except MedicError as exc:
            notice = None
            logger.warning("cannot tell whether API tokens exist: %s", exc)
        if notice:
            logger.warning("%s", notice)
        thread = LoopThread(services.loop) if run_loop else None
        if thread:
            thread.start()
        try:
            yield
        finally:
            if thread:
                thread.stop()
            flush_denials(app)

    app = FastAPI(
        title="medic",
        version=medic.__version__,
        openapi_url="/api/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.services = services
    app.add_middleware(UnstorableReplacing)
    # Added last, so outermost: it runs before anything reads the body.
    app.add_middleware(BodyGuard, limits=_body_limits(services), gate=refuse_before_body)
    install_problem_handlers(app)
    install_openapi(app)
    app.include_router(router)
    app.include_router(clusters_router)
    app.include_router(advice_router)
    app.include_router(leases_router)
    app.include_router(alerts_router)
    app.include_router(repairs_router)
    app.include_router(policy_router)
    app.include_router(session_router)
    app.include_router(tokens_router)
    mount_console(app)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok", "version": medic.__version__}

    @app.get("/readyz", response_model=ReadyOut, responses=problems(503))
    def readyz(request: Request) -> ReadyOut:
        """Readiness: the process answers and its store answers a query (503 otherwise), and
        which of its leases this replica holds (none: it stands by and serves the API)."""
        try:
            request.app.state.services.store.get_cursor(READY_PROBE)
        except Exception as exc:
            # Open to anyone: say what is wrong in the log, not (database URL and all) here.
            logger.warning("readiness: the store does not answer: %s", exc)
            raise StoreError("the store does not answer; see medic's log") from None
        loop = request.app.state.services.loop
        return ReadyOut(status="ready", holder=loop.holder, leases=loop.leases())

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        body, content_type = request.app.state.services.exposition()
        return Response(content=body, media_type=content_type)

    return app


def _body_limits(services: Services) -> BodyLimits:
    """``api.max_body_bytes`` for every route (a route with its own limit joins ``routes``)."""
    # The app is also built without services, to read its routes (the OpenAPI document).
    settings = getattr(services, "settings", None)
    api = settings.api if isinstance(settings, Settings) else ApiSettings()
    return BodyLimits(default=api.max_body_bytes)
