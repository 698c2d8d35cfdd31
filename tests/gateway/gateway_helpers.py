"""Shared pieces of the gateway tests (imported by conftest.py and the test modules)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rollout.contracts import Turn
from rollout.gateway import GatewayServer
from rollout.harness import RunContext
from rollout.inference.scripted import ScriptedBackend, last_user_message
from rollout.ledger import EpisodeSpec, Ledger, SeatClaim
from rollout.rendering import HFRenderer

TOOL_REPLY = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
FINAL_REPLY = "The sum is 5."
VERSION = 7

ADD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}


def tool_script(prompt_text: str) -> str:
    """Call `add` first; answer once the tool's result is in the last user turn."""
    return FINAL_REPLY if "<tool_response>" in last_user_message(prompt_text) else TOOL_REPLY


async def claim_new_seat(
    ledger: Ledger, *, run: str = "gw", lease_seconds: float = 60.0
) -> SeatClaim:
    """A fresh one-seat episode in run `run` (created if needed), claimed."""
    record = await ledger.create_run(run, "tests.gateway", {})
    index = len(await ledger.list_episodes(record.run_id, limit=10_000))
    await ledger.add_episodes(
        record.run_id, [EpisodeSpec(group_index=index, member=0, parameters={}, seed=index)]
    )
    claim = await ledger.claim_seat("tests", run_id=record.run_id, lease_seconds=lease_seconds)
    assert claim is not None
    return claim


@dataclass
class Served:
    """A running gateway, what it runs on, and one claimed seat."""

    server: GatewayServer
    backend: ScriptedBackend
    ledger: Ledger
    renderer: HFRenderer
    claim: SeatClaim

    @property
    def key(self) -> str:
        return self.claim.api_key

    async def turns(self, claim: SeatClaim | None = None) -> list[Turn]:
        c = claim or self.claim
        return await self.ledger.seat_turns(c.episode_id, c.agent, c.attempt)

    async def new_seat(self, **kwargs: Any) -> SeatClaim:
        return await claim_new_seat(self.ledger, **kwargs)

    def run_context(self, **extra: Any) -> RunContext:
        """The claimed seat's `RunContext`, with this gateway's URL and the seat's key."""
        claim = self.claim
        fields: dict[str, Any] = {
            "run_id": claim.run_id,
            "episode_id": claim.episode_id,
            "agent": claim.agent,
            "seed": claim.seed,
            "attempt": claim.attempt,
            "gateway_url": self.server.base_url,
            "api_key": claim.api_key,
        }
        return RunContext(**{**fields, **extra})


Serve = Callable[..., Awaitable[Served]]
"""The `serve` fixture: `await serve(script=..., **create_app_options)`."""
