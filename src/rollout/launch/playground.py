"""The playground: a model behind the gateway on loopback, with a key for your own agents.

`rollout playground` starts the ledger (the embedded Postgres unless ROLLOUT_DATABASE_URL is
set), the model's backend and the gateway on 127.0.0.1, opens one 'playground' episode seat in
the 'playground' run to get a key, and prints how to point the openai SDK, the anthropic SDK,
Claude Code and Codex at it. Every call made with the key is recorded as a turn of that seat.

`Playground` does the same inside a program (tests, notebooks):

```python
async with Playground("scripted", state_dir=".rollout") as pg:
    client = AsyncOpenAI(base_url=pg.base_url, api_key=pg.api_key)
```
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from rollout.errors import RolloutError
from rollout.gateway.core import Admission
from rollout.inference.base import InferenceBackend
from rollout.inference.factory import load_model
from rollout.launch.serve import LOOPBACK, serve_gateway
from rollout.ledger import EpisodeSpec, NotFound, SeatClaim
from rollout.net.server import AppServer
from rollout.settings import state_dir as resolve_state_dir
from rollout.tasks import stop_task

log = logging.getLogger("rollout.gateway")

PLAYGROUND_RUN = "playground"


class Playground:
    """Ledger + backend + gateway on loopback, and one playground seat's key.

    Args:
        model: `scripted` or a Hugging Face model folder (see `rollout.inference.factory`).
        port: the gateway's port (0: a free one).
        state_dir: where the embedded Postgres and cached tokenizers live (default: the
            settings' state folder, see `rollout.settings`).
        database_url: a Postgres URL instead of the embedded one.
        host: the address to listen on (loopback by default).
        lease_seconds: how long the seat's claim lasts between heartbeats.
    """

    def __init__(
        self,
        model: str = "scripted",
        *,
        port: int = 0,
        state_dir: str | os.PathLike[str] | None = None,
        database_url: str | None = None,
        host: str = LOOPBACK,
        lease_seconds: float = 120.0,
        admission: Admission | None = None,
    ) -> None:
        self.model = model
        self.port = port
        self.state_dir = resolve_state_dir(state_dir)
        self.database_url = database_url
        self.host = host
        self.lease_seconds = lease_seconds
        self.admission = admission
        self.claim: SeatClaim | None = None
        self.server: AppServer | None = None
        self._ledger: Any = None
        self._backend: InferenceBackend | None = None
        self._heartbeat: asyncio.Task[None] | None = None

    @property
    def api_key(self) -> str:
        if self.claim is None:
            raise RolloutError("the playground is not started")
        return self.claim.api_key

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1` (OpenAI clients, Codex)."""
        if self.server is None:
            raise RolloutError("the playground is not started")
        return self.server.base_url

    @property
    def root_url(self) -> str:
        """`http://127.0.0.1:PORT` (ANTHROPIC_BASE_URL)."""
        if self.server is None:
            raise RolloutError("the playground is not started")
        return self.server.root_url

    @property
    def ledger(self) -> Any:
        return self._ledger

    async def start(self) -> None:
        from rollout.ledger import Ledger

        self._ledger = ledger = await Ledger.connect(
            self.database_url, state_dir=str(self.state_dir)
        )
        try:
            renderer, self._backend = load_model(self.model, state_dir=self.state_dir)
            try:
                run = await ledger.get_run(PLAYGROUND_RUN)
            except NotFound:
                run = await ledger.create_run(
                    PLAYGROUND_RUN, PLAYGROUND_RUN, {"kind": "playground", "model": self.model}
                )
            # A new group per session (seconds since the epoch fit the column until 2038).
            await ledger.add_episodes(
                run.run_id,
                [
                    EpisodeSpec(
                        group_index=int(time.time()),
                        member=0,
                        parameters={"model": self.model},
                        seed=0,
                        kind="playground",
                    )
                ],
            )
            claim = await ledger.claim_seat(
                f"playground-{os.getpid()}", run_id=run.run_id, lease_seconds=self.lease_seconds
            )
            if claim is None:
                raise RolloutError("could not claim the playground seat")
            self.claim = claim
            self.server = await serve_gateway(
                ledger,
                renderer,
                self._backend,
                model_name=self.model,
                admission=self.admission,
                host=self.host,
                port=self.port,
            )
            self._heartbeat = asyncio.create_task(self._beat(), name="playground-heartbeat")
        except BaseException:
            await self.stop()
            raise

    async def _beat(self) -> None:
        while self.claim is not None:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self._ledger.heartbeat(self.claim, self.lease_seconds)
            except Exception as exc:  # keep serving; the key stops working when the claim ends
                log.warning("playground heartbeat failed: %s", exc)

    async def stop(self) -> None:
        if self._heartbeat is not None:
            await stop_task(self._heartbeat)
            self._heartbeat = None
        if self.server is not None:
            await self.server.stop()
            self.server = None
        if self.claim is not None and self._ledger is not None:
            with contextlib.suppress(Exception):
                await self._ledger.end_seat(self.claim, reward=0.0, status="completed")
            self.claim = None
        if self._backend is not None:
            await self._backend.close()
            self._backend = None
        if self._ledger is not None:
            await self._ledger.close()
            self._ledger = None

    async def __aenter__(self) -> Playground:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def instructions(self) -> str:
        """How to point each client at this playground (what `rollout playground` prints)."""
        assert self.claim is not None
        key, base, root = self.api_key, self.base_url, self.root_url
        return f"""\
rollout playground: model {self.model!r} at {base}
key: {key}
(run {PLAYGROUND_RUN!r}, episode {self.claim.episode_id}; every call is recorded as a turn)

openai SDK (Chat Completions or Responses):
  export OPENAI_BASE_URL={base}
  export OPENAI_API_KEY={key}

anthropic SDK / Claude Code:
  export ANTHROPIC_BASE_URL={root}
  export ANTHROPIC_AUTH_TOKEN={key}

Codex (~/.codex/config.toml):
  model = "{self.model}"
  model_provider = "rollout"

  [model_providers.rollout]
  name = "rollout playground"
  base_url = "{base}"
  env_key = "ROLLOUT_API_KEY"
  wire_api = "responses"

  export ROLLOUT_API_KEY={key}
"""


async def run_playground(
    model: str = "scripted",
    port: int = 0,
    state_dir: str | os.PathLike[str] | None = None,
    *,
    database_url: str | None = None,
    host: str = LOOPBACK,
    stop: asyncio.Event | None = None,
    echo: Callable[[str], None] = print,
) -> None:
    """Serve the playground until `stop` is set (or the task is cancelled: Ctrl-C).

    Prints the key and the environment variables for the openai SDK, the anthropic SDK,
    Claude Code and Codex.
    """
    async with Playground(
        model, port=port, state_dir=state_dir, database_url=database_url, host=host
    ) as playground:
        echo(playground.instructions())
        await (stop or asyncio.Event()).wait()


async def run_gateway(
    model: str = "scripted",
    *,
    port: int = 8000,
    host: str = LOOPBACK,
    state_dir: str | os.PathLike[str] | None = None,
    database_url: str | None = None,
    admission: Admission | None = None,
    stop: asyncio.Event | None = None,
    echo: Callable[[str], None] = print,
) -> None:
    """Serve the gateway for `model` with the ledger's keys until `stop` is set.

    Unlike the playground it opens no seat: keys come from seat claims made by runners.
    """
    from rollout.ledger import Ledger

    root = resolve_state_dir(state_dir)
    ledger = await Ledger.connect(database_url, state_dir=str(root))
    try:
        renderer, backend = load_model(model, state_dir=root)
        try:
            server = await serve_gateway(
                ledger,
                renderer,
                backend,
                model_name=model,
                admission=admission,
                host=host,
                port=port,
            )
            try:
                echo(f"rollout gateway: model {model!r} at {server.base_url}")
                await (stop or asyncio.Event()).wait()
            finally:
                await server.stop()
        finally:
            await backend.close()
    finally:
        await ledger.close()
