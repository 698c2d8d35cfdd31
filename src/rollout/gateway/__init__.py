"""The gateway: OpenAI- and Anthropic-compatible model endpoints that record every turn.

- `create_app(ledger, renderer, backend, model_name=...)`: the ASGI app (FastAPI) serving
  `/v1/chat/completions`, `/v1/responses`, `/v1/messages` (+ `/count_tokens`) and `/v1/models`.
- `GatewayServer`: runs an app with uvicorn in the current event loop on 127.0.0.1 and a free
  port (`.base_url` ends in `/v1`).
- `Gateway` (core.py): the shared pipeline: keys, token-exact prompts, admission, sampling,
  parsing, recording.
- `Playground`, `run_playground`, `run_gateway`: a model behind the gateway with a key for your
  own agents (`rollout playground`), and the gateway alone (`rollout gateway`).
- `GatewayError`: errors answered to clients, rendered in each protocol's error shape.
"""

from rollout.gateway.app import GatewayServer, create_app
from rollout.gateway.core import Admission, CanonicalRequest, Gateway, TurnResult
from rollout.gateway.errors import GatewayError
from rollout.gateway.playground import Playground, run_gateway, run_playground

__all__ = [
    "Admission",
    "CanonicalRequest",
    "Gateway",
    "GatewayError",
    "GatewayServer",
    "Playground",
    "TurnResult",
    "create_app",
    "run_gateway",
    "run_playground",
]
