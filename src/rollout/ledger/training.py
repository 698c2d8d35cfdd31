"""Training facts: complete groups, train steps and checkpoints.

The trainer reads complete groups not yet trained (`complete_groups`), trains on them, and
records the step with `record_train_step`: one transaction, fenced by the trainer's lease, that
marks the groups consumed (a group is trained at most once), records the step's metrics and
its checkpoint. Which groups are complete is decided in one place, the `group_status` view
(migration 0002): the trainer's read and the step's check both ask it.

A checkpoint's version is the number of optimizer steps behind it; (run, policy, version) is
its key and its URI never changes. Everything here is per policy (`rollout.runs.policies`; the
default, `main`, for a run that names none): each policy has its own version chain and steps,
and a group is trained at most once by each policy (`policy_group_status`, migration 0016).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, LiteralString

from psycopg.rows import class_row, dict_row, kwargs_row

from rollout.contracts import DEFAULT_POLICY
from rollout.ledger.connection import Conn, LedgerConnection, fetch_all, fetch_one
from rollout.ledger.episodes import load_episodes
from rollout.ledger.errors import InvalidInput, LedgerError
from rollout.ledger.inputs import jsonb, known_run, metrics_jsonb
from rollout.ledger.leases import check_fence
from rollout.ledger.records import (
    CheckpointRecord,
    EpisodeRecord,
    GroupRecord,
    Lease,
    TrainStepRecord,
)

# Complete train groups no step has consumed, oldest first (see `group_status`), from group
# `floor` on: every group below it is consumed (`GROUP_FLOOR`), so the scan covers the groups of
# the last few steps instead of every episode of the run (at 15,360 episodes: 64 ms -> 2 ms).
# `policy_group_status` probes each episode's seats and consumption by key (migration 0020), so
# neither a generic plan nor a young run's empty-table statistics can make it scan the run.
# Groups this process found complete before (`known`, a complete group stays complete) are left
# out of the scan: a trainer waiting for a step's groups reads at each seat-end wake-up (about
# six a step of the README's parity run), and each read probed every episode from the floor on,
# the complete ones again each time. The known groups that a step consumed since (in any
# process) come back marked `consumed`, for the caller to forget: a probe of each by key.
TRAINABLE_GROUPS: LiteralString = """
(SELECT group_index, first_seq, false AS consumed FROM policy_group_status(%(policy)s)
 WHERE run_id = %(run_id)s AND kind = 'train' AND group_index >= %(floor)s AND complete
   AND consumed_by_step IS NULL AND group_index <> ALL(%(known)s::int4[])
 ORDER BY first_seq
 LIMIT %(limit)s)
UNION ALL
SELECT k.g, NULL, true FROM unnest(%(known)s::int4[]) k(g)
WHERE (SELECT true FROM consumed_groups c
       WHERE c.run_id = %(run_id)s AND c.policy = %(policy)s AND c.group_index = k.g LIMIT 1)
"""
# The first group index at or after `floor` that `policy` has not consumed. A consumed group
# stays consumed, so every index below the answer is consumed whatever is inserted later (a
# group added below it would have to be consumed already): it only ever moves up. Each step of
# the walk is a probe of one key (a scalar subquery, never flattened: as an EXISTS the planner
# made it a hash join over a sequential scan of the run's consumed groups at every step of the
# walk, 3.7 ms at 640 groups and growing with the run; 0.2 ms as probes).
GROUP_FLOOR: LiteralString = """
WITH RECURSIVE walk(g) AS (
    SELECT %(floor)s::int4
    UNION ALL
    SELECT walk.g + 1 FROM walk
    WHERE (SELECT true FROM consumed_groups c
           WHERE c.run_id = %(run_id)s AND c.policy = %(policy)s AND c.group_index = walk.g
           LIMIT 1)
)
SELECT max(g) AS floor FROM walk
"""
# The same view, for the groups a step is about to consume.
GROUPS_TO_CONSUME: LiteralString = """
SELECT group_index, complete, consumed_by_step FROM policy_group_status(%(policy)s)
WHERE run_id = %(run_id)s AND kind = 'train' AND group_index = ANY(%(groups)s)
ORDER BY group_index
"""
GROUP_EPISODE_IDS: LiteralString = """
SELECT episode_id FROM episodes
WHERE run_id = %(run_id)s AND kind = 'train' AND group_index = ANY(%(groups)s)
ORDER BY group_index, member
"""
INSERT_TRAIN_STEP: LiteralString = """
INSERT INTO train_steps (run_id, policy, step, group_indices, metrics, lease_name,
                         lease_epoch)
