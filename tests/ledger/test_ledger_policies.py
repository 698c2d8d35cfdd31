"""Several policies in one run (migration 0016): each policy has its own version chain, steps,
consumed groups, conversions, serving and acknowledgements, and each turn records its policy."""

from __future__ import annotations

import dataclasses

import pytest

from rollout.contracts import DEFAULT_POLICY
from rollout.ledger import (
    CheckpointRecord,
    EpisodeSpec,
    Ledger,
    LedgerError,
    RunRecord,
    ServingRecord,
    StaleFence,
)
from rollout.ledger.leases import trainer_lease
from tests.ledger.ledger_helpers import turn_for


def checkpoint(run_id: str, policy: str, version: int) -> CheckpointRecord:
    return CheckpointRecord(
        run_id=run_id,
        version=version,
        parent_version=version - 1 if version else None,
        uri=f"runs/{run_id}/checkpoints/{policy}/v{version:06d}",
        kind="lora",
        created_at=0.0,
        metadata={},
        policy=policy,
    )


async def test_each_policy_trains_a_group_once_on_its_own_version_chain(
    ledger: Ledger, run: RunRecord
) -> None:
    rid = run.run_id
    lease = await ledger.acquire_lease(trainer_lease(rid), "t")
    await ledger.add_episodes(rid, [EpisodeSpec(0, m, {}, m, agents=2) for m in range(2)])
    while (claim := await ledger.claim_seat("r", run_id=rid)) is not None:
        policy = "chaser" if claim.agent == 0 else "evader"
        await ledger.record_turns([dataclasses.replace(turn_for(claim, 0), policy=policy)])
        await ledger.end_seat(claim, reward=1.0)
    for policy in ("chaser", "evader"):
        assert await ledger.record_checkpoint(lease, checkpoint(rid, policy, 0))
        [group] = await ledger.complete_groups(rid, 5, policy=policy)
        assert (group.group_index, group.policy) == (0, policy)
        turns = [t for e in group.episodes for t in e.turns]
        assert sorted((t.agent, t.policy) for t in turns) == [
            (0, "chaser"),
            (0, "chaser"),
            (1, "evader"),
            (1, "evader"),
        ]
    # The chaser's step 1 consumes group 0 for the chaser only.
    assert await ledger.record_train_step(
        lease, rid, 1, [0], {"r": 1.0}, checkpoint(rid, "chaser", 1)
    )
    assert await ledger.complete_groups(rid, 5, policy="chaser") == []
    assert [g.group_index for g in await ledger.complete_groups(rid, 5, policy="evader")] == [0]
    with pytest.raises(LedgerError, match=r"already consumed by step 1 \(policy 'chaser'\)"):
        await ledger.record_train_step(lease, rid, 2, [0], {}, checkpoint(rid, "chaser", 2))
    assert await ledger.record_train_step(
        lease, rid, 1, [0], {"r": 0.0}, checkpoint(rid, "evader", 1)
    )
    # A retry of a step is a no-op within its policy.
    assert not await ledger.record_train_step(lease, rid, 1, [0], {}, checkpoint(rid, "evader", 1))
    assert [(c.policy, c.version) for c in await ledger.checkpoints(rid, policy=None)] == [
        ("chaser", 0),
        ("chaser", 1),
        ("evader", 0),
        ("evader", 1),
    ]
    latest = await ledger.latest_checkpoint(rid, policy="evader")
    assert latest is not None and latest.uri.endswith("evader/v000001")
    assert await ledger.latest_checkpoint(rid) is None  # the run has no policy 'main'
    steps = await ledger.train_steps(rid, policy=None)
    assert [(s.policy, s.step, s.group_indices) for s in steps] == [
        ("chaser", 1, (0,)),
        ("evader", 1, (0,)),
    ]
    # Fencing holds for every policy's writes.
    stale = dataclasses.replace(lease, epoch=lease.epoch + 1)
    with pytest.raises(StaleFence):
        await ledger.record_checkpoint(stale, checkpoint(rid, "evader", 5))


async def test_serving_acks_and_lag_are_per_policy(ledger: Ledger, run: RunRecord) -> None:
    rid = run.run_id
    lease = await ledger.acquire_lease(trainer_lease(rid), "t")
    for policy, newest in (("a", 3), ("b", 1)):
        for version in range(newest + 1):
            await ledger.record_checkpoint(lease, checkpoint(rid, policy, version))
        assert await ledger.record_conversion(
            rid, newest, "local", f"{policy}-v{newest}", policy=policy
        )
        await ledger.set_serving(
            lease, ServingRecord(rid, newest, {"local": f"{policy}-v{newest}"}, 0.0, policy=policy)
        )
    await ledger.ack_serving(rid, "s1", 2, policy="a")
    await ledger.ack_serving(rid, "s1", 1, policy="b")
    assert await ledger.conversions(rid, 3, policy="a") == {"local": "a-v3"}
    assert await ledger.conversions(rid, 3, policy="b") == {}
    served = await ledger.serving(rid, policy="b")
    assert served is not None and (served.version, served.policy) == (1, "b")
    assert await ledger.serving(rid) is None
    assert await ledger.serving_acks(rid, policy="a") == {"s1": 2}
    assert await ledger.serving_acks(rid, policy="b") == {"s1": 1}
    a, b = await ledger.lag_view(rid, policy="a"), await ledger.lag_view(rid, policy="b")
    assert (a.newest, a.serving, a.policy, b.newest, b.serving, b.policy) == (3, 2, "a", 1, 1, "b")
    main = await ledger.lag_view(rid)
    assert (main.newest, main.serving, main.policy) == (None, None, "main")  # no 'main' here


async def test_a_run_without_policies_records_everything_as_main(
    ledger: Ledger, run: RunRecord
) -> None:
    rid = run.run_id
    await ledger.add_episodes(rid, [EpisodeSpec(0, 0, {}, 0)])
    claim = await ledger.claim_seat("r", run_id=rid)
    assert claim is not None
    await ledger.record_turns([turn_for(claim, 0)])
    await ledger.end_seat(claim, reward=1.0)
    [group] = await ledger.complete_groups(rid, 1)
    assert group.policy == DEFAULT_POLICY
    assert {t.policy for e in group.episodes for t in e.turns} == {DEFAULT_POLICY}
