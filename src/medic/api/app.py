"""The HTTP API application: explicit routes, problem+json errors, and a lifespan that runs the
control loop beside the API when asked to.

``create_app(services)`` is all a caller needs; it holds no global state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response

import medic
from medic.api.advice import router as advice_router
from medic.api.alerts import router as alerts_router
from medic.api.problems import install_problem_handlers
from medic.api.repairs import router as repairs_router
from medic.api.routes import router
from medic.control.services import Services
from medic.control.tasks import LoopThread

__all__ = ["create_app"]


def create_app(services: Services, *, run_loop: bool = False) -> FastAPI:
    """The API over ``services``; with ``run_loop`` the control loop runs for the app's lifetime."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        thread = LoopThread(services.loop) if run_loop else None
        if thread:
            thread.start()
        try:
            yield
        finally:
            if thread:
                thread.stop()

    app = FastAPI(
        title="medic",
        version=medic.__version__,
        openapi_url="/api/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.services = services
    install_problem_handlers(app)
    app.include_router(router)
    app.include_router(advice_router)
    app.include_router(alerts_router)
    app.include_router(repairs_router)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok", "version": medic.__version__}

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        body, content_type = request.app.state.services.exposition()
        return Response(content=body, media_type=content_type)

    return app
