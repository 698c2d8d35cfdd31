"""Episodes and seats: claims, keys, fenced turns and ends, pausing."""

from __future__ import annotations

import asyncio

import pytest

from rollout.ledger import (
    EpisodeSpec,
    InvalidInput,
    KeyInfo,
    Ledger,
    NotFound,
    RunRecord,
    StaleFence,
)
from tests.ledger.ledger_helpers import turn_for


async def _claim_all(ledger: Ledger, run_id: str, runner: str = "r") -> list:
    claims = []
    while (claim := await ledger.claim_seat(runner, run_id=run_id)) is not None:
        claims.append(claim)
    return claims


async def test_add_episodes_is_idempotent(ledger: Ledger, run: RunRecord) -> None:
    specs = [
        EpisodeSpec(g, m, {"q": f"{g}.{m}"}, seed=g * 10 + m) for g in range(2) for m in range(2)
    ]
    ids = await ledger.add_episodes(run.run_id, specs)
    assert len(set(ids)) == 4
    assert await ledger.add_episodes(run.run_id, specs) == ids
    episodes = await ledger.list_episodes(run.run_id)
    assert sorted(e.episode_id for e in episodes) == sorted(ids)
    assert len(await _claim_all(ledger, run.run_id)) == 4  # seats were not duplicated


async def test_bad_episode_specs_are_refused(ledger: Ledger, run: RunRecord) -> None:
    with pytest.raises(InvalidInput, match=r"episodes\[0\]\.kind.*'training'"):
        await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1, kind="training")])
    with pytest.raises(InvalidInput, match=r"episodes\[1\]\.agents"):
        await ledger.add_episodes(
            run.run_id, [EpisodeSpec(0, 0, {}, 1), EpisodeSpec(0, 1, {}, 1, agents=0)]
        )
    with pytest.raises(NotFound, match="'ghost'"):
        await ledger.add_episodes("ghost", [EpisodeSpec(0, 0, {}, 1)])
    assert await ledger.list_episodes(run.run_id) == []


async def test_every_seat_is_claimed_once_in_order(ledger: Ledger, run: RunRecord) -> None:
    await ledger.add_episodes(
        run.run_id, [EpisodeSpec(0, m, {"m": m}, seed=m, agents=2) for m in range(3)]
    )
    claims = await _claim_all(ledger, run.run_id)
    assert [(c.member, c.agent, c.attempt) for c in claims] == [
        (0, 0, 1), (0, 1, 1), (1, 0, 1), (1, 1, 1), (2, 0, 1), (2, 1, 1)
    ]  # fmt: skip
    assert claims[2].parameters == {"m": 1} and claims[2].seed == 1 and claims[2].agents == 2
    assert len({c.api_key for c in claims}) == 6
    info = await ledger.resolve_key(claims[3].api_key)
    assert info == KeyInfo(run.run_id, claims[3].episode_id, 1, 1)
    assert await ledger.resolve_key("rk-unknown") is None


async def test_batch_claims_hand_out_distinct_seats_in_order(
    ledger: Ledger, run: RunRecord
) -> None:
    await ledger.add_episodes(
        run.run_id, [EpisodeSpec(0, m, {"m": m}, seed=m, agents=2) for m in range(3)]
    )
    first = await ledger.claim_seats("r", limit=4, run_id=run.run_id)
    assert [(c.member, c.agent) for c in first] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    rest = await ledger.claim_seats("r", limit=10, run_id=run.run_id)
    assert [(c.member, c.agent) for c in rest] == [(2, 0), (2, 1)]
    assert await ledger.claim_seats("r", limit=10, run_id=run.run_id) == []
    claims = first + rest
    assert len({c.api_key for c in claims}) == 6
    for claim in claims:  # each key resolves to its own seat
        assert await ledger.resolve_key(claim.api_key) == KeyInfo(
            run.run_id, claim.episode_id, claim.agent, 1
        )
    with pytest.raises(InvalidInput, match="limit must be >= 1, got 0"):
        await ledger.claim_seats("r", limit=0)


