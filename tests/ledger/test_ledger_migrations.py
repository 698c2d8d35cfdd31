"""Migrations: applied once, idempotent, safe when several processes start at once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from rollout.ledger import Ledger, LedgerError, apply_migrations
from rollout.ledger.embedded import with_database
from rollout.ledger.migrate import migrations


@pytest.fixture
def empty_database_url(pg_server_url: str) -> Iterator[str]:
    name = f"e_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(pg_server_url, name)
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


async def test_migrations_apply_once(empty_database_url: str) -> None:
    names = [m.name for m in migrations()]
    assert names and names[0].startswith("0001_")
    assert await apply_migrations(empty_database_url) == names
    assert await apply_migrations(empty_database_url) == []
    async with await psycopg.AsyncConnection.connect(empty_database_url) as conn:
        cursor = await conn.execute("SELECT name FROM schema_migrations ORDER BY version")
        assert [row[0] for row in await cursor.fetchall()] == names


async def test_concurrent_starts_apply_each_migration_once(empty_database_url: str) -> None:
    results = await asyncio.gather(*(apply_migrations(empty_database_url) for _ in range(4)))
    assert sorted(len(r) for r in results) == [0, 0, 0, len(migrations())]
    ledger = await Ledger.connect(empty_database_url)  # and a ledger works on it
    try:
        assert (await ledger.create_run("r", "env:a", {})).name == "r"
    finally:
        await ledger.close()


async def test_an_edited_migration_is_refused(database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("UPDATE schema_migrations SET checksum = 'x' WHERE version = 1")
    with pytest.raises(LedgerError, match="changed after it was applied"):
        await apply_migrations(database_url)


async def test_episode_totals_are_counted_for_the_episodes_of_an_older_ledger(
    empty_database_url: str,
) -> None:
    """Migration 0021 counts the episodes a ledger held before it; from then on each insert
    adds its own (episode_counts' total, read without scanning the run's episodes)."""
    from rollout.ledger import EpisodeSpec

    await apply_migrations(empty_database_url)
    async with await psycopg.AsyncConnection.connect(empty_database_url, autocommit=True) as conn:
        await conn.execute(  # the ledger as it was before migration 0021
            "DROP TABLE run_episode_totals; DROP FUNCTION count_added_episodes CASCADE;"
            " DELETE FROM schema_migrations WHERE name = '0021_episode_totals.sql'"
        )
    ledger = await Ledger.connect(empty_database_url, migrate=False)
    try:
        first = await ledger.create_run("a", "env:a", {})
        second = await ledger.create_run("b", "env:b", {})
        empty = await ledger.create_run("c", "env:c", {})
        await ledger.add_episodes(first.run_id, [EpisodeSpec(0, m, {}, m) for m in range(5)])
        await ledger.add_episodes(second.run_id, [EpisodeSpec(0, m, {}, m) for m in range(2)])
        assert await apply_migrations(empty_database_url) == ["0021_episode_totals.sql"]
        assert (await ledger.episode_counts(first.run_id))["total"] == 5
        assert (await ledger.episode_counts(second.run_id))["total"] == 2
        assert (await ledger.episode_counts(empty.run_id))["total"] == 0
        # Inserts after it, several groups and kinds at once, each add their own.
        await ledger.add_episodes(
            first.run_id, [EpisodeSpec(g, m, {}, m) for g in (1, 2) for m in range(3)]
        )
        await ledger.add_episodes(
            first.run_id, [EpisodeSpec(0, m, {}, m, kind="eval") for m in range(4)]
        )
        await ledger.add_episodes(empty.run_id, [EpisodeSpec(0, 0, {}, 0)])
        # Added again (idempotent): nothing new is inserted, nothing is counted twice.
        await ledger.add_episodes(first.run_id, [EpisodeSpec(0, m, {}, m) for m in range(5)])
        assert (await ledger.episode_counts(first.run_id))["total"] == 15
        assert (await ledger.episode_counts(second.run_id))["total"] == 2
        assert (await ledger.episode_counts(empty.run_id))["total"] == 1
    finally:
        await ledger.close()
