"""What a minecraft_team episode left in its world, read from the server itself (its control
port), for the tests that play one: each agent's spot holds the block it placed, on its gold
marker, and the cells the scripted builders stood beside are untouched."""

from __future__ import annotations

from rollout.sandboxes import connect


async def check_built(address: str, control_port: int, seed: int, agents: int = 4) -> None:
    """Assert that the `agents` builders of the episode of `seed` built on their spots."""
    from minecraft_team.environment import BLOCK, MARKER, spots

    targets = spots(seed, agents)
    channel = await connect(address, control_port, "test")
    try:
        placed = await channel.request({"op": "blocks", "positions": targets})
        markers = [[x, y - 1, z] for x, y, z in targets]
        below = await channel.request({"op": "blocks", "positions": markers})
        beside = [[x + 1, y, z + 1] for x, y, z in targets]
        around = await channel.request({"op": "blocks", "positions": beside})
    finally:
        await channel.close()
    assert placed["names"] == [BLOCK] * agents
    assert below["names"] == [MARKER] * agents
    assert around["names"] == ["air"] * agents
