"""The garbage collector of a long-running process: what it imported at start-up is left alone.

A role imports PyTorch, transformers, FastAPI and pydantic before it serves: hundreds of
thousands of objects that live as long as the process. CPython's cyclic collector walks every
tracked object of the generations it collects, and its oldest generation is collected again
whenever a quarter more objects have survived into it: while a role serves, what each request
leaves behind keeps triggering full collections that walk the whole start-up heap. In a CPU
profile of a parity run's steps (`perf record -a` over 10 s of `benchmarks/step_time.py --steps
100`), `gc_collect_main` and its visitors took 12% of the gateway's samples and 10% of the
runner's; with the start-up heap frozen, 8% and 4% (about 2% of the machine's CPU in all).

`settle()` collects once, then moves every object alive into the permanent generation
(`gc.freeze`): the collector skips them from then on, and still collects what is made later. At
exit the frozen objects go back to the collector (`gc.unfreeze`, run by `atexit`), so that the
interpreter's last collection frees them as it would have: extension modules that count their
objects at shutdown (nanobind's, in Triton, which PyTorch imports) otherwise print a page of
"leaked" warnings at the end of every `rollout train`.
`settle_after_start_up()` does it when start-up is over (a few seconds in, when the imports are
done, and again later, after a model load and a warm-up); the roles run it beside their work.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
from collections.abc import Sequence

SETTLE_AFTER_S: tuple[float, ...] = (5.0, 30.0)
"""Seconds after start at which the start-up heap is frozen (imports; model load, warm-up)."""


atexit.register(gc.unfreeze)  # a no-op in a process that froze nothing


def settle() -> int:
    """Collect, then freeze what is alive; the number of objects frozen in all (unfrozen at
    exit, see the module docstring)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


async def settle_after_start_up(delays: Sequence[float] = SETTLE_AFTER_S) -> None:
    """`settle()` at each of `delays` seconds from now (run it as a task beside a role)."""
    waited = 0.0
    for delay in delays:
        await asyncio.sleep(max(0.0, delay - waited))
        waited = delay
        settle()
