"""Leases, complete groups, fenced train steps and checkpoints."""

from __future__ import annotations

import asyncio
from typing import LiteralString

import pytest

from rollout.ledger import (
    CheckpointRecord,
    EpisodeSpec,
    LeaseHeld,
    Ledger,
    LedgerError,
    RunRecord,
    SeatClaim,
    StaleFence,
)
from rollout.ledger.leases import trainer_lease
from tests.ledger.ledger_helpers import turn_for


def checkpoint(run_id: str, version: int, parent: int | None = None) -> CheckpointRecord:
    return CheckpointRecord(
        run_id=run_id,
        version=version,
        parent_version=parent,
        uri=f"runs/{run_id}/checkpoints/v{version:06d}",
        kind="lora",
        created_at=0.0,
        metadata={"rank": 8},
    )


async def _play(ledger: Ledger, run_id: str, *, status: str = "completed") -> list[SeatClaim]:
    """Claim every open seat, record two turns on each and end it."""
    claims = []
    while (claim := await ledger.claim_seat("r", run_id=run_id)) is not None:
        await ledger.record_turns([turn_for(claim, 0), turn_for(claim, 1)])
        await ledger.end_seat(claim, reward=float(claim.member), status=status)
        claims.append(claim)
    return claims


async def test_lease_is_renewed_by_its_holder_and_taken_over_when_expired(
    ledger: Ledger, run: RunRecord
) -> None:
    name = trainer_lease(run.run_id)
    first = await ledger.acquire_lease(name, "a", ttl_seconds=0.5)
    assert (first.name, first.holder, first.epoch) == (name, "a", 1)
    renewed = await ledger.acquire_lease(name, "a", ttl_seconds=0.5)
    assert renewed.epoch == 1 and renewed.expires_at >= first.expires_at
    with pytest.raises(LeaseHeld, match=r"held by 'a' \(epoch 1\)"):
        await ledger.acquire_lease(name, "b")
    await asyncio.sleep(0.6)
    taken = await ledger.acquire_lease(name, "b")
    assert (taken.holder, taken.epoch) == ("b", 2)
    # The old holder's writes under its lease are fenced out; the new holder's go through.
    with pytest.raises(StaleFence, match="taken over by 'b' at epoch 2"):
        await ledger.record_checkpoint(first, checkpoint(run.run_id, 0))
    assert await ledger.record_checkpoint(taken, checkpoint(run.run_id, 0))


async def test_complete_groups_returns_only_fully_ended_unconsumed_groups(
    ledger: Ledger, run: RunRecord
) -> None:
    rid = run.run_id
    await ledger.add_episodes(
        rid, [EpisodeSpec(g, m, {}, g * 2 + m, agents=2) for g in range(3) for m in range(2)]
    )
    await ledger.add_episodes(rid, [EpisodeSpec(0, 0, {}, 9, kind="eval")])
    assert await ledger.complete_groups(rid, 10) == []
    # Play group 0 fully and group 1 except its last seat.
    claims = [await ledger.claim_seat("r", run_id=rid, kinds=["train"]) for _ in range(7)]
    for claim in claims:
        assert claim is not None
        await ledger.record_turns([turn_for(claim, 1), turn_for(claim, 0)])
        await ledger.end_seat(claim, reward=1.0, status="failed" if claim.agent else "completed")
    groups = await ledger.complete_groups(rid, 10)
    assert [g.group_index for g in groups] == [0]
    group = groups[0]
    assert [e.member for e in group.episodes] == [0, 1]
    for episode in group.episodes:
        assert [(t.agent, t.index) for t in episode.turns] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert [(e.agent, e.status) for e in episode.ends] == [(0, "completed"), (1, "failed")]
        assert episode.ended

    lease = await ledger.acquire_lease(trainer_lease(rid), "t")
    assert await ledger.record_train_step(lease, rid, 1, [0], {"loss": 0.5}, checkpoint(rid, 1, 0))
    assert await ledger.complete_groups(rid, 10) == []  # consumed groups never come back
    await _play(ledger, rid)
    assert [g.group_index for g in await ledger.complete_groups(rid, 10)] == [1, 2]
    assert [g.group_index for g in await ledger.complete_groups(rid, 1)] == [1]
    # A trainer waiting for a whole step's groups gets none until that many are complete.
    assert await ledger.complete_groups(rid, 3, only_if_full=True) == []
    full = await ledger.complete_groups(rid, 2, only_if_full=True)
    assert [g.group_index for g in full] == [1, 2] and all(g.episodes for g in full)


