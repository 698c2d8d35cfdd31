"""Rows become records by column name: every field of every record read comes back as written.

Each value differs from the others of its type, so a read that took a column for another
(by position, or under a wrong name) would fail here.
"""

from __future__ import annotations

import dataclasses

from rollout.contracts import Turn
from rollout.ledger import (
    CheckpointRecord,
    EpisodeSpec,
    KeyInfo,
    Ledger,
    SeatEnd,
    SeatState,
    ServingRecord,
)
from rollout.ledger.leases import trainer_lease


async def test_every_record_reads_back_field_by_field(ledger: Ledger) -> None:
    run = await ledger.create_run("rows", "env:rows", {"lr": 0.25})
    assert (run.name, run.environment, run.config) == ("rows", "env:rows", {"lr": 0.25})
    assert await ledger.get_run(run.run_id) == run == (await ledger.list_runs())[0]
    rid = run.run_id
    spec = EpisodeSpec(group_index=5, member=3, parameters={"q": "x"}, seed=11, agents=2)
    [episode_id] = await ledger.add_episodes(rid, [spec])

    claim = await ledger.claim_seat("runner-7", run_id=rid, lease_seconds=30)
    assert claim is not None
    assert dataclasses.asdict(claim) == {
        "run_id": rid,
        "episode_id": episode_id,
        "agent": 0,
        "attempt": 1,
        "runner": "runner-7",
        "parameters": {"q": "x"},
        "seed": 11,
        "agents": 2,
        "api_key": claim.api_key,
        "kind": "train",
        "group_index": 5,
        "member": 3,
    }
    assert claim.api_key.startswith("rk-")
    assert await ledger.resolve_key(claim.api_key) == KeyInfo(rid, episode_id, 0, 1)

    turn = Turn(
        episode_id=episode_id,
        agent=0,
        attempt=1,
        index=4,
        prompt_tokens=(101, 102),
        completion_tokens=(201, 202, 203),
        logprobs=(-0.5, -1.5, -2.5),
        version=9,
        stop_reason="length",
        extends_previous=True,
        started_at=1000.25,
        ended_at=1001.75,
        temperature=0.375,
        request={"protocol": "chat"},
    )
    assert await ledger.record_turn(turn)
    assert await ledger.seat_turns(episode_id, 0, 1) == [turn]
    assert await ledger.last_turn(episode_id, 0, 1) == turn
    [(cursor, tailed)] = await ledger.turns_for_run(rid)
    assert cursor > 0 and tailed == turn

    await ledger.end_seat(
        claim, reward=0.625, score={"s": 1}, metrics={"m": 2.0}, status="failed", error="e"
    )
    record = await ledger.episode(episode_id)
    assert (record.episode_id, record.run_id, record.group_index, record.member) == (
        episode_id, rid, 5, 3
    )  # fmt: skip
    assert (record.parameters, record.seed, record.agents, record.kind) == (
        {"q": "x"},
        11,
        2,
        "train",
    )
    assert record.created_at > 0 and record.turns == (turn,)
    [end] = record.ends
    assert dataclasses.replace(end, created_at=0.0) == SeatEnd(
        episode_id, 0, 1, "failed", 0.625, {"s": 1}, {"m": 2.0}, "e"
    )
    assert end.created_at > 0
    ended, waiting = record.seats
    assert ended == SeatState(agent=0, attempt=1, runner="runner-7", expires_at=None, ended=True)
    assert waiting == SeatState(agent=1, attempt=0, runner=None, expires_at=None, ended=False)

    lease = await ledger.acquire_lease(trainer_lease(rid), "holder-3", ttl_seconds=40)
    assert (lease.name, lease.holder, lease.epoch) == (trainer_lease(rid), "holder-3", 1)
    assert lease.expires_at > record.created_at
    checkpoint = CheckpointRecord(rid, 6, 4, "blobs/v6", "lora", 0.0, {"rank": 8})
    assert await ledger.record_train_step(lease, rid, 6, [], {"loss": 0.125}, checkpoint)
    [stored] = await ledger.checkpoints(rid)
    assert dataclasses.replace(stored, created_at=0.0) == checkpoint and stored.created_at > 0
    assert await ledger.latest_checkpoint(rid) == stored
    [step] = await ledger.train_steps(rid)
    assert (step.run_id, step.step, step.group_indices, step.metrics) == (
        rid, 6, (), {"loss": 0.125}
    )  # fmt: skip

    await ledger.set_serving(lease, ServingRecord(rid, 6, {"local": "blobs/v6-local"}, 0.0))
    serving = await ledger.serving(rid)
    assert serving is not None
    assert (serving.run_id, serving.version, serving.uris) == (rid, 6, {"local": "blobs/v6-local"})
    await ledger.ack_serving(rid, "server-2", 5)
    await ledger.set_setting(rid, "max_lag", 3)
    view = await ledger.lag_view(rid)
    assert (view.newest, view.serving, view.max_lag) == (6, 5, 3)
