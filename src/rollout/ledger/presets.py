"""Presets stored in the ledger.

`rollout preset load DIR` validates preset files and stores each as a fact: its name, the
SHA-256 of its body and the body itself (the YAML as written). Storing the body a name already
has adds nothing, so loading is idempotent; a changed body becomes the name's current preset
(the `current_presets` view: the latest fact per name). `rollout train --preset NAME` looks here
before the built-in presets.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import LiteralString

from psycopg.rows import class_row

from rollout.ledger.connection import LedgerConnection, fetch_all, fetch_one
from rollout.ledger.inputs import not_empty

PRESET_COLUMNS: LiteralString = (
    "name, content_hash, body, source, extract(epoch FROM created_at)::float8 AS created_at"
)
# One loader at a time per name, so two concurrent loads of one body store it once.
LOCK_NAME: LiteralString = "SELECT pg_advisory_xact_lock(hashtext('preset:' || %(name)s))"
# Appends nothing when the name's latest body is already this one.
APPEND_PRESET: LiteralString = """
INSERT INTO presets (name, content_hash, body, source)
SELECT %(name)s, %(hash)s, %(body)s, %(source)s
WHERE (SELECT content_hash FROM presets WHERE name = %(name)s ORDER BY id DESC LIMIT 1)
      IS DISTINCT FROM %(hash)s
RETURNING true AS appended
"""
CURRENT_PRESETS: LiteralString = "SELECT " + PRESET_COLUMNS + " FROM current_presets ORDER BY name"
PRESET_BY_NAME: LiteralString = (
    "SELECT " + PRESET_COLUMNS + " FROM current_presets WHERE name = %(name)s"
)


@dataclass(frozen=True)
class PresetRecord:
    """A stored preset: its name, the SHA-256 of its body, the body (YAML), where it came from."""

    name: str
    content_hash: str
    body: str
    source: str
    created_at: float


def content_hash(body: str) -> str:
    """The SHA-256 of a preset's body.

    Example:
        >>> content_hash("name: x\\n")[:12]
        'a2a79ea37edb'
    """
    return hashlib.sha256(body.encode()).hexdigest()


class PresetsMixin(LedgerConnection):
    """Stored presets (see the module docstring)."""

    async def store_preset(self, name: str, body: str, *, source: str = "") -> bool:
        """Store `body` as preset `name`. Returns False when it already is its current body."""
        params = {
            "name": not_empty("preset name", name),
            "hash": content_hash(body),
            "body": body,
            "source": source,
        }
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute(LOCK_NAME, params)
            cursor = await conn.execute(APPEND_PRESET, params)
            return await cursor.fetchone() is not None

    async def presets(self) -> list[PresetRecord]:
        """The current body of every stored preset, by name."""
        async with self._pool.connection() as conn:
            return await fetch_all(conn, class_row(PresetRecord), CURRENT_PRESETS)

    async def find_preset(self, name: str) -> PresetRecord | None:
        """The current body of preset `name`, or None when none is stored."""
        async with self._pool.connection() as conn:
            return await fetch_one(conn, class_row(PresetRecord), PRESET_BY_NAME, {"name": name})
