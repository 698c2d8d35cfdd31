"""`rollout sandboxes list` shows instances, their state and claims."""

from __future__ import annotations

import asyncio
import json

import pytest

from rollout.ledger import Ledger
from tests.cli_helpers import rollout


async def _setup(database_url: str) -> None:
    ledger = await Ledger.connect(database_url)
    try:
        await ledger.register_sandbox("worlds", "h", {"port": 1}, seats=2, instance_id="w1")
        await ledger.register_sandbox("worlds", "h", {"port": 2}, seats=2, instance_id="w2")
        await ledger.claim_sandbox(
            "worlds", episode_id="e1", run_id="r", agents=2, agent=0, attempt=1, holder="runner",
            host="h",
        )  # fmt: skip
        await ledger.retire_sandbox("w2", "crashed")
    finally:
        await ledger.close()


def test_sandboxes_list(
    capsys: pytest.CaptureFixture[str], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_setup(database_url))
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    code, out, _ = rollout(capsys, "sandboxes", "list", "--json")
    assert code == 0
    assert [(r["instance_id"], r["state"], r["episode_id"]) for r in json.loads(out)] == [
        ("w1", "claimed", "e1")
    ]
    code, out, _ = rollout(capsys, "sandboxes", "list", "--all")
    assert code == 0 and "w2" in out and "retired" in out and "runner" in out
