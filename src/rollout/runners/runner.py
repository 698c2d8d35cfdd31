"""The runner role: claim agent seats from the ledger and play them through the gateway.

A runner holds no state another process depends on. It claims a seat (a fenced lease with an
attempt number), heartbeats while it plays, and records the seat's end under that attempt. If it
dies, the claim expires and another runner plays a new attempt; the dead attempt's turns are
never trained on, and a revived runner's late writes are rejected (`StaleFence`).

How a seat's play can end, and what is recorded:

- the task reaches an `End` (or `max_turns`): the seat ends `completed` with its reward;
- the task breaks its contract, raises, returns a reward that is not finite, or passes the
  environment's `turn_timeout_s` or `episode_timeout_s`, or the gateway refuses a model call
  for good (a 4xx other than 409, such as a conversation the chat template cannot render or
  an invalid request, or a 500): the seat ends `failed` with the error (capped, see
  `rollout.harness.errors.capped`), shown by `rollout episodes show`. Such errors are
  deterministic: playing the seat again would fail again. What a task prints goes to the
  runner's own stdout/stderr (its log file under `rollout up`), never into memory or the
  ledger;
- the attempt was taken over (`StaleFence` from the ledger, or 409 from the gateway): nothing is
  recorded; the attempt that took over ends the seat;
- the gateway is unreachable or unavailable (connection errors, 502/503/504 past the client's
  retry window): nothing is recorded; the claim expires and the seat is played again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import replace
from functools import partial

from rollout.errors import RolloutError
from rollout.harness.core import Environment
from rollout.harness.errors import TaskError, capped
from rollout.harness.loading import load_environment
from rollout.harness.play import SeatResult, make_task, play_seat
from rollout.ledger import Ledger, SeatClaim, StaleFence
from rollout.net.client import TransportError
from rollout.procs import process_label
from rollout.runners.client import GatewayCallError, GatewayClient, seat_completer, seat_context
from rollout.runners.heartbeat import SeatHeartbeats
from rollout.runs.live import RunSettings
from rollout.sandboxes import SandboxSeats, sandbox_pool
from rollout.tasks import raise_if_cancelled

log = logging.getLogger("rollout.runner")

SETTINGS_TTL = 1.0
FENCED_STATUS = 409
"""The gateway's answer to a model call made with the key of an attempt that was taken over."""
UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
"""Gateway answers that mean infrastructure, not the episode: the seat is played again."""


def default_runner_id(name: str = "runner") -> str:
    """`NAME-HOST-PID` (`rollout.procs.process_label`)."""
    return process_label(name)


def _refusal(error: GatewayCallError) -> str:
    """The error recorded for a refused model call: the status and the gateway's own message."""
    message = error.body[:2000]
    with contextlib.suppress(ValueError, TypeError, LookupError):
        message = str(json.loads(error.body)["error"]["message"])
    return f"the gateway answered {error.status} to a model call: {message}"


