"""The web monitor's application: pages, the JSON API behind them, static files, the token.

`create_app(store, token=...)` builds the FastAPI app; `serve` runs it until stopped (what
`rollout monitor` calls). Access rules:

- Bound to loopback by default; `check_binding` refuses any other address without a token.
- With a token, every request (pages, API, static files) must carry it: an
  `Authorization: Bearer TOKEN` or `X-Rollout-Token: TOKEN` header, or the cookie that opening
  any page with `?token=TOKEN` sets (then the page reloads without it in the address bar).
  Anything else gets 401.
- The only writes (pause, resume, max_lag) are POSTs that must come from the monitor's own
  pages (htmx sends `HX-Request`) or an API client sending JSON; a plain cross-site form post
  gets 403, so another web page open in the same browser cannot steer a run.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from rollout.ledger import NotFound
from rollout.monitor.errors import BadParameter, MonitorError
from rollout.monitor.store import MonitorStore
from rollout.runs.errors import InvalidSetting

HERE = Path(__file__).resolve().parent
COOKIE = "rollout_monitor_token"
DEFAULT_PORT = 8765


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach.

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
        (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token: str | None) -> None:
    """Refuse to serve a non-loopback address without a token (one clear line)."""
    if not is_loopback(host) and not token:
        raise MonitorError(
            f"--host {host} is reachable from other machines: pass --token TOKEN "
            "(or set ROLLOUT_MONITOR_TOKEN) so that only people with the token can see and "
            "steer runs"
        )


def _presented(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-rollout-token") or request.cookies.get(COOKIE)


def _matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def create_app(store: MonitorStore, *, token: str | None = None) -> FastAPI:
    """The monitor app over `store` (opened by the caller, who also closes it)."""
    from rollout.monitor import api, pages

    app = FastAPI(title="rollout monitor", docs_url="/api/docs", redoc_url=None)
    app.state.store = store

    @app.middleware("http")
    async def guard(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if token is not None and not _matches(_presented(request), token):
            given = request.query_params.get("token")
            if request.method == "GET" and _matches(given, token):
                rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
                target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
                response: Response = RedirectResponse(target, status_code=303)
                response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
                return response
            if request.url.path.startswith("/api/"):
                return JSONResponse({"error": "a valid token is required"}, status_code=401)
            return PlainTextResponse(
                "401: this monitor needs its token (open the link `rollout monitor` printed)",
                status_code=401,
            )
        if request.method not in ("GET", "HEAD") and not (
            request.headers.get("hx-request")
            or request.headers.get("content-type", "").startswith("application/json")
        ):
            return JSONResponse(
                {"error": "controls take JSON (or a request from the monitor's pages)"},
                status_code=403,
            )
        return await call_next(request)

    @app.exception_handler(InvalidSetting)  # a control's value (rollout.runs.live)
    @app.exception_handler(BadParameter)
    async def bad_parameter(request: Request, error: Exception) -> Response:
        return _error(request, 400, str(error))

    @app.exception_handler(NotFound)
    async def not_found(request: Request, error: Exception) -> Response:
        return _error(request, 404, str(error))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']} (got {e.get('input')!r})"
            for e in error.errors()
        )
        return _error(request, 400, problems)

    app.include_router(api.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    return app


def _error(request: Request, status: int, message: str) -> Response:
    if request.url.path.startswith("/api/") or request.headers.get("hx-request"):
        return JSONResponse({"error": message}, status_code=status)
    from rollout.monitor.pages import error_page

    return error_page(request, status, message)


def store_of(request: Request) -> MonitorStore:
    store: Any = request.app.state.store
    assert isinstance(store, MonitorStore)
    return store


async def serve(
    stop: asyncio.Event,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    database_url: str | None = None,
    echo: Callable[[str], None] = print,
) -> None:
    """Serve the monitor until `stop` is set (what `rollout monitor` runs)."""
    from rollout.net.server import AppServer

    check_binding(host, token)
    store = await MonitorStore.open(database_url)
    try:
        server = AppServer(create_app(store, token=token), host=host, port=port)
        await server.start()
        shown = socket.getfqdn() if host in ("0.0.0.0", "::", "[::]") else host
        url = f"http://{shown}:{server.port}/"
        echo(f"rollout monitor: {url}" + (f"?token={token}" if token else ""))
        try:
            await stop.wait()
        finally:
            await server.stop()
    finally:
        await store.close()