async def test_record_train_step_records_step_checkpoint_and_is_idempotent(
    ledger: Ledger, run: RunRecord
) -> None:
    rid = run.run_id
    await ledger.add_episodes(rid, [EpisodeSpec(g, 0, {}, g) for g in range(2)])
    await _play(ledger, rid)
    lease = await ledger.acquire_lease(trainer_lease(rid), "t")
    assert await ledger.record_train_step(lease, rid, 0, [], {}, checkpoint(rid, 0))
    assert await ledger.record_train_step(
        lease, rid, 1, [0, 1], {"loss": 1.5}, checkpoint(rid, 1, 0)
    )
    assert not await ledger.record_train_step(
        lease, rid, 1, [1, 0], {"loss": 1.5}, checkpoint(rid, 1, 0)
    )  # a retry
    with pytest.raises(LedgerError, match="recorded before with groups"):
        await ledger.record_train_step(lease, rid, 1, [0], {}, checkpoint(rid, 1, 0))
    with pytest.raises(LedgerError, match="already consumed by step 1"):
        await ledger.record_train_step(lease, rid, 2, [1], {}, checkpoint(rid, 2, 1))
    steps = await ledger.train_steps(rid)
    assert [(s.step, s.group_indices, s.metrics) for s in steps] == [
        (0, (), {}),
        (1, (0, 1), {"loss": 1.5}),
    ]
    assert [c.version for c in await ledger.checkpoints(rid)] == [0, 1]
    latest = await ledger.latest_checkpoint(rid)
    assert latest is not None
    assert (latest.version, latest.parent_version, latest.kind, latest.metadata) == (
        1, 0, "lora", {"rank": 8}
    )  # fmt: skip
    assert latest.uri == checkpoint(rid, 1).uri and latest.created_at > 0


async def test_incomplete_or_unknown_groups_cannot_be_trained(
    ledger: Ledger, run: RunRecord
) -> None:
    rid = run.run_id
    await ledger.add_episodes(rid, [EpisodeSpec(0, m, {}, m) for m in range(2)])
    lease = await ledger.acquire_lease(trainer_lease(rid), "t")
    with pytest.raises(LedgerError, match=r"group 0 .* is not complete"):
        await ledger.record_train_step(lease, rid, 1, [0], {}, checkpoint(rid, 1))
    with pytest.raises(LedgerError, match=r"group 7 .* has no train episodes"):
        await ledger.record_train_step(lease, rid, 1, [7], {}, checkpoint(rid, 1))
    assert await ledger.train_steps(rid) == []
    assert await ledger.checkpoints(rid) == []


async def test_a_stale_trainer_cannot_record_a_step(ledger: Ledger, run: RunRecord) -> None:
    rid = run.run_id
    await ledger.add_episodes(rid, [EpisodeSpec(0, 0, {}, 1)])
    await _play(ledger, rid)
    old = await ledger.acquire_lease(trainer_lease(rid), "old", ttl_seconds=0.05)
    await asyncio.sleep(0.1)
    new = await ledger.acquire_lease(trainer_lease(rid), "new")
    assert new.epoch == old.epoch + 1

    with pytest.raises(StaleFence, match="taken over by 'new'"):
        await ledger.record_train_step(old, rid, 1, [0], {"loss": 1.0}, checkpoint(rid, 1))
    with pytest.raises(StaleFence):
        await ledger.record_checkpoint(old, checkpoint(rid, 1))
    # Nothing changed: no step, no checkpoint, the group is still there to train.
    assert await ledger.train_steps(rid) == []
    assert await ledger.latest_checkpoint(rid) is None
    assert [g.group_index for g in await ledger.complete_groups(rid, 5)] == [0]

    assert await ledger.record_train_step(new, rid, 1, [0], {"loss": 1.0}, checkpoint(rid, 1))
    assert [s.step for s in await ledger.train_steps(rid)] == [1]


async def test_record_checkpoint_outside_a_step(ledger: Ledger, run: RunRecord) -> None:
    rid = run.run_id
    lease = await ledger.acquire_lease(trainer_lease(rid), "t")
    assert await ledger.record_checkpoint(lease, checkpoint(rid, 0))
    assert not await ledger.record_checkpoint(lease, checkpoint(rid, 0))
    moved = CheckpointRecord(rid, 0, None, "elsewhere", "lora", 0.0, {})
    with pytest.raises(LedgerError, match="recorded before at"):
        await ledger.record_checkpoint(lease, moved)


