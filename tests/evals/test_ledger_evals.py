"""The ledger's eval facts on a real Postgres: suite versions, requests, jobs, claims, scores."""

from __future__ import annotations

import asyncio

import pytest

from rollout.ledger import EpisodeSpec, InvalidInput, Ledger, NotFound, StaleFence
from rollout.ledger.evals import EvalJob, EvalScore, SuiteVersionConflict


async def _job(ledger: Ledger, episodes: int = 3, agents: int = 1) -> tuple[str, EvalJob]:
    run = await ledger.create_run("r", "arithmetic.environment:environment", {})
    await ledger.register_eval_suite("s", "1", "hash-1", {"members": []})
    job = await ledger.create_eval_job(run.run_id, "s", "1", 0, episodes=episodes)
    specs = [
        EpisodeSpec(job.job_id, k, {"k": k}, k, agents=agents, kind="eval") for k in range(episodes)
    ]
    await ledger.add_episodes(run.run_id, specs)
    return run.run_id, await ledger.eval_job(job.job_id)


async def test_a_suite_version_keeps_its_content(ledger: Ledger) -> None:
    assert await ledger.register_eval_suite("s", "1", "aaa", {"x": 1})
    assert not await ledger.register_eval_suite("s", "1", "aaa", {"x": 1})  # idempotent
    with pytest.raises(SuiteVersionConflict, match=r"'s' version '1'.*new version"):
        await ledger.register_eval_suite("s", "1", "bbb", {"x": 2})
    assert await ledger.register_eval_suite("s", "2", "bbb", {"x": 2})
    assert (await ledger.eval_suite("s", "1")).definition == {"x": 1}
    with pytest.raises(NotFound):
        await ledger.eval_suite("s", "3")


async def test_requests_and_jobs_are_idempotent_and_linked(ledger: Ledger) -> None:
    run = await ledger.create_run("r", "arithmetic.environment:environment", {})
    assert await ledger.request_eval(run.run_id, "evals/s.yaml", 5)
    assert not await ledger.request_eval(run.run_id, "evals/s.yaml", 5)
    with pytest.raises(InvalidInput, match="version"):
        await ledger.request_eval(run.run_id, "evals/s.yaml", -2)
    with pytest.raises(NotFound):
        await ledger.request_eval("nope", "evals/s.yaml", 1)
    (pending,) = await ledger.eval_requests(run.run_id, pending=True)
    assert pending.version == 5 and pending.job_id is None and pending.trigger == "schedule"
    await ledger.register_eval_suite("s", "1", "h", {})
    job = await ledger.create_eval_job(
        run.run_id, "s", "1", 5, episodes=2, trigger="schedule", request="evals/s.yaml"
    )
    again = await ledger.create_eval_job(run.run_id, "s", "1", 5, episodes=2)
    assert again.job_id == job.job_id and again.trigger == "schedule"
    assert await ledger.eval_requests(run.run_id, pending=True) == []
    assert (await ledger.eval_requests(run.run_id))[0].job_id == job.job_id
    base = await ledger.create_eval_job(run.run_id, "s", "1", -1, episodes=2)
    assert base.job_id != job.job_id and base.version == -1
    with pytest.raises(NotFound, match="suite"):
        await ledger.create_eval_job(run.run_id, "unregistered", "1", 5, episodes=2)


async def test_eval_seats_are_claimed_by_episode_and_only_by_evaluators(ledger: Ledger) -> None:
    run_id, job = await _job(ledger, episodes=3, agents=2)
    # A runner never gets eval seats when it asks for train seats, even of a finished run.
    await ledger.set_setting(run_id, "finished", True)
    assert await ledger.claim_seats("runner", limit=10, kinds=("train",)) == []
    claims = await ledger.claim_eval_seats(job, "evaluator-1", limit=2, lease_seconds=30)
    assert sorted((c.member, c.agent) for c in claims) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert len({c.api_key for c in claims}) == 4 and all(c.kind == "eval" for c in claims)
    assert (await ledger.resolve_key(claims[0].api_key)) is not None
    # Claimed seats are not handed out again until their claims expire.
    rest = await ledger.claim_eval_seats(job, "evaluator-2", limit=5)
    assert [(c.member, c.agent) for c in rest] == [(2, 0), (2, 1)]
    assert await ledger.claim_eval_seats(job, "evaluator-2", limit=5) == []
    for claim in claims:
        await ledger.end_seat(claim, reward=1.0 if claim.agent == 0 else 0.0)
    ends = await ledger.eval_seat_ends(job)
    assert [(e.member, e.agent, e.reward) for e in ends] == [
        (0, 0, 1.0),
        (0, 1, 0.0),
        (1, 0, 1.0),
        (1, 1, 0.0),
    ]
    progress = await ledger.eval_job(job.job_id)
    assert (progress.seats, progress.seats_ended, progress.scored) == (6, 4, False)


async def test_an_expired_eval_claim_is_played_again_as_a_new_attempt(ledger: Ledger) -> None:
    _run_id, job = await _job(ledger, episodes=1)
    (first,) = await ledger.claim_eval_seats(job, "killed", limit=1, lease_seconds=0.05)
    await asyncio.sleep(0.1)
    (second,) = await ledger.claim_eval_seats(job, "next", limit=1)
    assert (first.attempt, second.attempt) == (1, 2)
    assert await ledger.end_seat(second, reward=1.0)
    with pytest.raises(StaleFence):
        await ledger.end_seat(first, reward=0.0)
    assert len(await ledger.eval_seat_ends(job)) == 1


async def test_scores_are_written_once_per_job_and_environment(ledger: Ledger) -> None:
    run_id, job = await _job(ledger)
    scores = [
        EvalScore("a", 0, 0.5, 0.2, 0.8, 3, 0, "wilson"),
        EvalScore("b", 1, 0.25, 0.0, 0.6, 3, 1, "t"),
    ]
    assert await ledger.record_eval_scores(job, scores, backend="vllm")
    assert not await ledger.record_eval_scores(job, scores, backend="vllm")
    rows = await ledger.eval_scores(run_id)
    assert [(r.environment, r.score, r.version, r.suite_version, r.backend) for r in rows] == [
        ("a", 0.5, 0, "1", "vllm"),
        ("b", 0.25, 0, "1", "vllm"),
    ]
    assert (await ledger.eval_job(job.job_id)).scored
    with pytest.raises(InvalidInput):
        await ledger.record_eval_scores(job, [], backend="vllm")
    with pytest.raises(InvalidInput, match="backend"):
        await ledger.record_eval_scores(job, scores, backend="")


async def test_the_trainers_read_never_returns_eval_episodes(ledger: Ledger) -> None:
    run_id, job = await _job(ledger, episodes=2)
    # A train group with the same group index as the eval job, complete like the job.
    await ledger.add_episodes(run_id, [EpisodeSpec(job.job_id, m, {}, m) for m in range(2)])
    while claim := await ledger.claim_seat("runner", run_id=run_id, kinds=("train",)):
        await ledger.end_seat(claim, reward=1.0)
    for claim in await ledger.claim_eval_seats(job, "evaluator", limit=10):
        await ledger.end_seat(claim, reward=0.0)
    (group,) = await ledger.complete_groups(run_id, 10)
    assert group.group_index == job.job_id
    assert [e.kind for e in group.episodes] == ["train", "train"]
