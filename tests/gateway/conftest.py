"""Fixtures for the gateway tests: the real ledger, the default tiny tokenizer and its chat
template, the scripted backend, and the gateway served by uvicorn on loopback.

The default script plays a two-turn tool use: it calls `add(2, 3)` until a tool result is in the
last user turn, then answers `FINAL_REPLY` (see gateway_helpers.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rollout.gateway import GatewayServer, create_app
from rollout.inference.scripted import ScriptedBackend
from rollout.ledger import Ledger
from rollout.models import default_tokenizer_dir
from rollout.rendering import HFRenderer
from tests.gateway.gateway_helpers import VERSION, Serve, Served, claim_new_seat, tool_script


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return default_tokenizer_dir(tmp_path_factory.mktemp("state"))


@pytest.fixture(scope="session")
def renderer(tokenizer_dir: Path) -> HFRenderer:
    return HFRenderer(tokenizer_dir)


@pytest.fixture
async def serve(ledger: Ledger, renderer: HFRenderer) -> AsyncIterator[Serve]:
    """`await serve(script=..., admission=...)`: a gateway on loopback and a claimed seat."""
    servers: list[GatewayServer] = []

    async def start(
        script: Any = tool_script, *, use_renderer: HFRenderer | None = None, **options: Any
    ) -> Served:
        r = use_renderer or renderer
        backend = ScriptedBackend(r, script, version=VERSION)
        app = create_app(ledger, r, backend, model_name="tiny", **options)
        server = GatewayServer(app)
        await server.start()
        servers.append(server)
        return Served(server, backend, ledger, r, await claim_new_seat(ledger))

    try:
        yield start
    finally:
        for server in servers:
            await server.stop()
