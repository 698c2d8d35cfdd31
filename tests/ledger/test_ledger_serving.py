"""Conversions, fenced serving records and serving acknowledgements."""

from __future__ import annotations

import asyncio

import pytest

from rollout.ledger import Ledger, RunRecord, ServingRecord, StaleFence
from rollout.ledger.leases import trainer_lease


async def test_conversions_are_recorded_once(ledger: Ledger, run: RunRecord) -> None:
    rid = run.run_id
    assert await ledger.record_conversion(rid, 1, "local", "runs/x/v1-local")
    assert not await ledger.record_conversion(rid, 1, "local", "runs/x/v1-local")
    assert await ledger.record_conversion(rid, 1, "vllm", "runs/x/v1-vllm")
    assert await ledger.conversions(rid, 1) == {
        "local": "runs/x/v1-local",
        "vllm": "runs/x/v1-vllm",
    }
    assert await ledger.conversions(rid, 2) == {}


async def test_serving_is_fenced_and_the_latest_wins(ledger: Ledger, run: RunRecord) -> None:
    rid = run.run_id
    assert await ledger.serving(rid) is None
    lease = await ledger.acquire_lease(trainer_lease(rid), "a", ttl_seconds=0.05)
    assert await ledger.set_serving(lease, ServingRecord(rid, 0, {"local": "v0"}, 0.0))
    assert not await ledger.set_serving(lease, ServingRecord(rid, 0, {"local": "v0"}, 0.0))
    assert await ledger.set_serving(lease, ServingRecord(rid, 1, {"local": "v1"}, 0.0))
    current = await ledger.serving(rid)
    assert current is not None and (current.version, current.uris) == (1, {"local": "v1"})

    await asyncio.sleep(0.1)
    await ledger.acquire_lease(trainer_lease(rid), "b")
    with pytest.raises(StaleFence):
        await ledger.set_serving(lease, ServingRecord(rid, 2, {"local": "v2"}, 0.0))
    current = await ledger.serving(rid)
    assert current is not None and current.version == 1


async def test_acks_keep_the_latest_per_server(ledger: Ledger, run: RunRecord) -> None:
    rid = run.run_id
    assert await ledger.serving_acks(rid) == {}
    assert await ledger.ack_serving(rid, "s1", 0)
    assert not await ledger.ack_serving(rid, "s1", 0)
    assert await ledger.ack_serving(rid, "s2", 0)
    assert await ledger.ack_serving(rid, "s1", 1)
    assert await ledger.serving_acks(rid) == {"s1": 1, "s2": 0}
    assert list(await ledger.serving_acks(rid)) == ["s1", "s2"]  # by server name
    # The lag view's `serving`: the oldest of each server's newest acknowledgement.
    assert (await ledger.lag_view(rid)).serving == 0
    assert await ledger.ack_serving(rid, "s2", 2)
    assert (await ledger.lag_view(rid)).serving == 1
    assert await ledger.ack_serving(rid, "s1", 0)  # a restarted server serves an older one
    assert (await ledger.lag_view(rid)).serving == 0
    assert (await ledger.lag_view(rid, policy="other")).serving is None  # none of its servers