VALUES (%(run_id)s, %(policy)s, %(step)s, %(groups)s, %(metrics)s, %(lease_name)s,
        %(lease_epoch)s)
ON CONFLICT DO NOTHING
RETURNING true AS inserted
"""
TRAIN_STEP_GROUPS: LiteralString = (
    "SELECT group_indices FROM train_steps"
    " WHERE run_id = %(run_id)s AND policy = %(policy)s AND step = %(step)s"
)
# The tables a run's frequent statements read, analysed as the run grows (`analyze_run_tables`):
# until autovacuum first analyses a table (a minute or more into a run: its launcher wakes once a
# minute), the planner takes a young run's tables for nearly empty and may join them by scanning.
ANALYZE_RUN_TABLES: LiteralString = (
    "ANALYZE episodes, seats, seat_claims, seat_ends, turns, consumed_groups, settings,"
    " checkpoints, serving_acks"
)
CONSUME_GROUPS: LiteralString = """
INSERT INTO consumed_groups (run_id, policy, group_index, step)
SELECT %(run_id)s, %(policy)s, g, %(step)s FROM unnest(%(groups)s::int4[]) g
"""
TRAIN_STEPS: LiteralString = """
SELECT run_id, step, group_indices, metrics, extract(epoch FROM created_at)::float8 AS created_at,
       policy
FROM train_steps
WHERE run_id = %(run_id)s AND step > %(after)s AND (%(policy)s::text IS NULL OR policy = %(policy)s)
ORDER BY step, policy
"""
# created_at: the clock at the transaction's last statement, not its start, so it is within a
# commit of when the checkpoint became visible (max_lag checks).
INSERT_CHECKPOINT: LiteralString = """
INSERT INTO checkpoints (run_id, policy, version, parent_version, uri, kind, metadata,
                         lease_epoch, created_at)
VALUES (%(run_id)s, %(policy)s, %(version)s, %(parent_version)s, %(uri)s, %(kind)s,
        %(metadata)s, %(lease_epoch)s, clock_timestamp())
