"""max_lag: a turn may begin only if the served version is at least newest - max_lag.

The gateway calls `LagGate.admit()` before sampling each turn. It reads, fresh from the ledger,
the newest checkpoint version, the run's current `max_lag` (a setting that can change mid-run)
and the version the run's inference servers acknowledge serving; if the served version is too
old, the turn waits (woken by serving/checkpoint/setting notifications) until servers catch up.
Because completions always report the version that sampled them, and servers only ever move
forward after acknowledging, a turn admitted here never samples from a version beyond the lag.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rollout.ledger import Ledger


@dataclass(frozen=True)
class Admission:
    newest: int
    serving: int
    max_lag: int
    waited: float


class RunFinished(Exception):
    """The run is finished: no more turns are admitted."""


class LagGate:
    def __init__(self, ledger: Ledger, run_id: str, *, default_max_lag: int = 1) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.default_max_lag = default_max_lag

    async def state(self) -> tuple[int, int | None, int]:
        """(newest checkpoint version, lowest acknowledged serving version or None, max_lag)."""
        settings = await self.ledger.settings(self.run_id)
        max_lag = int(settings.get("max_lag", self.default_max_lag))
        latest = await self.ledger.latest_checkpoint(self.run_id)
        newest = latest.version if latest is not None else 0
        acks = await self.ledger.serving_acks(self.run_id)
        serving = min(acks.values()) if acks else None
        return newest, serving, max_lag

    async def admit(self, timeout: float | None = None) -> Admission:  # noqa: ASYNC109
        began = time.monotonic()
        while True:
            newest, serving, max_lag = await self.state()
            if serving is not None and serving >= newest - max_lag:
                return Admission(newest, serving, max_lag, time.monotonic() - began)
            if timeout is not None and time.monotonic() - began > timeout:
                raise TimeoutError(
                    f"run {self.run_id}: served version {serving} stayed behind newest {newest} "
                    f"- max_lag {max_lag} for {timeout:.0f} s"
                )
            await self.ledger.wait("serving", timeout=0.2)
