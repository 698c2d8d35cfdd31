"""Schema migrations: numbered SQL files in `migrations/`, applied in order on start.

Every start runs `apply_migrations`: in one transaction, under a transaction-level advisory lock
(so concurrent starts queue instead of racing), it applies the files not yet recorded in
`schema_migrations` and records them with their SHA-256. A recorded migration whose file changed
afterwards is an error: migrations are append-only, like the facts they describe.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

from rollout.ledger.errors import LedgerError

# pg_advisory_xact_lock key: "rollout" in ASCII, so it is recognisable in pg_locks.
MIGRATION_LOCK_KEY = 0x726F6C6C6F7574

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def migrations() -> list[Migration]:
    """The packaged migrations, in version order."""
    found: list[Migration] = []
    folder = resources.files("rollout.ledger").joinpath("migrations")
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match is None:
            continue
        found.append(Migration(int(match.group(1)), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise LedgerError(f"two migrations share a number: {[m.name for m in found]}")
    return found


def schema_fingerprint() -> str:
    """A short hash of all migrations (names a template database built from them)."""
    digest = hashlib.sha256()
    for migration in migrations():
        digest.update(migration.name.encode())
        digest.update(migration.checksum.encode())
    return digest.hexdigest()[:12]


async def apply_migrations(url: str, *, connect_timeout: int | None = None) -> list[str]:
    """Apply pending migrations to the database at `url`; returns the names applied.

    `connect_timeout` (seconds) bounds the wait for a server that does not answer at all.
    """
    if connect_timeout is not None:
        url = make_conninfo(url, connect_timeout=connect_timeout)
    async with (
        await psycopg.AsyncConnection.connect(url) as conn,
        conn.transaction(),
    ):
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cursor = conn.cursor(row_factory=dict_row)
        await cursor.execute("SELECT version, name, checksum FROM schema_migrations")
        applied = {row["version"]: row for row in await cursor.fetchall()}
        done: list[str] = []
        for migration in migrations():
            if migration.version in applied:
                recorded = applied[migration.version]
                if recorded["checksum"] != migration.checksum:
                    raise LedgerError(
                        f"migration {migration.name} changed after it was applied as "
                        f"{recorded['name']}; "
                        "add a new migration instead of editing an applied one"
                    )
                continue
            # Simple-query protocol (no parameters) runs the file's many statements at once.
            await conn.execute(migration.sql.encode())
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
            )
            done.append(migration.name)
        return done