async def test_episode_counts(ledger: Ledger, run: RunRecord) -> None:
    rid = run.run_id
    await ledger.add_episodes(rid, [EpisodeSpec(0, m, {}, m) for m in range(3)])
    claim = await ledger.claim_seat("r", run_id=rid)
    assert claim is not None
    await ledger.record_turn(turn_for(claim, 0))
    await ledger.end_seat(claim, reward=0.0, status="failed", error="boom")
    running = await ledger.claim_seat("r", run_id=rid)
    assert running is not None
    counts = await ledger.episode_counts(rid)
    assert counts == {"total": 3, "pending": 1, "running": 1, "ended": 1, "failed": 1}


async def test_episode_counts_of_episodes_with_several_seats(
    ledger: Ledger, run: RunRecord
) -> None:
    # An episode ends when its last seat does; one failed seat makes the ended episode failed,
    # and an episode with one seat claimed and one not is running, not pending.
    rid = run.run_id
    await ledger.add_episodes(rid, [EpisodeSpec(0, m, {}, m, agents=2) for m in range(3)])
    first = await ledger.claim_seat("r", run_id=rid)  # episode 0, agent 0
    assert first is not None
    await ledger.end_seat(first, reward=0.0, status="failed", error="boom")
    counts = await ledger.episode_counts(rid)
    assert counts == {"total": 3, "pending": 2, "running": 1, "ended": 0, "failed": 0}
    second = await ledger.claim_seat("r", run_id=rid)  # episode 0, agent 1
    assert second is not None and second.episode_id == first.episode_id
    await ledger.end_seat(second, reward=1.0)
    counts = await ledger.episode_counts(rid)
    assert counts == {"total": 3, "pending": 2, "running": 0, "ended": 1, "failed": 1}


async def test_the_trainer_lists_exactly_the_groups_a_step_may_consume(
    ledger: Ledger, run: RunRecord
) -> None:
    """One complete-group rule for both the trainer's read and the step's check: a group with
    an unended seat is neither listed nor consumable; eval seats never count for train groups."""
    rid = run.run_id
    await ledger.add_episodes(
        rid, [EpisodeSpec(g, m, {}, g, agents=2) for g in range(6) for m in range(2)]
    )
    await ledger.add_episodes(rid, [EpisodeSpec(g, 0, {}, g, kind="eval") for g in (2, 5, 7)])
    claims = await ledger.claim_seats("r", limit=100, run_id=rid)
    train = [c for c in claims if c.kind == "train"]
    evals = {c.group_index: c for c in claims if c.kind == "eval"}
    for claim in train:
        if claim.group_index == 2 and (claim.member, claim.agent) == (1, 1):
            continue  # group 2: one seat claimed, never ended
        if claim.group_index == 3 and (claim.member, claim.agent) == (0, 0):
            continue  # group 3: one seat never ended either
        failed = claim.group_index == 1 and claim.agent == 1
        await ledger.end_seat(claim, reward=1.0, status="failed" if failed else "completed")
    await ledger.end_seat(evals[2], reward=1.0)  # an ended eval seat does not complete group 2
    await ledger.end_seat(evals[7], reward=1.0)  # an eval-only group is no train group
    # Group 5's eval seat stays open: it does not hold back train group 5.
    lease = await ledger.acquire_lease(trainer_lease(rid), "t")
    assert await ledger.record_train_step(lease, rid, 1, [4], {}, checkpoint(rid, 1))

    listed = [g.group_index for g in await ledger.complete_groups(rid, 100)]
    assert listed == [0, 1, 5]
    consumable = []
    for index in range(8):
        try:
            await ledger.record_train_step(
                lease, rid, 10 + index, [index], {}, checkpoint(rid, 10 + index)
            )
        except LedgerError:
            continue
        consumable.append(index)
    assert consumable == listed
    assert await ledger.complete_groups(rid, 100) == []
    assert [s.step for s in await ledger.train_steps(rid, after=10)] == [11, 15]


