"""The gateway: OpenAI- and Anthropic-compatible model endpoints that record every turn.

- `create_app(ledger, renderer, backend, model_name=...)`: the ASGI app (Starlette) serving
  `/v1/chat/completions`, `/v1/responses`, `/v1/messages` (+ `/count_tokens`) and `/v1/models`.
- `GatewayServer`: runs an app with uvicorn in the current event loop on 127.0.0.1 and a free
  port (`.base_url` ends in `/v1`).
- `Gateway` (core.py): the shared pipeline: keys, token-exact prompts (prompts.py,
  fingerprints.py, seats.py), admission, sampling, parsing, what clients see of the tokens
  (output.py) and recording (recording.py); adapters and the pipeline exchange the records of
  canonical.py.
- `admission.LagGate`: the max_lag admission hook (a turn waits until the served version is
  within max_lag of the newest checkpoint).
- `GatewayError`: errors answered to clients, rendered in each protocol's error shape.
"""

from rollout.gateway.app import GatewayServer, create_app
from rollout.gateway.core import Admission, CanonicalRequest, Gateway, TurnResult
from rollout.gateway.errors import GatewayError

__all__ = [
    "Admission",
    "CanonicalRequest",
    "Gateway",
    "GatewayError",
    "GatewayServer",
    "TurnResult",
    "create_app",
]
