"""`rollout sandboxes list` on a live computer: its usage, asked of the computer; never its
claim's secret."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from rollout.cli.common import console
from rollout.ledger import Ledger
from tests.cli_helpers import rollout

pytestmark = pytest.mark.slow  # the shared computers take ~4 s to start


async def _register(database_url: str, details: dict[str, Any]) -> None:
    ledger = await Ledger.connect(database_url)
    try:
        await ledger.register_sandbox("computer", "h", details, seats=2, instance_id="c1")
        await ledger.register_sandbox(
            "computer", "h", {**details, "port": 9}, seats=2, instance_id="gone"
        )
    finally:
        await ledger.close()


def test_sandboxes_list_shows_a_computers_usage_and_hides_its_secret(
    capsys: pytest.CaptureFixture[str],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    computers: list[dict[str, Any]],
) -> None:
    details = computers[0]
    asyncio.run(_register(database_url, details))
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    code, out, _ = rollout(capsys, "sandboxes", "list", "--json")
    assert code == 0 and details["secret"] not in out
    listed = {row["instance_id"]: row for row in json.loads(out)}
    usage = listed["c1"]["usage"]
    assert usage["memory_limit_bytes"] == 96 * 1024 * 1024 and usage["process_limit"] == 48
    assert usage["disk_limit_bytes"] == 8 * 1024 * 1024 and usage["running"] == 0
    assert listed["c1"]["details"]["secret"] == "(hidden)"
    assert listed["gone"]["usage"] is None  # it does not answer: no usage, no error
    monkeypatch.setattr(console, "width", 300)  # the table's usage column, whole
    code, out, _ = rollout(capsys, "sandboxes", "list")
    assert code == 0 and "0/48 processes, disk " in out and details["secret"] not in out
