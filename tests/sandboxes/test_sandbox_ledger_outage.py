"""Every sandbox write rides out a lost connection like the ledger's other writes: the connection
is cut right after its COMMIT reached Postgres, before the answer came back (a real cut, by the
TCP forwarder of tests/ledger/forwarder.py), so the call runs again on a fresh connection and
must find its own write there: nothing is recorded twice and each call answers as if uncut."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from rollout.ledger import Ledger
from rollout.ledger.sandboxes import SandboxClaim
from tests.ledger.forwarder import Forwarder

T = TypeVar("T")


async def _cut_during(forwarder: Forwarder, call: Awaitable[T]) -> T:
    """Run `call` with its COMMIT's connection cut (checked to have happened)."""
    before = forwarder.cuts
    forwarder.cut_after(b"COMMIT")
    result = await call
    assert forwarder.cuts == before + 1, "the connection was not cut"
    return result


async def _claim(
    ledger: Ledger, episode: str, agent: int, **options: object
) -> SandboxClaim | None:
    base: dict[str, object] = {
        "run_id": "run", "agents": 2, "agent": agent, "attempt": 1, "holder": f"r{agent}",
        "host": "h", "lease_seconds": 30.0,
    }  # fmt: skip
    return await ledger.claim_sandbox("pool", episode_id=episode, **{**base, **options})  # type: ignore[arg-type]


async def test_sandbox_writes_cut_after_their_commit_are_stored_once(database_url: str) -> None:
    forwarder = Forwarder(database_url)
    await forwarder.start()
    ledger = await Ledger.connect(forwarder.url, max_size=2)
    try:
        record = await _cut_during(
            forwarder, ledger.register_sandbox("pool", "h", {"port": 1}, seats=2, instance_id="i1")
        )
        assert record.state == "idle" and record.details == {"port": 1}

        # The claimer's call runs again and finds its own claim: it still prepares it.
        first = await _cut_during(forwarder, _claim(ledger, "e1", 0))
        assert first is not None and not first.joined and not first.needs_reset
        assert first.epoch == 1
        joined = await _claim(ledger, "e1", 1)
        assert joined is not None and joined.joined
        await _cut_during(forwarder, ledger.sandbox_ready(first, details={"port": 2}))
        assert (await ledger.sandbox("i1")).ready

        # A claim that registers a new instance (the host has room): one instance, to start.
        new = await _cut_during(forwarder, _claim(ledger, "e2", 0, max_instances=2))
        assert new is not None and new.needs_start and not new.joined
        assert len(await ledger.list_sandboxes()) == 2

        assert await _cut_during(forwarder, ledger.finish_sandbox_seat(first, 0)) is False
        assert await _cut_during(forwarder, ledger.finish_sandbox_seat(joined, 1)) is True
        assert (await ledger.sandbox("i1")).state == "dirty"

        # The next claim of the used instance resets it first.
        again = await _cut_during(forwarder, _claim(ledger, "e3", 0))
        assert again is not None and again.instance_id == "i1" and again.needs_reset
        await _cut_during(forwarder, ledger.sandbox_ready(again, reset=True, holder="r0"))

        await _cut_during(forwarder, ledger.retire_sandbox(new.instance_id, "crashed"))
        assert (await ledger.sandbox(new.instance_id)).state == "retired"
        assert await _cut_during(forwarder, ledger.finish_sandbox_seat(again, 0)) is False
        assert await ledger.finish_sandbox_seat(again, 1) is True
        idle = await _cut_during(forwarder, ledger.retire_idle_sandboxes("h", holder="closer"))
        assert [r.instance_id for r in idle] == ["i1"]  # to be stopped, though the rerun
        # found it retired already

        events = [(e.event, e.epoch) for e in await ledger.sandbox_events("i1")]
        assert events == [
            ("started", 0),
            ("claimed", 1),
            ("released", 1),
            ("claimed", 2),
            ("reset", 2),
            ("released", 2),
            ("retired", 2),
        ]
        events = [(e.event, e.epoch) for e in await ledger.sandbox_events(new.instance_id)]
        assert events == [("started", 0), ("claimed", 1), ("retired", 1)]
    finally:
        await ledger.close()
        await forwarder.stop()