async def test_claims_filter_by_run_and_kind(ledger: Ledger, run: RunRecord) -> None:
    other = await ledger.create_run("other", "env:b", {})
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1, kind="eval")])
    await ledger.add_episodes(other.run_id, [EpisodeSpec(0, 0, {}, 1)])
    assert await ledger.claim_seat("r", run_id=run.run_id, kinds=["train"]) is None
    claim = await ledger.claim_seat("r", kinds=["eval"])
    assert claim is not None and claim.run_id == run.run_id and claim.kind == "eval"
    claim = await ledger.claim_seat("r")
    assert claim is not None and claim.run_id == other.run_id


async def test_paused_runs_hand_out_no_seats(ledger: Ledger, run: RunRecord) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, m) for m in range(2)])
    await ledger.pause_run(run.run_id)
    assert await ledger.claim_seat("r") is None
    assert await ledger.claim_seat("r", run_id=run.run_id) is None
    await ledger.resume_run(run.run_id)
    assert len(await _claim_all(ledger, run.run_id)) == 2


async def test_finished_runs_hand_out_no_seats(ledger: Ledger, run: RunRecord) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, m) for m in range(2)])
    await ledger.set_setting(run.run_id, "finished", True)
    assert await ledger.claim_seats("r", limit=5) == []  # leftovers of a finished run stay put
    await ledger.set_setting(run.run_id, "finished", False)
    assert len(await _claim_all(ledger, run.run_id)) == 2


async def test_expired_claim_is_taken_over_and_the_old_attempt_is_fenced(
    ledger: Ledger, run: RunRecord
) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1)])
    # Half a second: "still held" must hold on a machine busy enough to delay a round trip.
    old = await ledger.claim_seat("old-runner", lease_seconds=0.5)
    assert old is not None and old.attempt == 1
    assert await ledger.record_turn(turn_for(old, 0))
    assert await ledger.claim_seat("new-runner") is None  # still held
    await asyncio.sleep(0.6)
    new = await ledger.claim_seat("new-runner")
    assert new is not None and (new.episode_id, new.agent, new.attempt) == (
        old.episode_id, 0, 2
    )  # fmt: skip
    assert new.api_key != old.api_key

    with pytest.raises(StaleFence, match="taken over by attempt 2"):
        await ledger.record_turn(turn_for(old, 1))
    with pytest.raises(StaleFence):
        await ledger.record_turns([turn_for(old, 1)])
    with pytest.raises(StaleFence):
        await ledger.end_seat(old, reward=1.0)
    with pytest.raises(StaleFence):
        await ledger.heartbeat(old)
    # Nothing of the old attempt changed: one turn, no end.
    assert len(await ledger.seat_turns(old.episode_id, 0, 1)) == 1
    episode = await ledger.episode(old.episode_id)
    assert episode.ends == () and episode.seats[0].attempt == 2
    assert episode.seats[0].runner == "new-runner"

    assert await ledger.record_turn(turn_for(new, 0))
    assert await ledger.end_seat(new, reward=0.5)
    episode = await ledger.episode(old.episode_id)
    assert [(t.attempt, t.index) for t in episode.turns] == [(2, 0)]  # the winning attempt's
    assert [(e.attempt, e.reward) for e in episode.ends] == [(2, 0.5)]


async def test_heartbeat_keeps_a_claim(ledger: Ledger, run: RunRecord) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1)])
    claim = await ledger.claim_seat("r", lease_seconds=0.2)
    assert claim is not None
    for _ in range(3):
        await asyncio.sleep(0.1)
        await ledger.heartbeat(claim, lease_seconds=0.2)
    assert await ledger.claim_seat("thief") is None
    await asyncio.sleep(0.3)  # expired but not taken over: a heartbeat revives it
    await ledger.heartbeat(claim, lease_seconds=5)
    assert await ledger.claim_seat("thief") is None


