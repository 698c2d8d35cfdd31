"""How a seat's play ends when the gateway refuses, or the attempt is taken over.

A real gateway (the scripted model behind `create_app`, over HTTP) and a real Postgres. A
deterministic 4xx ends the seat `failed` with the gateway's message (visible in `rollout episodes
show`) instead of escaping `Runner.play` and leaving the seat to be re-played forever; a 409 (the
attempt was taken over) and a take-over before the end is written record nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rollout.contracts import Message
from rollout.gateway.app import create_app
from rollout.harness import End, Environment, Observation, RunContext, Task
from rollout.inference.factory import load_model
from rollout.ledger import EpisodeSpec, Ledger, SeatClaim
from rollout.models import default_tokenizer_dir
from rollout.net.server import AppServer
from rollout.rendering import HFRenderer
from rollout.runners.runner import Runner
from tests.cli_helpers import rollout

SPEC = "tests.runners.test_runner_outcomes"


class Says(Task):
    """Sends its `text` parameter to the model; ends with reward 1 on any reply.

    `<NUL>` in the text becomes U+0000 (which the ledger cannot store as a parameter).
    """

    async def start(self, run: RunContext) -> Observation:
        return Observation(str(self.parameters["text"]).replace("<NUL>", "\x00"))

    async def respond(self, run: RunContext, reply: Message) -> Observation:
        return End(reward=1.0)


class EndsAtOnce(Task):
    async def start(self, run: RunContext) -> Observation:
        return End(reward=1.0)


class EndsAfterAWhile(Task):
    async def start(self, run: RunContext) -> Observation:
        await asyncio.sleep(0.5)
        return End(reward=1.0)


says = Environment(name="says", task=Says, group_size=1)
ends_after_a_while = Environment(name="ends-after-a-while", task=EndsAfterAWhile, group_size=1)
ends_at_once = Environment(name="ends-at-once", task=EndsAtOnce, group_size=1)

# The chat template refuses one word, as a real template refuses what it cannot render.
REFUSING_TEMPLATE = (
    "{% for m in messages %}{% if 'forbidden' in m['content'] %}"
    "{{ raise_exception('this template cannot render the word forbidden') }}{% endif %}"
    "{% endfor %}"
)


@contextlib.asynccontextmanager
async def serving(ledger: Ledger, folder: Path) -> AsyncIterator[str]:
    """A gateway over HTTP serving the scripted model, whose template refuses 'forbidden'."""
    _, backend = load_model("scripted")
    shutil.copytree(default_tokenizer_dir(), folder)
    template = folder / "chat_template.jinja"
    template.write_text(REFUSING_TEMPLATE + template.read_text())
    app = create_app(ledger, HFRenderer(folder), backend, model_name="scripted")
    server = await AppServer(app).start()
    try:
        yield f"{server.url}/v1"
    finally:
        await server.stop()
        await backend.close()


@pytest.fixture
async def gateway_url(ledger: Ledger, tmp_path: Path) -> AsyncIterator[str]:
    async with serving(ledger, tmp_path / "refusing-model") as url:
        yield url


async def _one_seat(ledger: Ledger, environment: str, text: str = "hello") -> str:
    run = await ledger.create_run(f"run-{environment}", f"{SPEC}:{environment}", {})
    await ledger.add_episodes(
        run.run_id, [EpisodeSpec(group_index=0, member=0, parameters={"text": text}, seed=1)]
    )
    return run.run_id


@pytest.mark.parametrize(
    ("text", "status", "message"),
    [
        ("a forbidden word", 400, "this template cannot render the word forbidden"),
        ("a NUL <NUL> byte", 400, "strings may not contain U+0000"),
    ],
    ids=["template-cannot-render", "invalid-request"],
)
async def test_a_4xx_ends_the_seat_failed_with_the_gateways_message(
    ledger: Ledger, gateway_url: str, text: str, status: int, message: str
) -> None:
    run_id = await _one_seat(ledger, "says", text)
    runner = Runner(ledger, gateway_url, run_id=run_id, lease_seconds=0.5)
    try:
        claim = await ledger.claim_seat(runner.runner_id, run_id=run_id, lease_seconds=0.5)
        assert claim is not None
        assert await runner.play(claim) is None  # no exception escapes
    finally:
        await runner.close()
    (end,) = (await ledger.episode(claim.episode_id)).ends
    assert end.status == "failed" and end.reward == 0.0 and end.attempt == 1
    assert end.error is not None
    assert end.error.startswith(f"the gateway answered {status} to a model call: ")
    assert message in end.error
    await asyncio.sleep(0.6)  # past the lease: an unended seat would be claimable again
    assert await ledger.claim_seat("another-runner", run_id=run_id) is None


async def test_the_runner_loop_ends_a_refused_seat_once(ledger: Ledger, gateway_url: str) -> None:
    run_id = await _one_seat(ledger, "says", "forbidden")
    runner = Runner(ledger, gateway_url, run_id=run_id, lease_seconds=0.5, idle_wait=0.1)
    stop = asyncio.Event()
    loop = asyncio.create_task(runner.run(stop))
    try:
        for _ in range(100):
            counts = await ledger.episode_counts(run_id)
            if counts.get("ended"):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.8)  # longer than the lease: a leaked claim would be re-played
    finally:
        stop.set()
        await loop
        await runner.close()
    (episode,) = await ledger.list_episodes(run_id)
    assert [(e.status, e.attempt) for e in episode.ends] == [("failed", 1)]
    assert runner.seats_played == 1


async def _take_over(ledger: Ledger, run_id: str) -> tuple[SeatClaim, SeatClaim]:
    """A short first claim, expired and claimed again: (the stale claim, the newer claim)."""
    stale = await ledger.claim_seat("runner-a", run_id=run_id, lease_seconds=0.1)
    await asyncio.sleep(0.3)
    newer = await ledger.claim_seat("runner-b", run_id=run_id, lease_seconds=30)
    assert stale is not None and newer is not None and newer.attempt == stale.attempt + 1
    return stale, newer


async def test_a_409_takes_the_fenced_path(ledger: Ledger, gateway_url: str) -> None:
    run_id = await _one_seat(ledger, "says")
    stale, newer = await _take_over(ledger, run_id)
    runner = Runner(ledger, gateway_url, run_id=run_id, lease_seconds=30)
    try:
        assert await runner.play(stale) is None  # the gateway answers 409: nothing recorded
        assert (await ledger.episode(stale.episode_id)).ends == ()
        result = await runner.play(newer)  # the attempt that took over plays and ends the seat
    finally:
        await runner.close()
    assert result is not None and result.reward == 1.0
    (end,) = (await ledger.episode(stale.episode_id)).ends
    assert (end.status, end.attempt) == ("completed", newer.attempt)


async def test_a_take_over_before_the_end_is_written_records_nothing(
    ledger: Ledger, gateway_url: str
) -> None:
    run_id = await _one_seat(ledger, "ends_at_once")
    stale, newer = await _take_over(ledger, run_id)
    runner = Runner(ledger, gateway_url, run_id=run_id, lease_seconds=30)
    try:
        assert await runner.play(stale) is None  # end_seat's StaleFence does not escape
    finally:
        await runner.close()
    assert (await ledger.episode(stale.episode_id)).ends == ()
    del newer


def test_episodes_show_prints_the_refusal(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def refused_episode() -> str:
        async with await Ledger.connect(database_url) as ledger:
            run_id = await _one_seat(ledger, "says", "forbidden")
            async with serving(ledger, tmp_path / "refusing-model") as url:
                runner = Runner(ledger, url, run_id=run_id)
                try:
                    claim = await ledger.claim_seat(runner.runner_id, run_id=run_id)
                    assert claim is not None
                    await runner.play(claim)
                finally:
                    await runner.close()
            return claim.episode_id

    episode_id = asyncio.run(refused_episode())
    monkeypatch.setenv("ROLLOUT_DATABASE_URL", database_url)
    monkeypatch.setenv("COLUMNS", "300")
    code, out, _ = rollout(capsys, "episodes", "show", episode_id)
    assert code == 0
    assert "failed" in out
    assert "the gateway answered 400 to a model call" in out
    assert "cannot render the word forbidden" in out
    code, out, _ = rollout(capsys, "episodes", "show", episode_id, "--json")
    (end,) = json.loads(out)["ends"]
    assert end["status"] == "failed" and "forbidden" in end["error"]


class SwallowingLedger(Ledger):
    """A ledger whose seat heartbeats, cancelled mid-call, return as if they had succeeded:
    what psycopg_pool's connection check (under Python 3.11's `wait_for`) does to a cancel that
    lands at the wrong moment."""

    async def heartbeats(
        self, claims: Sequence[SeatClaim], lease_seconds: float = 60.0
    ) -> list[SeatClaim]:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)  # the library call in progress when the cancel lands
        return []


@pytest.mark.timeout(60)
async def test_a_seat_ends_even_when_its_heartbeats_cancel_is_swallowed(
    database_url: str, gateway_url: str
) -> None:
    ledger = await SwallowingLedger.connect(database_url)
    try:
        run_id = await _one_seat(ledger, "ends_after_a_while")
        # Beats every 0.1 s: the first is in progress when the seat's play ends (0.5 s).
        runner = Runner(ledger, gateway_url, run_id=run_id, lease_seconds=0.3)
        try:
            claim = await ledger.claim_seat(runner.runner_id, run_id=run_id, lease_seconds=30)
            assert claim is not None
            result = await asyncio.wait_for(runner.play(claim), timeout=10.0)
        finally:
            began = time.monotonic()
            await runner.close()  # the beat stops: the swallowed cancel is noticed at once
            assert time.monotonic() - began < 2.0
        assert result is not None and result.reward == 1.0
        (end,) = (await ledger.episode(claim.episode_id)).ends
        assert end.status == "completed"
    finally:
        await ledger.close()


class SwallowingClaims(Ledger):
    """A ledger whose seat claims, cancelled mid-call, return as if nothing was claimable."""

    async def claim_seats(self, *args: Any, **kwargs: Any) -> list[SeatClaim]:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)  # the library call in progress when the cancel lands
        return []


@pytest.mark.timeout(60)
async def test_the_claim_loop_stops_when_its_cancel_is_swallowed(
    database_url: str, gateway_url: str
) -> None:
    ledger = await SwallowingClaims.connect(database_url)
    try:
        runner = Runner(ledger, gateway_url, idle_wait=0.05)
        loop = asyncio.create_task(runner.run(asyncio.Event()))  # never stopped: cancelled
        await asyncio.sleep(0.3)  # inside its first claim
        loop.cancel()
        done, _ = await asyncio.wait({loop}, timeout=10.0)
        assert done and loop.cancelled()
        await runner.close()
    finally:
        await ledger.close()