class Runner:
    """Plays up to `concurrency` seats at once until stopped."""

    def __init__(
        self,
        ledger: Ledger,
        gateway_url: str | None = None,
        *,
        runner_id: str | None = None,
        run_id: str | None = None,
        concurrency: int = 8,
        lease_seconds: float = 30.0,
        idle_wait: float = 1.0,
        kinds: tuple[str, ...] = ("train",),  # eval seats: the evaluator plays them
    ) -> None:
        self.ledger = ledger
        self.gateway_url = gateway_url
        self.runner_id = runner_id or default_runner_id()
        self.run_id = run_id
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.idle_wait = idle_wait
        self.kinds = kinds
        self._clients: dict[str, GatewayClient] = {}
        self._settings: dict[str, tuple[float, RunSettings]] = {}
        self._settings_reads: dict[str, asyncio.Future[RunSettings]] = {}
        self._environments: dict[str, Environment] = {}
        self._run_environment: dict[str, str] = {}
        self.seats_played = 0
        self.sandboxes = SandboxSeats(ledger, self.runner_id, lease_seconds=lease_seconds)
        self.heartbeats = SeatHeartbeats(ledger, lease_seconds)

    async def settings_for(self, run_id: str) -> RunSettings:
        """The run's settings, re-read at most once a second (they change rarely). The seats
        that find them stale together share one read."""
        cached = self._settings.get(run_id)
        if cached is not None and time.monotonic() - cached[0] <= SETTINGS_TTL:
            return cached[1]
        reading = self._settings_reads.get(run_id)
        if reading is None:
            reading = asyncio.ensure_future(self._read_settings(run_id))
            self._settings_reads[run_id] = reading
        return await asyncio.shield(reading)

    async def _read_settings(self, run_id: str) -> RunSettings:
        try:
            began = time.monotonic()
            settings = await self.ledger.run_settings(run_id)
            self._settings[run_id] = (began, settings)
            return settings
        finally:
            del self._settings_reads[run_id]

    async def client_for(self, run_id: str) -> GatewayClient:
        """The gateway client for a run: the fixed URL, or the run's `gateway_url` setting."""
        url = self.gateway_url
        if url is None:
            url = (await self.settings_for(run_id)).gateway_url
            if not url:
                raise RolloutError(f"run {run_id} has no gateway_url setting (is its gateway up?)")
        if url not in self._clients:
            self._clients[url] = GatewayClient(url)
        return self._clients[url]

    async def environment_for(self, run_id: str) -> Environment:
        spec = self._run_environment.get(run_id)
        if spec is None:
            spec = (await self.ledger.get_run(run_id)).environment
            self._run_environment[run_id] = spec
        if spec not in self._environments:
            self._environments[spec] = load_environment(spec)
        return self._environments[spec]

    async def run(self, stop: asyncio.Event, max_seats: int | None = None) -> None:
        """Claim and play seats until `stop` is set (or `max_seats` were played)."""
        active: set[asyncio.Task[SeatResult | None]] = set()
        try:
            while not stop.is_set():
                raise_if_cancelled()  # a cancel a library swallowed during the last claim
                if max_seats is not None and self.seats_played + len(active) >= max_seats:
                    if not active:
                        return
                    await asyncio.wait(active, return_when=asyncio.FIRST_COMPLETED)
                    continue
                if len(active) >= self.concurrency:
                    await asyncio.wait(active, return_when=asyncio.FIRST_COMPLETED)
                    continue
                room = self.concurrency - len(active)
                if max_seats is not None:
                    room = min(room, max_seats - self.seats_played - len(active))
                claims = await self.ledger.claim_seats(
                    self.runner_id,
                    limit=room,
                    run_id=self.run_id,
                    lease_seconds=self.lease_seconds,
                    kinds=self.kinds,
                )
                if not claims:
                    await self.ledger.wait("episodes", timeout=self.idle_wait)
                    continue
                for claim in claims:
                    task = asyncio.create_task(self.play(claim))
                    active.add(task)
                    task.add_done_callback(partial(self._seat_done, active, claim))
        finally:
            for task in active:
                task.cancel()
            await asyncio.gather(*active, return_exceptions=True)

    @staticmethod
    def _seat_done(
        active: set[asyncio.Task[SeatResult | None]],
        claim: SeatClaim,
        task: asyncio.Task[SeatResult | None],
    ) -> None:
        """Forget a finished seat task; log what `play` did not expect (never left unretrieved)."""
        active.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error(
                "seat %s/%s attempt %s: %r",
                claim.episode_id,
                claim.agent,
                claim.attempt,
                error,
                exc_info=error,
            )

    async def play(self, claim: SeatClaim) -> SeatResult | None:
        """Play one claimed seat and record its end (fenced by the claim's attempt).

        Returns the result when the seat ended `completed`; None when it ended `failed`, was
        taken over, or was left to be played again (see the module docstring).
        """
        try:
            async with self.heartbeats.hold(claim):
                result = await self._play(claim)
        except StaleFence:
            self._log_fenced(claim)
            return None
        except GatewayCallError as error:
            if error.status == FENCED_STATUS:
                self._log_fenced(claim)
            else:  # only statuses in UNAVAILABLE_STATUSES reach here (see _play)
                self._log_abandoned(claim, error)
            return None
        except TransportError as error:
            # Infrastructure, not the episode: leave the seat unended so that it is played again
            # (as a new attempt) once this claim expires.
            self._log_abandoned(claim, error)
            return None
        self.seats_played += 1
        try:
            if isinstance(result, SeatResult):
                metrics = {**result.end.metrics, "turns": float(result.turns)}
                await self.ledger.end_seat(
                    claim,
                    reward=result.reward,
                    score=result.score_json(),
                    metrics=metrics,
                    turn_rewards=result.rewards_by_turn(),
                )
                return result
            await self.ledger.end_seat(claim, reward=0.0, status="failed", error=result)
        except StaleFence:  # taken over while the seat played: the newer attempt ends it
            self._log_fenced(claim)
        return None

    @staticmethod
    def _log_fenced(claim: SeatClaim) -> None:
        log.warning(
            "seat %s/%s attempt %s was taken over", claim.episode_id, claim.agent, claim.attempt
        )

    @staticmethod
    def _log_abandoned(claim: SeatClaim, error: Exception) -> None:
        log.warning(
            "seat %s/%s abandoned, its gateway is unreachable: %s",
            claim.episode_id,
            claim.agent,
            error,
        )

    async def _play(self, claim: SeatClaim) -> SeatResult | str:
        try:
            environment = await self.environment_for(claim.run_id)
            client = await self.client_for(claim.run_id)
            settings = await self.settings_for(claim.run_id)
            context = seat_context(claim, client, environment)
            task = make_task(environment, claim.parameters)
            complete = seat_completer(client, claim.api_key)

            sampling = dict(settings.sampling)
            pool = sandbox_pool(environment)
            if pool is None:
                return await play_seat(environment, task, context, complete, sampling)
            async with self.sandboxes.hold(pool, claim) as sandbox:  # the episode's shared world
                context = replace(context, sandbox=sandbox)
                return await play_seat(environment, task, context, complete, sampling)
        except StaleFence:
            raise
        except GatewayCallError as error:
            if error.status == FENCED_STATUS or error.status in UNAVAILABLE_STATUSES:
                raise
            # A deterministic refusal (4xx, 500): playing the seat again would fail again.
            log.warning("seat %s/%s failed: %s", claim.episode_id, claim.agent, error)
            return _refusal(error)
        except TaskError as error:
            log.warning("seat %s/%s failed: %s", claim.episode_id, claim.agent, error)
            return f"{error}\n{error.traceback or ''}".strip()
        except RolloutError as error:
            return capped(str(error))

    async def close(self) -> None:
        await self.heartbeats.close()
        pools = [sandbox_pool(environment) for environment in self._environments.values()]
        await self.sandboxes.close({pool.name: pool for pool in pools if pool is not None})
        for client in self._clients.values():
            await client.close()
