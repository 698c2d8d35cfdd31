"""The gateway's ASGI app and an in-process uvicorn server.

`create_app(ledger, renderer, backend, model_name=...)` serves:

- `POST /v1/chat/completions` (OpenAI Chat Completions)
- `POST /v1/responses` (OpenAI Responses)
- `POST /v1/messages` and `POST /v1/messages/count_tokens` (Anthropic Messages)
- `GET /v1/models`, and `GET /healthz` for readiness probes.

Errors come back in the shape of the route's protocol, never as a bare 500 page.
`GatewayServer` runs the app with uvicorn inside the current event loop on 127.0.0.1 and a free
port, for tests, the playground and the runner.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rollout.gateway import chat_completions, messages, responses
from rollout.gateway.core import Admission, Gateway, LedgerLike
from rollout.gateway.errors import GatewayError, Protocol, error_body, from_wire_error
from rollout.inference.base import InferenceBackend
from rollout.net.server import AppServer
from rollout.rendering.base import Renderer
from rollout.rendering.openai import WireError

log = logging.getLogger("rollout.gateway")

Handler = Callable[[Gateway, Request], Awaitable[Response]]


def _protocol_of(request: Request) -> Protocol:
    path = request.url.path
    if path.startswith("/v1/messages") or path.startswith("/messages"):
        return "anthropic"
    if path.startswith("/v1/models") and (
        "anthropic-version" in request.headers
        or ("x-api-key" in request.headers and "authorization" not in request.headers)
    ):
        return "anthropic"
    return "openai"


def error_response(err: GatewayError, protocol: Protocol) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(error_body(err, protocol), status_code=err.status, headers=headers)


def create_app(
    ledger: LedgerLike,
    renderer: Renderer,
    backend: InferenceBackend,
    *,
    model_name: str,
    admission: Admission | None = None,
    **options: Any,
) -> Starlette:
    """The gateway app (plain Starlette: every handler reads and validates its body itself, and
    FastAPI's layers around each request cost the gateway a tenth of its CPU).

    Args:
        ledger: resolves keys and records turns (`rollout.ledger.Ledger`).
        renderer: the served model's chat template and parser.
        backend: the inference backend that samples.
        model_name: the model id `GET /v1/models` lists (requests may name any model).
        admission: optional `async (KeyInfo) -> None` awaited before each turn samples (max_lag).
        **options: passed to `Gateway` (`default_max_tokens`, `key_cache_seconds`, ...).
    """
    gateway = Gateway(
        ledger, renderer, backend, model_name=model_name, admission=admission, **options
    )
    app = Starlette()
    app.state.gateway = gateway

    def route(handler: Handler, protocol: Protocol) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(gateway, request)
            except GatewayError as err:
                if err.status >= 500:
                    log.warning("%s %s: %s", request.method, request.url.path, err.message)
                return error_response(err, protocol)
            except WireError as err:  # a request value the shared wire helpers cannot read
                return error_response(from_wire_error(err), protocol)
            except Exception as exc:  # never a bare 500 page: the client gets its own shape
                log.exception("%s %s failed", request.method, request.url.path)
                err = GatewayError(f"internal error: {type(exc).__name__}: {exc}", kind="server")
                return error_response(err, protocol)

        return endpoint

    def add_route(
        path: str, endpoint: Callable[[Request], Awaitable[Response]], methods: list[str]
    ) -> None:
        app.router.routes.append(Route(path, endpoint, methods=methods))

    for prefix in ("/v1", ""):
        add_route(
            f"{prefix}/chat/completions",
            route(chat_completions.handle, "openai"),
            methods=["POST"],
        )
        add_route(f"{prefix}/responses", route(responses.handle, "openai"), methods=["POST"])
        add_route(f"{prefix}/messages", route(messages.handle, "anthropic"), methods=["POST"])
        add_route(
            f"{prefix}/messages/count_tokens",
            route(messages.count_tokens, "anthropic"),
            methods=["POST"],
        )

    def model_entry(name: str) -> dict[str, Any]:
        # One object that reads as an OpenAI model and as an Anthropic model.
        created = int(time.time())
        return {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "rollout",
            "type": "model",
            "display_name": name,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)),
        }

    async def list_models(request: Request) -> Response:
        try:
            await gateway.authenticate_headers(request.headers)
        except GatewayError as err:
            return error_response(err, _protocol_of(request))
        return JSONResponse(
            {
                "object": "list",
                "data": [model_entry(model_name)],
                "has_more": False,
                "first_id": model_name,
                "last_id": model_name,
            }
        )

    async def get_model(request: Request) -> Response:
        try:
            await gateway.authenticate_headers(request.headers)
        except GatewayError as err:
            return error_response(err, _protocol_of(request))
        # Requests may name any model (clients send their own names); all reach this one.
        return JSONResponse(model_entry(request.path_params["model_id"]))

    add_route("/v1/models", list_models, methods=["GET"])
    add_route("/v1/models/{model_id:path}", get_model, methods=["GET"])

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True, "model": model_name, "version": backend.version})

    add_route("/healthz", healthz, methods=["GET"])

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        kind = {404: "not_found", 405: "invalid_request", 413: "too_large"}.get(
            exc.status_code, "invalid_request"
        )
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        err = GatewayError(
            f"{request.method} {request.url.path}: {detail}",
            kind=kind,  # type: ignore[arg-type]
            status=exc.status_code,
        )
        return error_response(err, _protocol_of(request))

    app.add_exception_handler(StarletteHTTPException, http_error)
    return app


GatewayServer = AppServer
"""Runs the gateway app with uvicorn in the current event loop (see `AppServer`)."""
