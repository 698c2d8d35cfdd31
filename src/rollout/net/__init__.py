"""HTTP for every role: an ASGI server in the current event loop and a pooled JSON client.

- `AppServer` (server.py): runs an ASGI app with uvicorn in the running loop, on a chosen or
  free port; `free_port` finds one.
- `JsonHttpClient` (client.py): keep-alive requests for the roles' hot paths; a request that
  gets no HTTP answer raises `TransportError`.
"""

from rollout.net.client import HttpResponse, JsonHttpClient, TransportError
from rollout.net.server import AppServer, free_port

__all__ = ["AppServer", "HttpResponse", "JsonHttpClient", "TransportError", "free_port"]
