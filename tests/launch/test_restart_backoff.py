"""The local supervisor's restart back-off grows for crash loops only."""

from __future__ import annotations

import signal

from rollout.launch.local import HEALTHY_S, _quick_exits_after  # pyright: ignore[reportPrivateUsage]


def test_quick_exits_grow_the_back_off_but_a_kill_9_or_a_long_life_does_not() -> None:
    assert _quick_exits_after(0, 1, 0.5) == 1
    assert _quick_exits_after(3, 1, 0.5) == 4  # a crash loop backs off further
    assert _quick_exits_after(3, -signal.SIGSEGV, 0.5) == 4
    assert _quick_exits_after(3, -signal.SIGKILL, 0.5) == 1  # killed from outside: no loop
    assert _quick_exits_after(3, 1, HEALTHY_S) == 1  # it ran a while before it failed
