"""Sandbox claims in the ledger: join, fence, finish/release, expiry, retire."""

from __future__ import annotations

import asyncio

import pytest

from rollout.ledger import Ledger, StaleFence
from rollout.ledger.errors import InvalidInput


async def _claim(
    ledger: Ledger, episode: str, holder: str = "r1", agent: int = 0, **kwargs: object
):
    options = {
        "run_id": "run",
        "agents": 2,
        "agent": agent,
        "attempt": 1,
        "holder": holder,
        "host": "h",
        "lease_seconds": 30.0,
    }
    options.update(kwargs)
    return await ledger.claim_sandbox("pool", episode_id=episode, **options)  # type: ignore[arg-type]


async def test_claim_join_finish_release(ledger: Ledger) -> None:
    assert await _claim(ledger, "e1") is None  # no instance yet
    record = await ledger.register_sandbox("pool", "h", {"port": 1}, seats=4, instance_id="i1")
    assert record.state == "idle" and record.clean and record.epoch == 0

    first = await _claim(ledger, "e1")
    assert first is not None and not first.joined and not first.needs_reset and not first.ready
    assert first.epoch == 1 and first.details == {"port": 1}
    joined = await _claim(ledger, "e1", holder="r2", agent=1)
    assert joined is not None and joined.joined and joined.epoch == 1 and not joined.ready
    # Another episode finds no free instance while e1 holds the only one.
    assert await _claim(ledger, "e2") is None

    await ledger.sandbox_ready(first, details={"port": 2})
    again = await _claim(ledger, "e1", holder="r3", agent=1)
    assert again is not None and again.ready and again.details == {"port": 2}

    assert await ledger.finish_sandbox_seat(first, 0) is False
    assert await ledger.finish_sandbox_seat(first, 0) is False  # a retry counts once
    assert await ledger.finish_sandbox_seat(joined, 1) is True  # every agent finished
    assert (await ledger.sandbox("i1")).state == "dirty"

    second = await _claim(ledger, "e2")
    assert second is not None and second.epoch == 2 and second.needs_reset
    with pytest.raises(StaleFence):
        await ledger.renew_sandbox(first)
    with pytest.raises(StaleFence):
        await ledger.sandbox_ready(first)
    with pytest.raises(StaleFence):
        await ledger.finish_sandbox_seat(first, 1)
    await ledger.sandbox_ready(second, reset=True, holder="r1")
    events = [(e.event, e.epoch) for e in await ledger.sandbox_events("i1")]
    assert events == [
        ("started", 0),
        ("claimed", 1),
        ("released", 1),
        ("claimed", 2),
        ("reset", 2),
    ]


async def test_expired_claim_is_taken_over_and_needs_reset(ledger: Ledger) -> None:
    await ledger.register_sandbox("pool", "h", {}, seats=2, instance_id="i1")
    dead = await _claim(ledger, "e1", lease_seconds=0.3)
    assert dead is not None
    assert await _claim(ledger, "e2") is None  # still held
    await asyncio.sleep(0.4)
    assert (await ledger.sandbox("i1")).state == "expired"
    # A late seat of the dead episode does not join an expired claim: it claims anew.
    taken = await _claim(ledger, "e2")
    assert taken is not None and taken.epoch == 2 and taken.needs_reset and not taken.joined
    with pytest.raises(StaleFence):
        await ledger.renew_sandbox(dead)
    events = [(e.event, e.epoch, e.episode_id) for e in await ledger.sandbox_events("i1")]
    assert events[-2:] == [("expired", 1, "e1"), ("claimed", 2, "e2")]


async def test_host_seats_and_retire(ledger: Ledger) -> None:
    await ledger.register_sandbox("pool", "other", {}, seats=4, instance_id="far")
    await ledger.register_sandbox("pool", "h", {}, seats=1, instance_id="small")
    assert await _claim(ledger, "e1") is None  # wrong host, and too few seats for two agents
    anywhere = await _claim(ledger, "e1", host=None)
    assert anywhere is not None and anywhere.instance_id == "far"
    assert await ledger.retire_sandbox("small", "crashed") is True
    assert await ledger.retire_sandbox("small", "crashed") is False
    listed = {r.instance_id: r.state for r in await ledger.list_sandboxes(include_retired=True)}
    assert listed == {"far": "claimed", "small": "retired"}
    assert [r.instance_id for r in await ledger.list_sandboxes()] == ["far"]
    # Shutdown retires only idle instances of the host.
    await ledger.register_sandbox("pool", "h", {}, seats=4, instance_id="idle")
    retired = await ledger.retire_idle_sandboxes("h", ["pool"], holder="r1")
    assert [r.instance_id for r in retired] == ["idle"]
    assert await ledger.retire_idle_sandboxes("other", holder="r1") == []  # "far" is claimed