async def test_the_groups_below_the_consumed_floor_are_skipped_and_none_is_lost(
    ledger: Ledger, run: RunRecord
) -> None:
    """The trainable-groups read starts at the first group the policy has not consumed. Groups
    consumed out of order, and a group added later below groups already consumed, still come
    back (to this process and to a fresh one) until a step consumes them."""
    rid = run.run_id
    await ledger.add_episodes(rid, [EpisodeSpec(g, 0, {}, g) for g in range(1, 6)])
    await _play(ledger, rid)
    lease = await ledger.acquire_lease(trainer_lease(rid), "t")
    assert [g.group_index for g in await ledger.complete_groups(rid, 10)] == [1, 2, 3, 4, 5]
    # Groups 2 and 3 first: group 1 (and group 0, not yet added) hold the floor at 0.
    assert await ledger.record_train_step(lease, rid, 1, [2, 3], {}, checkpoint(rid, 1))
    assert [g.group_index for g in await ledger.complete_groups(rid, 10)] == [1, 4, 5]
    await ledger.add_episodes(rid, [EpisodeSpec(0, 0, {}, 0)])
    await _play(ledger, rid)
    assert [g.group_index for g in await ledger.complete_groups(rid, 10)] == [1, 4, 5, 0]
    assert await ledger.record_train_step(lease, rid, 2, [0, 1], {}, checkpoint(rid, 2, 1))
    # Groups 0-3 are consumed: the floor is 4, and 4 and 5 are still there.
    assert [g.group_index for g in await ledger.complete_groups(rid, 10)] == [4, 5]
    fresh = await Ledger.connect(ledger.url, migrate=False)
    try:
        assert [g.group_index for g in await fresh.complete_groups(rid, 10)] == [4, 5]
        # A group added after the floor moved is found by both.
        await ledger.add_episodes(rid, [EpisodeSpec(6, 0, {}, 6)])
        await _play(ledger, rid)
        assert [g.group_index for g in await fresh.complete_groups(rid, 10)] == [4, 5, 6]
        assert await fresh.record_train_step(lease, rid, 3, [4, 5, 6], {}, checkpoint(rid, 3, 2))
        assert await fresh.complete_groups(rid, 10) == []
        assert await ledger.complete_groups(rid, 10) == []
    finally:
        await fresh.close()


async def test_groups_found_complete_are_not_read_again_and_come_back_until_consumed(
    ledger: Ledger, run: RunRecord
) -> None:
    """A trainer reads trainable groups at each wake-up; a group it found complete stays
    complete, so later reads leave it out of the scan (`Ledger._complete_groups`) and still
    return it, oldest first, beside the newly complete, until a step of any process consumes
    it."""
    rid = run.run_id
    await ledger.add_episodes(
        rid, [EpisodeSpec(g, m, {}, g * 2 + m) for g in range(4) for m in range(2)]
    )

    async def play(group: int) -> None:
        while (claim := await ledger.claim_seat("r", run_id=rid)) is not None:
            await ledger.record_turns([turn_for(claim, 0)])
            await ledger.end_seat(claim, reward=1.0)
            if claim.group_index == group and claim.member == 1:
                return

    await play(0)
    assert [g.group_index for g in await ledger.complete_groups(rid, 3)] == [0]
    assert ledger._complete_groups[(rid, "main")].keys() == {0}
    await ledger.complete_groups(rid, 3)
    await play(2)  # groups 1 and 2
    assert await ledger.complete_groups(rid, 3, only_if_full=True) != []
    assert sorted(ledger._complete_groups[(rid, "main")]) == [0, 1, 2]
    # The oldest first, whichever read found them; as many as asked for.
    assert [g.group_index for g in await ledger.complete_groups(rid, 2)] == [0, 1]
    lease = await ledger.acquire_lease(trainer_lease(rid), "t")
    assert await ledger.record_train_step(lease, rid, 1, [0, 1], {}, checkpoint(rid, 1))
    assert [g.group_index for g in await ledger.complete_groups(rid, 3)] == [2]
    await play(3)
    got = await ledger.complete_groups(rid, 3)
    assert [g.group_index for g in got] == [2, 3] and all(len(g.episodes) == 2 for g in got)

    other = await Ledger.connect(ledger.url, migrate=False)  # consumes group 2 meanwhile
    try:
        assert await other.record_train_step(lease, rid, 2, [2], {}, checkpoint(rid, 2, 1))
    finally:
        await other.close()
    assert [g.group_index for g in await ledger.complete_groups(rid, 3)] == [3]
    assert ledger._complete_groups[(rid, "main")].keys() == {3}


