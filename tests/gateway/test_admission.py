"""max_lag on a real ledger: turns wait for servers to catch up, and changing it mid-run works."""

from __future__ import annotations

import asyncio

from rollout.gateway.admission import LagGate
from rollout.gateway.keys import KeyResolver
from rollout.ledger import CheckpointRecord, EpisodeSpec, Ledger
from rollout.ledger.leases import trainer_lease


async def publish(ledger: Ledger, run_id: str, version: int, policy: str = "main") -> None:
    lease = await ledger.acquire_lease(trainer_lease(run_id), "trainer-test")
    await ledger.record_checkpoint(
        lease,
        CheckpointRecord(
            run_id=run_id,
            version=version,
            parent_version=version - 1 if version else None,
            uri=f"runs/{run_id}/{policy}/v{version}",
            kind="full",
            created_at=0.0,
            metadata={},
            policy=policy,
        ),
    )


async def test_turns_wait_until_servers_are_within_max_lag(ledger: Ledger) -> None:
    run = await ledger.create_run("lag", "parity.environment:environment", {})
    await ledger.set_setting(run.run_id, "max_lag", 1)
    gate = LagGate(ledger, run.run_id)
    await publish(ledger, run.run_id, 0)
    # No server has acknowledged anything yet: nothing may sample.
    waiting = asyncio.create_task(gate.admit())
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await ledger.ack_serving(run.run_id, "server-a", 0)
    state = await asyncio.wait_for(waiting, 5)
    assert (state.newest, state.serving) == (0, 0)

    await publish(ledger, run.run_id, 1)
    assert (await gate.admit(timeout=5)).serving == 0  # one behind: allowed with max_lag 1
    await publish(ledger, run.run_id, 2)
    waiting = asyncio.create_task(gate.admit())
    await asyncio.sleep(0.3)
    assert not waiting.done()  # two behind: waits
    await ledger.ack_serving(run.run_id, "server-a", 1)
    assert (await asyncio.wait_for(waiting, 5)).serving == 1


async def test_changing_max_lag_mid_run_takes_effect(ledger: Ledger) -> None:
    run = await ledger.create_run("lag-change", "parity.environment:environment", {})
    await ledger.set_setting(run.run_id, "max_lag", 0)
    gate = LagGate(ledger, run.run_id)
    for version in range(3):
        await publish(ledger, run.run_id, version)
    await ledger.ack_serving(run.run_id, "server-a", 0)
    waiting = asyncio.create_task(gate.admit())
    await asyncio.sleep(0.3)
    assert not waiting.done()  # serving 0, newest 2, max_lag 0
    await ledger.set_setting(run.run_id, "max_lag", 2)
    state = await asyncio.wait_for(waiting, 5)
    assert state.max_lag == 2 and state.admits
    await ledger.set_setting(run.run_id, "max_lag", 1)
    waiting = asyncio.create_task(gate.admit())
    await asyncio.sleep(0.3)
    assert not waiting.done()  # tightened again: later turns wait
    waiting.cancel()


async def test_a_burst_of_turns_shares_one_read(ledger: Ledger) -> None:
    run = await ledger.create_run("lag-burst", "parity.environment:environment", {})
    await publish(ledger, run.run_id, 0)
    await ledger.ack_serving(run.run_id, "server-a", 0)
    gate = LagGate(ledger, run.run_id)
    reads = 0
    original = gate._read

    async def counting_read():
        nonlocal reads
        reads += 1
        return await original()

    gate._read = counting_read  # type: ignore[method-assign]
    await asyncio.gather(*(gate.admit() for _ in range(50)))
    assert 1 <= reads <= 3


async def test_a_lag_view_read_with_the_key_admits_without_a_read_of_its_own(
    ledger: Ledger,
) -> None:
    run = await ledger.create_run("lag-key", "parity.environment:environment", {})
    await ledger.set_setting(run.run_id, "max_lag", 1)
    await publish(ledger, run.run_id, 0)
    await ledger.ack_serving(run.run_id, "server-a", 0)
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, seed=0)])
    claim = await ledger.claim_seat("runner-a", run_id=run.run_id)
    assert claim is not None
    gate = LagGate(ledger, run.run_id)
    reads = 0
    original = gate._read

    async def counting_read():
        nonlocal reads
        reads += 1
        return await original()

    gate._read = counting_read  # type: ignore[method-assign]
    info = await ledger.resolve_key(claim.api_key)
    assert info is not None and info.lag is not None
    assert (info.lag.newest, info.lag.serving, info.lag.max_lag) == (0, 0, 1)
    assert (await gate.admit(timeout=5, read=info.lag)).serving == 0
    assert reads == 0

    # A view that does not admit is not the last word: the gate waits on the ledger as before.
    await publish(ledger, run.run_id, 1)
    await publish(ledger, run.run_id, 2)
    info = await ledger.resolve_key(claim.api_key)
    assert info is not None and info.lag is not None and info.lag.newest == 2
    waiting = asyncio.create_task(gate.admit(timeout=10, read=info.lag))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await ledger.ack_serving(run.run_id, "server-a", 1)
    assert (await asyncio.wait_for(waiting, 5)).serving == 1
    assert reads >= 1


async def test_a_key_brings_the_default_policys_lag_view_and_another_policys_gate_reads_its_own(
    ledger: Ledger,
) -> None:
    """With several policies the key's view (policy main's) admits only main's turns: the
    gate of another policy, whose server lags behind, reads that policy's versions."""
    run = await ledger.create_run("lag-policies", "parity.environment:environment", {})
    await ledger.set_setting(run.run_id, "max_lag", 0)
    await publish(ledger, run.run_id, 0)
    await ledger.ack_serving(run.run_id, "server-a", 0)
    for version in range(3):
        await publish(ledger, run.run_id, version, policy="scout")
    await ledger.ack_serving(run.run_id, "server-a", 1, policy="scout")
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, seed=0)])
    claim = await ledger.claim_seat("runner-a", run_id=run.run_id)
    assert claim is not None
    info = await ledger.resolve_key(claim.api_key)
    assert info is not None and info.lag is not None
    assert (info.lag.policy, info.lag.newest, info.lag.serving) == ("main", 0, 0)
    main, scout = LagGate(ledger, run.run_id), LagGate(ledger, run.run_id, policy="scout")
    assert (await main.admit(timeout=5, read=info.lag)).serving == 0
    waiting = asyncio.create_task(scout.admit(timeout=10, read=info.lag))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # scout serves 1 of 2 with max_lag 0: main's view did not admit it
    await ledger.ack_serving(run.run_id, "server-a", 2, policy="scout")
    state = await asyncio.wait_for(waiting, 5)
    assert (state.newest, state.serving) == (2, 2)
    # A policy's own max_lag wins over the run's setting.
    await publish(ledger, run.run_id, 3, policy="scout")
    relaxed = LagGate(ledger, run.run_id, policy="scout", max_lag=1)
    assert (await relaxed.admit(timeout=5)).max_lag == 1


async def test_a_cached_key_brings_no_lag_view(ledger: Ledger) -> None:
    """Only a key resolved for this turn carries a lag view: a cached one is older than it."""
    run = await ledger.create_run("lag-cache", "parity.environment:environment", {})
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, seed=0)])
    claim = await ledger.claim_seat("runner-a", run_id=run.run_id)
    assert claim is not None
    keys = KeyResolver(ledger, ttl=60.0)
    first = await keys.resolve([claim.api_key])
    assert first.lag is not None and first.lag.newest is None and first.lag.serving is None
    again = await keys.resolve([claim.api_key])
    assert again == first and again.lag is None
