"""Processes that die with their owner.

`rollout train` starts `rollout up` in a session of its own (so that Ctrl-C reaches `train`
only, which then stops the roles cleanly), and `rollout up` starts every role the same way. A
session of its own also means a `kill -9` of the owner used to leave everything training with
nobody watching. So each owner puts its pid in the child's environment (`owned_env`), and the
child, once started, watches it (`Owner.watch`):

- on Linux it asks the kernel for SIGTERM when its parent dies (`prctl(PR_SET_PDEATHSIG)`),
  which stops it like any SIGTERM (the stop event);
- everywhere, it polls its parent pid once a second: a parent that changed (re-parented to pid
  1 or a subreaper) means the owner is gone, and the stop event is set. The poll also covers an
  owner that died before the child got to ask the kernel.

The variable is removed from the child's own environment once read, so grandchildren are owned
by their direct parent only.

Example:
    >>> env = owned_env({"PATH": "/bin"})
    >>> env[OWNER_PID_VAR] == str(os.getpid())
    True
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Mapping
from functools import cache

from rollout.settings import OWNER_PID_VAR, get_settings

log = logging.getLogger("rollout.owner")

POLL_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def owned_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` plus this process as the owner of the child started with it."""
    return {**env, OWNER_PID_VAR: str(os.getpid())}


def _ask_for_death_signal() -> None:
    """SIGTERM when the parent dies (Linux only; elsewhere the poll alone covers it)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class Owner:
    """The process that started this one (from `ROLLOUT_OWNER_PID`), if any."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid

    @classmethod
    def from_environment(cls) -> Owner:
        """Read the owner's pid (`rollout.settings`), and remove its variable from this
        process's environment."""
        pid = get_settings().owner_pid
        with contextlib.suppress(KeyError):
            del os.environ[OWNER_PID_VAR]
        return cls(pid)

    def gone(self) -> bool:
        """Whether this process had an owner and it is no longer its parent."""
        return self.pid is not None and os.getppid() != self.pid

    async def watch(self, stop: asyncio.Event) -> None:
        """Set `stop` once the owner is gone; returns at once when there is no owner."""
        if self.pid is None:
            return
        _ask_for_death_signal()
        while not stop.is_set():
            if self.gone():
                log.warning("owner process %s is gone; stopping", self.pid)
                stop.set()
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=POLL_SECONDS)


@cache
def this_owner() -> Owner:
    """This process's owner, read once from the environment."""
    return Owner.from_environment()
