"""The one way a model is served to agents: the gateway app over a ledger, a renderer and an
inference backend, started in this process (on loopback and a free port unless told otherwise).

`serve_gateway(ledger, renderer, backend, model_name=...)` builds the app (`gateway.app`) and
starts it (`net.server.AppServer`); the caller stops it. Every place that puts a model behind
the gateway comes here, each with its own choices:

- the gateway role (`launch.roles.gateway`): the run's inference server behind it, max_lag
  admission, the host and port it was given;
- the playground and `rollout gateway` (`launch.playground`): a loaded model, host and port;
- `rollout run` (`launch.single`) and `rollout env check` (`cli.env`): loopback, a free port;
- the evaluator's checkpoint server (`launch.evaluator.serving`): loopback, a free port, the
  checkpoint's own backend.
"""

from __future__ import annotations

from typing import Any

from rollout.gateway.app import create_app
from rollout.gateway.core import Admission, LedgerLike
from rollout.inference.base import InferenceBackend
from rollout.net.server import AppServer
from rollout.rendering.base import Renderer

LOOPBACK = "127.0.0.1"


async def serve_gateway(
    ledger: LedgerLike,
    renderer: Renderer,
    backend: InferenceBackend,
    *,
    model_name: str,
    admission: Admission | None = None,
    host: str = LOOPBACK,
    port: int = 0,
    **options: Any,
) -> AppServer:
    """The gateway for `backend`, listening on `host:port` (0: a free port) once this returns.

    Args:
        ledger: resolves keys and records turns.
        renderer: the served model's chat template and parser.
        backend: the inference backend that samples.
        model_name: the model id `GET /v1/models` lists.
        admission: awaited before each turn samples (the gateway role's max_lag gate).
        host: the address to listen on.
        port: the port (0: a free one).
        **options: passed to `rollout.gateway.core.Gateway` (`policies`, `policy_of`, ...).
    """
    app = create_app(
        ledger, renderer, backend, model_name=model_name, admission=admission, **options
    )
    return await AppServer(app, host=host, port=port).start()
