"""max_lag on a real ledger: turns wait for servers to catch up, and changing it mid-run works."""

from __future__ import annotations

import asyncio

from rollout.gateway.admission import LagGate
from rollout.ledger import CheckpointRecord, Ledger
from rollout.ledger.leases import trainer_lease


async def publish(ledger: Ledger, run_id: str, version: int) -> None:
    lease = await ledger.acquire_lease(trainer_lease(run_id), "trainer-test")
    await ledger.record_checkpoint(
        lease,
        CheckpointRecord(
            run_id=run_id,
            version=version,
            parent_version=version - 1 if version else None,
            uri=f"runs/{run_id}/v{version}",
            kind="full",
            created_at=0.0,
            metadata={},
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