async def test_concurrent_claims_of_one_episode_share_an_instance(ledger: Ledger) -> None:
    for index in range(3):
        await ledger.register_sandbox("pool", "h", {}, seats=4, instance_id=f"i{index}")
    claims = await asyncio.gather(
        *(_claim(ledger, "e1", holder=f"r{a}", agent=a, agents=4) for a in range(4))
    )
    assert {c.instance_id for c in claims if c is not None} == {"i0"}
    assert sum(1 for c in claims if c is not None and not c.joined) == 1


async def test_bad_input(ledger: Ledger) -> None:
    with pytest.raises(InvalidInput, match="seats"):
        await ledger.register_sandbox("pool", "h", {}, seats=0, instance_id="i0")
    with pytest.raises(InvalidInput, match="instance_id must not be empty, got ''"):
        await ledger.register_sandbox("pool", "h", {}, seats=1, instance_id="")
    await ledger.register_sandbox("pool", "h", {}, seats=1, instance_id="i1")
    await ledger.register_sandbox("pool", "h", {}, seats=1, instance_id="i1")  # nothing new
    with pytest.raises(InvalidInput, match="'i1' is registered already, in pool 'pool' on host"):
        await ledger.register_sandbox("other", "h", {}, seats=1, instance_id="i1")
    with pytest.raises(InvalidInput, match="lease_seconds"):
        await _claim(ledger, "e1", lease_seconds=0)


async def test_replayed_agent_takes_over_or_joins(ledger: Ledger) -> None:
    await ledger.register_sandbox("pool", "h", {}, seats=2, instance_id="i1")
    dead = await _claim(ledger, "e1", agent=0)
    assert dead is not None
    # Agent 0 is replayed (attempt 2) while its dead attempt's claim is live: nobody else plays
    # in that world, so the replay takes it over, with a reset.
    replay = await _claim(ledger, "e1", agent=0, attempt=2)
    assert replay is not None and not replay.joined and replay.needs_reset and replay.epoch == 2
    with pytest.raises(StaleFence):
        await ledger.renew_sandbox(dead)
    # With agent 1 still playing in the world, a replay of agent 0 joins instead.
    partner = await _claim(ledger, "e1", agent=1)
    assert partner is not None and partner.joined
    again = await _claim(ledger, "e1", agent=0, attempt=3)
    assert again is not None and again.joined and again.epoch == 2


async def test_a_clean_served_instance_is_claimed_from_any_host_until_used(
    ledger: Ledger,
) -> None:
    await ledger.register_sandbox("pool", "box", {}, seats=2, instance_id="local-to-box")
    await ledger.register_sandbox("pool", "box", {}, seats=2, instance_id="served", served=True)
    # From host h: box's own instance is not for it (only box can reset it); the served one is.
    claim = await _claim(ledger, "e1")
    assert claim is not None and claim.instance_id == "served" and not claim.needs_reset
    assert await _claim(ledger, "e2") is None
    await ledger.finish_sandbox_seat(claim, 0)
    assert await ledger.finish_sandbox_seat(claim, 1) is True
    # Used, it is dirty: no other host claims it; its host retires it (the used served ones
    # only) to start a fresh one.
    assert await _claim(ledger, "e2") is None
    spent = await ledger.retire_idle_sandboxes("box", ["pool"], holder="box-host", spent=True)
    assert [r.instance_id for r in spent] == ["served"]
    events = [(e.event, e.detail) for e in await ledger.sandbox_events("served")]
    assert events[-1] == ("retired", "used: replaced by its host")
    assert [r.instance_id for r in await ledger.list_sandboxes()] == ["local-to-box"]
