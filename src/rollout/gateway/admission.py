"""max_lag: a turn may begin only if the served version is at least newest - max_lag.

The gateway calls `LagGate.admit()` before sampling each turn. The gate reads the newest
checkpoint version, the run's current `max_lag` (a setting that can change mid-run, read with
`rollout.runs.live.parse_max_lag`; unset, the gate's `default_max_lag`) and the lowest version
the run's inference servers acknowledge serving; if the served version is too old, the turn
waits (woken by serving notifications) until the servers catch up.

The decision is always made on ledger state read *after* the turn arrived, so a checkpoint
recorded before a turn began can never be missed. Concurrent turns share one read: each turn
waits for the first refresh that started after it arrived, so a burst of turns costs a single
round of queries, and a turn whose key was just resolved brings the lag view read with it
(`KeyInfo.lag`, read in the key's own statement), so a new seat's first turn is admitted with
no query of its own. Completions report the version that sampled them, and servers only move
forward after acknowledging, so an admitted turn never samples beyond the lag.

A run of several policies has a gate per policy (`LagGate(policy=...)`), each on its own
policy's versions; the key's lag view is the default policy's, so only that policy's gate uses it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from rollout.contracts import DEFAULT_POLICY
from rollout.ledger import LagView, Ledger
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

    def _state_of(self, view: LagView) -> LagState:
        """`view` as the gate's state (kept when it is the newest read so far); the policy's
        own max_lag wins over the run's setting."""
        max_lag = view.max_lag if self.policy_max_lag is None else self.policy_max_lag
        state = LagState(
            newest=view.newest if view.newest is not None else 0,
            serving=view.serving,
            max_lag=self.default_max_lag if max_lag is None else parse_max_lag(max_lag),
            read_at=view.read_at,
        )
        if self._state is None or state.read_at >= self._state.read_at:
            self._state = state
        return state

    async def _read(self) -> LagState:
        self._refresh_began = time.time()
        return self._state_of(await self.ledger.lag_view(self.run_id, policy=self.policy))

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

    async def admit(
        self,
        timeout: float | None = None,  # noqa: ASYNC109
        *,
        read: LagView | None = None,
    ) -> LagState:
        """Wait until this run's served version is within max_lag of the newest checkpoint.

        Args:
            timeout: seconds to wait at most (None: no limit); TimeoutError after that.
            read: this run's lag view, read after the turn arrived (the one that came with the
                turn's key, `KeyInfo.lag`): it decides at once, with no read of the gate's own.
                A view of another policy than the gate's is not used (the gate reads its own).
        """
        arrived = time.time()
        moment = arrived
        if read is not None and read.policy == self.policy:
            moment = min(moment, read.read_at)
            self._state_of(read)
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
