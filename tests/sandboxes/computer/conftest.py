"""`computers`: two real computers of one pool (two claims' computers), started once for the
computer tests that need live ones and stopped after them; nothing of them outlives them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout.sandboxes.computer import ComputerPool, Limits, Template
from tests.sandboxes.computer.machines import require_computers

TEMPLATE = Template(
    files={"task.md": "Write add() in calc.py.\n"},
    git=True,
    limits=Limits(memory_mb=96, processes=48, disk_mb=8, command_seconds=10),
)


@pytest.fixture(scope="package")
def computers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    """Two computers of `TEMPLATE` (see the module docstring)."""
    require_computers()
    pool = ComputerPool(TEMPLATE)
    folders = [tmp_path_factory.mktemp(f"computer-{index}") for index in range(2)]

    async def start() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(pool.start(folder) for folder in folders)))

    started = asyncio.run(start())
    try:
        yield started
    finally:

        async def stop() -> None:
            await asyncio.gather(*(pool.stop(details) for details in started))

        asyncio.run(stop())
    for details in started:  # nothing of a computer outlives it
        cgroup = Path("/sys/fs/cgroup/pids")
        assert not any(cgroup.rglob(details["cgroup"])), details["cgroup"]
