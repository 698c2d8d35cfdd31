"""Wake-ups: LISTEN/NOTIFY wakes waiters; timeouts are the polling fallback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import psycopg
import pytest

from rollout.ledger import EpisodeSpec, InvalidInput, Ledger, RunRecord
from tests.ledger.forwarder import Forwarder
from tests.ledger.ledger_helpers import turn_for

MakeLedger = Callable[..., Awaitable[Ledger]]


async def test_a_write_in_another_process_wakes_a_waiter(
    ledger: Ledger, make_ledger: MakeLedger, run: RunRecord
) -> None:
    follower = await make_ledger()
    assert await follower.listen()
    waiter = asyncio.create_task(follower.wait("episodes", timeout=10.0))
    await asyncio.sleep(0.05)
    began = time.monotonic()
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1)])
    assert await waiter
    assert time.monotonic() - began < 5.0


async def test_wait_times_out_without_a_notification(ledger: Ledger) -> None:
    # The first wait on a channel LISTENs on it and counts as news (a write just before the
    # LISTEN was heard by nobody); from then on, no notification means a timeout.
    assert await ledger.wait("checkpoints", timeout=5.0)
    began = time.monotonic()
    assert not await ledger.wait("checkpoints", timeout=0.2)
    assert time.monotonic() - began >= 0.19


async def test_only_the_channels_waited_on_are_listened_to(
    ledger: Ledger, make_ledger: MakeLedger, run: RunRecord
) -> None:
    # Every notification of a LISTENed channel costs the server a signal and the listener a
    # wake-up: a follower of `serving` does not hear the seat ends of every step.
    follower = await make_ledger()
    assert await follower.wait("serving", timeout=5.0)  # the first wait: news
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1)])
    claim = await ledger.claim_seat("r")
    assert claim is not None
    await ledger.end_seat(claim, reward=1.0)  # notifies `ends` and `groups`
    await asyncio.sleep(0.5)
    heard = follower._listener._generation  # pyright: ignore[reportPrivateUsage]
    assert {channel for channel, _ in heard} <= {"serving"}, heard
    # A channel waited on later is listened to from then on.
    assert await follower.wait("episodes", timeout=5.0)
    assert not await follower.wait("episodes", timeout=0.1)
    waiter = asyncio.create_task(follower.wait("episodes", timeout=10.0, run_id=run.run_id))
    await asyncio.sleep(0.05)
    await ledger.add_episodes(run.run_id, [EpisodeSpec(1, 0, {}, 1)])
    assert await waiter


async def test_a_notification_between_waits_is_not_lost(ledger: Ledger, run: RunRecord) -> None:
    assert await ledger.listen()
    assert not await ledger.wait("settings", timeout=0.05)
    await ledger.set_setting(run.run_id, "max_lag", 1)  # lands while nobody waits
    await asyncio.sleep(0.5)  # for the notification to arrive, even on a busy machine
    began = time.monotonic()
    assert await ledger.wait("settings", timeout=5.0)
    assert time.monotonic() - began < 0.1
    assert not await ledger.wait("settings", timeout=0.05)  # taken: no news since


async def test_wait_filters_by_run_and_takes_several_channels(
    ledger: Ledger, run: RunRecord
) -> None:
    other = await ledger.create_run("other", "env:b", {})
    await ledger.listen()
    await ledger.set_setting(other.run_id, "paused", True)
    await asyncio.sleep(0.1)
    assert not await ledger.wait("settings", timeout=0.1, run_id=run.run_id)
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1)])
    assert await ledger.wait(["checkpoints", "episodes"], timeout=5.0, run_id=run.run_id)


async def test_ending_a_train_seat_notifies_groups(ledger: Ledger, run: RunRecord) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1)])
    claim = await ledger.claim_seat("r")
    assert claim is not None
    await ledger.record_turn(turn_for(claim))
    await ledger.listen()
    assert not await ledger.wait("groups", timeout=0.05)
    waiter = asyncio.create_task(ledger.wait("groups", timeout=10.0))
    await ledger.end_seat(claim, reward=1.0)
    assert await waiter


async def test_unknown_channels_are_refused(ledger: Ledger) -> None:
    with pytest.raises(InvalidInput, match="'nope'"):
        await ledger.wait("nope", timeout=0.1)


async def test_waits_recover_after_the_listening_connection_drops(
    ledger: Ledger, run: RunRecord
) -> None:
    assert await ledger.listen()
    listeners = (
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
    )
    async with await psycopg.AsyncConnection.connect(ledger.url, autocommit=True) as admin:
        old = [row[0] for row in await (await admin.execute(listeners)).fetchall()]
        assert len(old) == 1
        await admin.execute("SELECT pg_terminate_backend(%s)", (old[0],))
        deadline = time.monotonic() + 20
        while True:  # the ledger reconnects and listens again
            pids = [row[0] for row in await (await admin.execute(listeners)).fetchall()]
            if pids and pids != old:
                break
            assert time.monotonic() < deadline, "the listener did not reconnect"
            await asyncio.sleep(0.05)
    assert await ledger.listen(timeout=10.0)
    await ledger.wait("settings", timeout=0.01)  # may report the reconnect: take it
    waiter = asyncio.create_task(ledger.wait("settings", timeout=10.0))
    await asyncio.sleep(0.05)
    await ledger.set_setting(run.run_id, "max_lag", 5)
    assert await waiter


async def test_turns_and_claims_notify_nobody_and_seat_ends_do(
    ledger: Ledger, run: RunRecord
) -> None:
    # A NOTIFY serialises commits on Postgres's notification lock: the per-turn and per-claim
    # writes send none (migration 0009); a seat's end still wakes the trainer and evaluators.
    channels = ("turns", "claims", "ends", "groups", "episodes")
    async with await psycopg.AsyncConnection.connect(ledger.url, autocommit=True) as listener:
        for channel in channels:
            await listener.execute(f"LISTEN {channel}")  # pyright: ignore[reportArgumentType]
        await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1)])
        heard = [n.channel async for n in listener.notifies(timeout=2.0, stop_after=1)]
        assert heard == ["episodes"]
        claim = await ledger.claim_seat("r")
        assert claim is not None
        await ledger.record_turn(turn_for(claim))
        assert [n.channel async for n in listener.notifies(timeout=0.5)] == []
        await ledger.end_seat(claim, reward=1.0)
        heard = [n.channel async for n in listener.notifies(timeout=5.0, stop_after=2)]
        assert sorted(heard) == ["ends", "groups"]
    with pytest.raises(InvalidInput, match="'turns'"):
        await ledger.wait("turns", timeout=0.1)


async def test_a_wait_that_began_while_the_listener_was_down_wakes_when_it_is_back(
    database_url: str, make_ledger: MakeLedger, run: RunRecord
) -> None:
    """A write made while the LISTEN connection is down sends a NOTIFY nobody hears; a wait on a
    key nobody waited on before the drop must still wake once the listener is back."""
    forwarder = Forwarder(database_url)
    await forwarder.start()
    follower = await Ledger.connect(forwarder.url)
    writer = await make_ledger()
    try:
        assert await follower.listen()
        await forwarder.stop()  # the listener's connection is cut; it polls meanwhile
        await asyncio.sleep(0.2)
        assert await writer.set_setting(run.run_id, "paused", True)  # heard by nobody
        back = asyncio.create_task(forwarder.start_after(0.5))
        began = time.monotonic()
        assert await follower.wait("settings", timeout=10.0, run_id=run.run_id)
        assert time.monotonic() - began < 8.0
        await back
    finally:
        await follower.close()
        await forwarder.stop()


@pytest.mark.timeout(60)
async def test_the_listener_stops_when_its_cancel_is_swallowed(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connect that swallows the cancel landing in it (and then fails) does not keep the
    listener's reconnect loop going."""
    import contextlib

    from rollout.ledger.notify import Listener

    async def swallowing_connect(*args: object, **kwargs: object) -> psycopg.AsyncConnection:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)  # the library call in progress when the cancel lands
        raise psycopg.OperationalError("connection attempt abandoned")

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", swallowing_connect)
    listener = Listener(database_url, reconnect_delay=0.05)
    listener.start()
    task = listener._task  # pyright: ignore[reportPrivateUsage]
    assert task is not None
    await asyncio.sleep(0.3)  # inside its first connect
    began = time.monotonic()
    await listener.close()
    assert task.done() and time.monotonic() - began < 5.0