async def test_heartbeats_keep_a_batch_of_claims_and_name_the_ones_taken_over(
    ledger: Ledger, run: RunRecord
) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, m) for m in range(4)])
    claims = [await ledger.claim_seat("r", lease_seconds=0.3) for _ in range(4)]
    kept, lost, ended, late = [c for c in claims if c is not None]
    await asyncio.sleep(0.5)  # every claim expired
    taker = await ledger.claim_seat("thief")  # takes the first expired seat over: `kept`'s
    assert taker is not None and taker.episode_id == kept.episode_id
    await ledger.end_seat(ended, reward=1.0)
    # One statement for all four: the taken-over claim is named; the ended seat is left alone;
    # the expired ones not taken over are revived.
    assert await ledger.heartbeats([kept, lost, ended, late], lease_seconds=5) == [kept]
    assert await ledger.claim_seat("thief") is None  # `lost` and `late` hold again
    assert await ledger.heartbeats([], lease_seconds=5) == []
    with pytest.raises(InvalidInput, match="lease_seconds"):
        await ledger.heartbeats([lost], lease_seconds=0)


async def test_the_same_turn_twice_is_stored_once(ledger: Ledger, run: RunRecord) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1)])
    claim = await ledger.claim_seat("r")
    assert claim is not None
    turn = turn_for(claim, 0)
    assert await ledger.record_turn(turn)
    assert not await ledger.record_turn(turn)
    assert await ledger.record_turns([turn, turn_for(claim, 1), turn_for(claim, 1)]) == [
        False, True, False
    ]  # fmt: skip
    stored = await ledger.seat_turns(claim.episode_id, 0, claim.attempt)
    assert stored == [turn, turn_for(claim, 1, started_at=stored[1].started_at,
                                     ended_at=stored[1].ended_at)]  # fmt: skip
    assert stored[0].logprobs == turn.logprobs  # float64 exactly
    assert await ledger.last_turn(claim.episode_id, 0, claim.attempt) == stored[1]
    rows = await ledger.turns_for_run(run.run_id)
    assert [t.index for _, t in rows] == [0, 1]
    assert await ledger.turns_for_run(run.run_id, since=rows[0][0]) == rows[1:]


async def test_turn_validation(ledger: Ledger, run: RunRecord) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1)])
    claim = await ledger.claim_seat("r")
    assert claim is not None
    with pytest.raises(InvalidInput, match="2 values for 3 completion tokens"):
        await ledger.record_turn(turn_for(claim, 0, logprobs=(-1.0, -2.0)))
    with pytest.raises(NotFound, match="seat 5"):
        await ledger.record_turn(turn_for(claim, 0, agent=5))


async def test_first_end_wins_and_late_turns_are_refused(ledger: Ledger, run: RunRecord) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1)])
    claim = await ledger.claim_seat("r")
    assert claim is not None
    assert await ledger.record_turn(turn_for(claim, 0))
    assert await ledger.end_seat(claim, reward=1.0, metrics={"turns": 1.0}, score={"ok": True})
    assert not await ledger.end_seat(claim, reward=0.0, status="failed", error="late")
    ends = (await ledger.episode(claim.episode_id)).ends
    assert [(e.status, e.reward, e.metrics, e.score) for e in ends] == [
        ("completed", 1.0, {"turns": 1.0}, {"ok": True})
    ]
    assert not await ledger.record_turn(turn_for(claim, 0))  # a retry of a recorded turn
    with pytest.raises(StaleFence, match="has ended"):
        await ledger.record_turn(turn_for(claim, 1))
    assert await ledger.claim_seat("r") is None  # ended seats are never handed out again


