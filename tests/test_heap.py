"""`rollout.heap`: the start-up heap is frozen out of the collector's walks; newer garbage is
still collected."""

from __future__ import annotations

import asyncio
import gc
import weakref

from rollout.heap import settle, settle_after_start_up


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


def test_what_is_alive_is_frozen_and_later_cycles_are_still_collected() -> None:
    try:
        frozen = settle()
        assert frozen == gc.get_freeze_count() > 0
        cycle = Node()
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()  # the other tests' objects go back to the collector


async def test_it_settles_at_each_delay() -> None:
    gc.unfreeze()
    try:
        await asyncio.wait_for(settle_after_start_up((0.01, 0.02)), timeout=5)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
