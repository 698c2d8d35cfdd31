"""Every command and role runs its coroutine on uvloop's event loop (`run_async`)."""

from __future__ import annotations

import asyncio

import pytest

from rollout.cli.common import run_async


def test_run_async_runs_on_uvloop_and_returns_the_result() -> None:
    async def loop_module() -> str:
        await asyncio.sleep(0)
        return type(asyncio.get_running_loop()).__module__

    assert run_async(loop_module()).split(".")[0] == "uvloop"


def test_run_async_raises_what_the_coroutine_raises() -> None:
    async def fail() -> None:
        raise ValueError("field 'x': bad value 3")

    with pytest.raises(ValueError, match="bad value 3"):
        run_async(fail())
