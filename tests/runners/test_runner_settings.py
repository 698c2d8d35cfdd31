"""A runner's reads of its runs' settings: at most one a second, shared by its seats."""

from __future__ import annotations

import asyncio

from rollout.ledger import Ledger
from rollout.runners import runner as runner_module
from rollout.runners.runner import Runner


async def test_seats_that_find_the_settings_stale_together_share_one_read(
    ledger: Ledger,
) -> None:
    run = await ledger.create_run("settings", "arithmetic.environment:environment", {})
    await ledger.set_setting(run.run_id, "max_lag", "3")
    reads: list[str] = []
    read = ledger.run_settings

    async def counted(run_id: str, *args: object) -> object:
        reads.append(run_id)
        return await read(run_id, *args)  # type: ignore[arg-type]

    ledger.run_settings = counted  # type: ignore[method-assign]
    runner = Runner(ledger, "http://127.0.0.1:9/v1", run_id=run.run_id)
    first = await asyncio.gather(*(runner.settings_for(run.run_id) for _ in range(64)))
    assert len(reads) == 1 and {s.max_lag for s in first} == {3}
    await asyncio.gather(*(runner.settings_for(run.run_id) for _ in range(64)))
    assert len(reads) == 1  # fresh for a second: no read at all
    await ledger.set_setting(run.run_id, "max_lag", "2")
    runner._settings[run.run_id] = (0.0, first[0])  # a second has passed since the read
    again = await asyncio.gather(*(runner.settings_for(run.run_id) for _ in range(64)))
    assert len(reads) == 2 and {s.max_lag for s in again} == {2}
    assert runner_module.SETTINGS_TTL == 1.0
