"""max_lag: a turn may begin only if the served version is at least newest - max_lag.

The gateway calls `LagGate.admit()` before sampling each turn. The gate reads the newest
checkpoint version, the run's current `max_lag` (a setting that can change mid-run, read with
`rollout.runs.live.parse_max_lag`; unset, the gate's `default_max_lag`) and the lowest version
the run's inference servers acknowledge serving; if the served version is too old, the turn
waits (woken by serving notifications) until the servers catch up.

The decision is always made on ledger state read *after* the turn arrived, so a checkpoint
recorded before a turn began can never be missed. Concurrent turns share one read: each turn
waits for the first refresh that started after it arrived, so a burst of turns costs a single
round of queries. Completions report the version that sampled them, and servers only move
forward after acknowledging, so an admitted turn never samples beyond the lag.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from rollout.contracts import DEFAULT_POLICY
from rollout.ledger import Ledger
from rollout.runs.live import DEFAULT_MAX_LAG, parse_max_lag


@dataclass(frozen=True)
class LagState:
    newest: int
    serving: int | None
    max_lag: int
    read_at: float
    """When the read began (time.time())."""

    @property
    def admits(self) -> bool:
        return self.serving is not None and self.serving >= self.newest - self.max_lag


class LagGate:
    def __init__(
        self,
        ledger: Ledger,
        run_id: str,
        *,
        default_max_lag: int = DEFAULT_MAX_LAG,
        policy: str = DEFAULT_POLICY,
        max_lag: int | None = None,
    ) -> None:
        """A gate for one policy of the run (`policy`: its versions; `max_lag`: the policy's
        own max_lag, which wins over the run's setting; None: the run's)."""
        self.ledger = ledger
        self.run_id = run_id
        self.default_max_lag = default_max_lag
        self.policy = policy
        self.policy_max_lag = max_lag
        self._state: LagState | None = None
        self._refresh: asyncio.Task[LagState] | None = None
        self._refresh_began: float | None = None
        """When the in-flight read began; None while it is scheduled but not yet running."""

    async def _read(self) -> LagState:
        began = time.time()
        self._refresh_began = began
        newest, serving, max_lag = await self.ledger.lag_view(self.run_id, policy=self.policy)
        if self.policy_max_lag is not None:
            max_lag = self.policy_max_lag
        state = LagState(
            newest=newest if newest is not None else 0,
            serving=serving,
            max_lag=self.default_max_lag if max_lag is None else parse_max_lag(max_lag),
            read_at=began,
        )
        if self._state is None or state.read_at >= self._state.read_at:
            self._state = state
        return state

    async def state_after(self, moment: float) -> LagState:
        """Ledger state read by a query that began at or after `moment`."""
        while True:
            if self._state is not None and self._state.read_at >= moment:
                return self._state
            joinable = (
                self._refresh is not None
                and not self._refresh.done()
                and (self._refresh_began is None or self._refresh_began >= moment)
            )
            if not joinable:
                self._refresh_began = None
                self._refresh = asyncio.ensure_future(self._read())
            assert self._refresh is not None
            await asyncio.shield(self._refresh)

    async def admit(self, timeout: float | None = None) -> LagState:  # noqa: ASYNC109
        """Wait until this run's served version is within max_lag of the newest checkpoint."""
        arrived = time.time()
        moment = arrived
        while True:
            state = await self.state_after(moment)
            if state.admits:
                return state
            if timeout is not None and time.time() - arrived > timeout:
                raise TimeoutError(
                    f"run {self.run_id}: served version {state.serving} stayed behind newest "
                    f"{state.newest} - max_lag {state.max_lag} for {timeout:.0f} s"
                )
            moment = time.time()
            await self.ledger.wait(["serving", "settings"], 0.25, run_id=self.run_id)