ON CONFLICT DO NOTHING
RETURNING true AS inserted
"""
CHECKPOINT_URI: LiteralString = (
    "SELECT uri FROM checkpoints"
    " WHERE run_id = %(run_id)s AND policy = %(policy)s AND version = %(version)s"
)
CHECKPOINT_COLUMNS: LiteralString = (
    "run_id, version, parent_version, uri, kind,"
    " extract(epoch FROM created_at)::float8 AS created_at, metadata, policy"
)
# Every policy's checkpoints when %(policy)s is NULL.
CHECKPOINTS: LiteralString = (
    "SELECT " + CHECKPOINT_COLUMNS + " FROM checkpoints WHERE run_id = %(run_id)s"
    " AND (%(policy)s::text IS NULL OR policy = %(policy)s) AND version > %(after)s"
    " ORDER BY policy, version"
)
LATEST_CHECKPOINT: LiteralString = (
    "SELECT " + CHECKPOINT_COLUMNS + " FROM checkpoints"
    " WHERE run_id = %(run_id)s AND policy = %(policy)s ORDER BY version DESC LIMIT 1"
)


def _train_step(*, group_indices: Sequence[int], **columns: Any) -> TrainStepRecord:
    return TrainStepRecord(group_indices=tuple(group_indices), **columns)


async def check_groups(
    conn: Conn, run_id: str, groups: list[int], policy: str = DEFAULT_POLICY
) -> None:
    """Raise LedgerError unless every group is a complete train group no step of `policy`
    consumed."""
    params = {"run_id": run_id, "groups": groups, "policy": policy}
    found = {
        row["group_index"]: row
        for row in await fetch_all(conn, dict_row, GROUPS_TO_CONSUME, params)
    }
    for row in found.values():
        if row["consumed_by_step"] is not None:
            raise LedgerError(
                f"group {row['group_index']} of run {run_id!r} was already consumed by step "
                f"{row['consumed_by_step']} (policy {policy!r})"
            )
    for index in groups:
        if index not in found:
            raise LedgerError(f"group {index} of run {run_id!r} has no train episodes")
        if not found[index]["complete"]:
            raise LedgerError(f"group {index} of run {run_id!r} is not complete")


async def insert_checkpoint(conn: Conn, lease: Lease, checkpoint: CheckpointRecord) -> bool:
    """Inside a fenced transaction: record the checkpoint; False if it was recorded before.

    Raises:
        LedgerError: the version was recorded before with another URI.
    """
    if checkpoint.version < 0:
        raise InvalidInput(f"checkpoint.version must be >= 0, got {checkpoint.version!r}")
    params = {
        "run_id": checkpoint.run_id,
        "policy": checkpoint.policy,
        "version": checkpoint.version,
        "parent_version": checkpoint.parent_version,
        "uri": checkpoint.uri,
        "kind": checkpoint.kind,
        "metadata": jsonb("checkpoint.metadata", checkpoint.metadata),
        "lease_epoch": lease.epoch,
    }
    with known_run(checkpoint.run_id):
        inserted = await fetch_one(conn, dict_row, INSERT_CHECKPOINT, params)
    if inserted is not None:
        return True
    recorded = await fetch_one(conn, dict_row, CHECKPOINT_URI, params)
    if recorded is not None and recorded["uri"] != checkpoint.uri:
        raise LedgerError(
            f"checkpoint version {checkpoint.version} of run {checkpoint.run_id!r} (policy "
            f"{checkpoint.policy!r}) was "
            f"recorded before at {recorded['uri']!r}, not {checkpoint.uri!r}"
        )
    return False


async def _group_floor(conn: Conn, run_id: str, policy: str, floor: int) -> int:
    """`GROUP_FLOOR` from `floor` (a floor known before: the walk starts there)."""
    params = {"run_id": run_id, "policy": policy, "floor": floor}
    row = await fetch_one(conn, dict_row, GROUP_FLOOR, params)
    assert row is not None  # an aggregate without GROUP BY always returns its row
    return int(row["floor"])


class TrainingMixin(LedgerConnection):
    """Complete groups, train steps and checkpoints (see the module docstring)."""

    async def analyze_run_tables(self) -> None:
        """Refresh the planner's statistics of the tables a run's frequent statements read.

        The trainer calls it as its run grows (`rollout.training.loop`), so that plans follow
        the tables' real sizes before autovacuum first gets to them. A role whose user does not
        own the tables gets a warning from Postgres and nothing changes.
        """
        async with self._pool.connection() as conn:
            await conn.execute(ANALYZE_RUN_TABLES)

    async def complete_groups(
        self,
        run_id: str,
        limit: int,
        *,
        policy: str = DEFAULT_POLICY,
        only_if_full: bool = False,
    ) -> list[GroupRecord]:
        """Complete 'train' groups not yet consumed by a train step of `policy`, oldest first.

        A group is complete when every episode of it has every seat ended (a failed seat counts
        as ended; the `group_status` view). Each episode carries the turns of each seat's
        winning attempt, by agent then index, and its ends.

        Args:
            run_id: The run.
            limit: The most groups to return.
            policy: The policy whose train steps have not consumed them (each policy trains a
                group once, on its own agents' turns).
            only_if_full: Return no group unless `limit` are complete: a trainer that waits
                for a whole step's groups then reads no episode until it has them (reading
                them at each wake-up cost a step as many reads as it has groups).
        """
        if limit <= 0:
            return []
        async with self._pool.connection() as conn:
            floor = self._group_floors.get((run_id, policy))
            if floor is None:  # once per run and policy in this process; steps move it on
                floor = await _group_floor(conn, run_id, policy, 0)
                self._group_floors[(run_id, policy)] = floor
            known = self._complete_groups.setdefault((run_id, policy), {})
            params = {
                "run_id": run_id,
                "limit": limit,
                "policy": policy,
                "floor": floor,
                "known": sorted(known),
            }
            for row in await fetch_all(conn, dict_row, TRAINABLE_GROUPS, params):
                if row["consumed"]:
                    known.pop(row["group_index"], None)
                else:
                    known[row["group_index"]] = row["first_seq"]
            # The oldest first, as the read orders them: the new rows are the oldest `limit`
            # of the groups not known, so the oldest `limit` of both are among them and `known`.
            groups = sorted(known, key=known.__getitem__)[:limit]
            if not groups or (only_if_full and len(groups) < limit):
                return []
            params = {"run_id": run_id, "groups": groups}
            rows = await fetch_all(conn, dict_row, GROUP_EPISODE_IDS, params)
            episodes = await load_episodes(
                conn, [row["episode_id"] for row in rows], with_turns=True
            )
        by_group: dict[int, list[EpisodeRecord]] = defaultdict(list)
        for record in episodes:
            by_group[record.group_index].append(record)
        return [GroupRecord(run_id, index, tuple(by_group[index]), policy) for index in groups]

    async def record_train_step(
        self,
        lease: Lease,
        run_id: str,
        step: int,
        group_indices: Sequence[int],
        metrics: dict[str, float],
        checkpoint: CheckpointRecord,
    ) -> bool:
        """Fenced; atomically marks the groups consumed and records the step + checkpoint.

        Idempotent on (run, policy, step): a retry with the same groups returns False. The step
        is `checkpoint.policy`'s: it consumes the groups for that policy only.

        Raises:
            StaleFence: the lease was taken over (nothing is written).
            LedgerError: a group is not a complete train group, was consumed by another step,
                or the step was recorded before with other groups, or the checkpoint's version
                was recorded before with another URI.
        """
        if step < 0:
            raise InvalidInput(f"step must be >= 0, got {step!r}")
        if checkpoint.run_id != run_id:
            raise InvalidInput(
                f"checkpoint.run_id {checkpoint.run_id!r} is not the step's run {run_id!r}"
            )
        groups = sorted({int(g) for g in group_indices})
        if len(groups) != len(group_indices):
            raise InvalidInput(f"group_indices repeats a group: {list(group_indices)!r}")
        params = {
            "run_id": run_id,
            "policy": checkpoint.policy,
            "step": step,
            "groups": groups,
            "metrics": metrics_jsonb("metrics", metrics),
            "lease_name": lease.name,
            "lease_epoch": lease.epoch,
        }
        async with self._pool.connection() as conn, conn.transaction():
            await check_fence(conn, lease)
            with known_run(run_id):
                inserted = await fetch_one(conn, dict_row, INSERT_TRAIN_STEP, params)
            if inserted is None:
                row = await fetch_one(conn, dict_row, TRAIN_STEP_GROUPS, params)
                recorded = sorted(row["group_indices"]) if row is not None else []
                if recorded != groups:
                    raise LedgerError(
                        f"step {step} of run {run_id!r} (policy {checkpoint.policy!r}) was "
                        "recorded before with groups "
                        f"{recorded}, not {groups}"
                    )
                self._forget_complete(run_id, checkpoint.policy, groups)
                return False
            floor = None
            if groups:
                await check_groups(conn, run_id, groups, checkpoint.policy)
                await conn.execute(CONSUME_GROUPS, params)
                key = (run_id, checkpoint.policy)
                floor = await _group_floor(conn, run_id, key[1], self._group_floors.get(key, 0))
            await insert_checkpoint(conn, lease, checkpoint)
        if floor is not None:  # committed: the groups below it are consumed for good
            key = (run_id, checkpoint.policy)
            self._group_floors[key] = max(floor, self._group_floors.get(key, 0))
        self._forget_complete(run_id, checkpoint.policy, groups)
        return True

    def _forget_complete(self, run_id: str, policy: str, consumed: Sequence[int]) -> None:
        known = self._complete_groups.get((run_id, policy), {})
        for group in consumed:
            known.pop(group, None)

    async def record_checkpoint(self, lease: Lease, checkpoint: CheckpointRecord) -> bool:
        """Fenced; record a checkpoint outside a train step (for example the base model as
        version 0). Idempotent on (run, version). True if new."""
        async with self._pool.connection() as conn, conn.transaction():
            await check_fence(conn, lease)
            return await insert_checkpoint(conn, lease, checkpoint)

    async def latest_checkpoint(
        self, run_id: str, *, policy: str = DEFAULT_POLICY
    ) -> CheckpointRecord | None:
        """`policy`'s checkpoint of the highest version, or None before its first."""
        params = {"run_id": run_id, "policy": policy}
        async with self._pool.connection() as conn:
            return await fetch_one(conn, class_row(CheckpointRecord), LATEST_CHECKPOINT, params)

    async def checkpoints(
        self, run_id: str, *, policy: str | None = DEFAULT_POLICY, after: int = -1
    ) -> list[CheckpointRecord]:
        """`policy`'s checkpoints (None: every policy's, by policy), oldest version first; with
        `after`, only versions after it (a follower reads what is new, not the whole chain)."""
        params = {"run_id": run_id, "policy": policy, "after": after}
        async with self._pool.connection() as conn:
            return await fetch_all(conn, class_row(CheckpointRecord), CHECKPOINTS, params)

    async def train_steps(
        self, run_id: str, *, after: int = -1, policy: str | None = DEFAULT_POLICY
    ) -> list[TrainStepRecord]:
        """`policy`'s train steps after step `after` (default: all), in step order (None:
        every policy's, by step then policy)."""
        params = {"run_id": run_id, "after": after, "policy": policy}
        async with self._pool.connection() as conn:
            return await fetch_all(conn, kwargs_row(_train_step), TRAIN_STEPS, params)