async def test_analyze_run_tables_gives_the_planner_the_tables_real_sizes(
    ledger: Ledger, run: RunRecord, database_url: str
) -> None:
    """A young run's tables look empty to the planner until they are analysed; the trainer
    analyses them as the run grows (`Ledger.analyze_run_tables`)."""
    import psycopg

    rid = run.run_id
    await ledger.add_episodes(
        rid, [EpisodeSpec(g, m, {}, g * 8 + m, agents=2) for g in range(40) for m in range(8)]
    )

    def estimated_seats() -> float:
        with psycopg.connect(database_url) as conn:
            row = conn.execute("SELECT reltuples FROM pg_class WHERE relname = 'seats'").fetchone()
        assert row is not None
        return float(row[0])

    assert estimated_seats() < 640  # never analysed: -1 (unknown)
    await ledger.analyze_run_tables()
    assert estimated_seats() == 640


async def test_the_trainable_groups_read_probes_by_key_under_a_generic_plan(
    ledger: Ledger, run: RunRecord, database_url: str
) -> None:
    """The trainer's read of trainable groups (`policy_group_status`, migration 0020) probes the
    consumed groups by their whole key, for the episodes from the floor on, whatever plan
    Postgres picks: under a generic plan (what a prepared statement may get) and stale
    statistics it neither scans `consumed_groups` nor joins it on (run, policy) alone."""
    import psycopg
    from psycopg import sql

    from rollout.ledger.training import TRAINABLE_GROUPS

    rid = run.run_id
    await ledger.add_episodes(rid, [EpisodeSpec(g, 0, {}, g) for g in range(60)])
    await _play(ledger, rid)
    lease = await ledger.acquire_lease(trainer_lease(rid), "t")
    assert await ledger.record_train_step(
        lease, rid, 1, list(range(50)), {"loss": 0.5}, checkpoint(rid, 1, 0)
    )
    query: LiteralString = (
        TRAINABLE_GROUPS.replace("%(policy)s", "$1")
        .replace("%(run_id)s", "$2")
        .replace("%(floor)s", "$3")
        .replace("%(limit)s", "$4")
        .replace("%(known)s", "$5")
    )
    execute = sql.SQL("EXECUTE trainable('main', {}, 45, 16, '{{52}}')").format(sql.Literal(rid))
    with psycopg.connect(database_url) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        prepare = sql.SQL("PREPARE trainable(text, text, int, int, int4[]) AS {}")
        conn.execute(prepare.format(sql.SQL(query)))
        explain = sql.SQL("EXPLAIN (ANALYZE, COSTS OFF) {}").format(execute)
        plan = "\n".join(row[0] for row in conn.execute(explain))
        rows = conn.execute(execute).fetchall()
    assert [(g, consumed) for g, _, consumed in rows] == [
        (g, False) for g in range(50, 60) if g != 52
    ]  # 52: known, and not consumed
    assert "Seq Scan on consumed_groups" not in plan, plan
    probe = plan[plan.index("consumed_groups") :].split("\n", 2)[1]
    assert "group_index = e.group_index" in probe and "Index Cond" in probe, plan


async def test_the_group_floor_walk_probes_each_group_by_key(
    ledger: Ledger, run: RunRecord, database_url: str
) -> None:
    """The walk to the first unconsumed group (`GROUP_FLOOR`, in every step's record) probes one
    key per group it passes, whatever plan Postgres picks: as an EXISTS it was a hash join over
    a sequential scan of the run's consumed groups at every step of the walk."""
    import psycopg
    from psycopg import sql

    from rollout.ledger.training import GROUP_FLOOR

    rid = run.run_id
    await ledger.add_episodes(rid, [EpisodeSpec(g, 0, {}, g) for g in range(60)])
    await _play(ledger, rid)
    lease = await ledger.acquire_lease(trainer_lease(rid), "t")
    assert await ledger.record_train_step(
        lease, rid, 1, [*range(40), 41, 42], {"loss": 0.5}, checkpoint(rid, 1, 0)
    )
    query: LiteralString = (
        GROUP_FLOOR.replace("%(floor)s", "$1")
        .replace("%(run_id)s", "$2")
        .replace("%(policy)s", "$3")
    )
    with psycopg.connect(database_url) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(sql.SQL("PREPARE walk(int, text, text) AS {}").format(sql.SQL(query)))
        plans = []
        for start in (0, 30):
            execute = sql.SQL("EXECUTE walk({}, {}, 'main')").format(start, sql.Literal(rid))
            explain = sql.SQL("EXPLAIN (ANALYZE, COSTS OFF) {}").format(execute)
            plans.append("\n".join(row[0] for row in conn.execute(explain)))
            assert conn.execute(execute).fetchall() == [(40,)]  # the first gap
    for plan in plans:
        assert "Seq Scan on consumed_groups" not in plan, plan
        assert "Hash" not in plan and "Index Only Scan using consumed_groups_pkey" in plan, plan