async def test_end_seat_validates(ledger: Ledger, run: RunRecord) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1)])
    claim = await ledger.claim_seat("r")
    assert claim is not None
    with pytest.raises(InvalidInput, match=r"status.*'done'"):
        await ledger.end_seat(claim, reward=1.0, status="done")
    with pytest.raises(InvalidInput, match="reward must be finite"):
        await ledger.end_seat(claim, reward=float("nan"))
    with pytest.raises(InvalidInput, match=r"metrics\['loss'\]"):
        await ledger.end_seat(claim, reward=1.0, metrics={"loss": float("inf")})
    assert (await ledger.episode(claim.episode_id)).ends == ()


async def test_episode_not_found(ledger: Ledger) -> None:
    with pytest.raises(NotFound, match="'nope'"):
        await ledger.episode("nope")


async def test_concurrent_record_turn_calls_each_get_their_own_answer(
    ledger: Ledger, run: RunRecord
) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, m) for m in range(3)])
    stale = await ledger.claim_seat("r", lease_seconds=0.05)
    live = await ledger.claim_seat("r")
    other = await ledger.claim_seat("r")
    assert stale is not None and live is not None and other is not None
    await asyncio.sleep(0.1)
    assert await ledger.claim_seat("r2") is not None  # takes `stale` over
    assert await ledger.record_turn(turn_for(other, 0))
    calls = [
        ledger.record_turn(turn_for(live, i)) for i in range(20)
    ] + [
        ledger.record_turn(turn_for(stale, 0)),  # fenced out
        ledger.record_turn(turn_for(live, 99, agent=3)),  # no such seat
        ledger.record_turn(turn_for(live, 50, prompt_tokens=(2**31,))),  # not an int32
        ledger.record_turn(turn_for(other, 0)),  # recorded before
        ledger.record_turn(turn_for(live, 0)),  # repeated within the batch
    ]  # fmt: skip
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert results[:20] == [True] * 20
    assert isinstance(results[20], StaleFence)
    assert isinstance(results[21], NotFound)
    assert isinstance(results[22], InvalidInput) and "turn.prompt_tokens" in str(results[22])
    assert results[23:] == [False, False]
    assert len(await ledger.seat_turns(live.episode_id, 0, live.attempt)) == 20


async def test_record_turns_is_all_or_nothing(ledger: Ledger, run: RunRecord) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, m, {}, m) for m in range(2)])
    live = await ledger.claim_seat("r")
    done = await ledger.claim_seat("r")
    assert live is not None and done is not None
    await ledger.end_seat(done, reward=0.0)
    with pytest.raises(StaleFence, match="has ended"):
        await ledger.record_turns([turn_for(live, 0), turn_for(done, 0)])
    assert await ledger.seat_turns(live.episode_id, 0, live.attempt) == []
    big = [turn_for(live, i) for i in range(1200)]  # several statements in one transaction
    assert await ledger.record_turns(big) == [True] * 1200
    assert len(await ledger.seat_turns(live.episode_id, 0, live.attempt)) == 1200


async def test_empty_and_large_token_lists_round_trip(ledger: Ledger, run: RunRecord) -> None:
    await ledger.add_episodes(run.run_id, [EpisodeSpec(0, 0, {}, 1)])
    claim = await ledger.claim_seat("r")
    assert claim is not None
    turns = [
        turn_for(claim, 0, completion_tokens=(), logprobs=()),
        turn_for(claim, 1, prompt_tokens=(), completion_tokens=(5,), logprobs=(-0.5,)),
        turn_for(
            claim,
            2,
            prompt_tokens=tuple(range(9000)),
            completion_tokens=(2**31 - 1, 0),
            logprobs=(-1.0, -2.0),
        ),
    ]
    assert await ledger.record_turns(turns) == [True, True, True]
    stored = await ledger.seat_turns(claim.episode_id, 0, claim.attempt)
    assert [t.prompt_tokens for t in stored] == [t.prompt_tokens for t in turns]
    assert [t.completion_tokens for t in stored] == [t.completion_tokens for t in turns]
    assert [t.logprobs for t in stored] == [t.logprobs for t in turns]
