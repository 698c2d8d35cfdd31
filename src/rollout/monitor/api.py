"""The monitor's JSON API (`/api/...`): every page's data, paged, and the run controls.

Lists answer `{"items": [...], "next": CURSOR}`; pass `next` back (as `offset`, `after` or
`cursor`, as each endpoint names it) for the following page; `next` is null on the last page.
Every `limit` is bounded; a value out of range is a 400 naming the parameter. Steps and
checkpoints are one policy's (`rollout.runs.policies`): `policy` may be left out for a run
with one policy, and must name one of a run's several (a 400 otherwise).

| endpoint | what |
| --- | --- |
| `GET /api/runs?offset=&limit=` | runs, newest first |
| `GET /api/runs/{run}` | one run (id or name): settings, state, counts, serving; `policies`: a run's several policies, each with its agents, newest version and serving |
| `GET /api/runs/{run}/steps?after=&limit=&policy=` | a policy's train steps after a step, with rates |
| `GET /api/runs/{run}/checkpoints?after=&limit=&policy=` | a policy's checkpoint chain after a version |
| `GET /api/runs/{run}/evals` | eval reward per checkpoint, suite and environment |
| `GET /api/episodes?run=&environment=&kind=&status=&reward_min=&reward_max=&version=&q=&cursor=&limit=` | episodes, newest first |
| `GET /api/episodes/{id}` | one episode: seats and how they ended |
| `GET /api/episodes/{id}/agents/{agent}/turns?offset=&limit=` | a conversation page |
| `GET /api/episodes/{id}/agents/{agent}/turns/{index}` | one turn's tokens |
| `GET /api/machines?recent_s=` | every role process that beat within `recent_s` seconds (default 600), with its host and state |
| `POST /api/runs/{run}/pause`, `.../resume` | stop / restart handing out episodes |
| `POST /api/runs/{run}/max_lag` with `{"max_lag": N}` | change max_lag |
"""  # noqa: E501

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request

from rollout.monitor import transcripts
from rollout.monitor.app import store_of
from rollout.monitor.store import RECENT_SECONDS

router = APIRouter(prefix="/api")


@router.get("/runs")
async def runs(request: Request, offset: int = 0, limit: int = 50) -> dict[str, Any]:
    return await store_of(request).runs(offset=offset, limit=limit)


@router.get("/runs/{run}")
async def run(request: Request, run: str) -> dict[str, Any]:
    return await store_of(request).run(run)


@router.get("/runs/{run}/steps")
async def steps(
    request: Request, run: str, after: int = -1, limit: int = 1000, policy: str | None = None
) -> dict[str, Any]:
    return await store_of(request).steps(run, after=after, limit=limit, policy=policy or None)


@router.get("/runs/{run}/checkpoints")
async def checkpoints(
    request: Request, run: str, after: int = -1, limit: int = 200, policy: str | None = None
) -> dict[str, Any]:
    return await store_of(request).checkpoints(run, after=after, limit=limit, policy=policy or None)


@router.get("/runs/{run}/evals")
async def evals(request: Request, run: str) -> dict[str, Any]:
    return await store_of(request).evals(run)


@router.post("/runs/{run}/pause")
async def pause(request: Request, run: str) -> dict[str, Any]:
    return await store_of(request).pause(run)


@router.post("/runs/{run}/resume")
async def resume(request: Request, run: str) -> dict[str, Any]:
    return await store_of(request).resume(run)


@router.post("/runs/{run}/max_lag")
async def max_lag(request: Request, run: str, max_lag: Any = Body(embed=True)) -> dict[str, Any]:  # noqa: B008
    return await store_of(request).set_max_lag(run, max_lag)


@router.get("/episodes")
async def episodes(
    request: Request,
    run: str | None = None,
    environment: str | None = None,
    kind: str | None = None,
    status: str | None = None,
    reward_min: float | None = None,
    reward_max: float | None = None,
    version: int | None = None,
    q: str | None = None,
    cursor: int | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    return await transcripts.episodes(
        store_of(request),
        run=run or None,
        environment=environment or None,
        kind=kind or None,
        status=status or None,
        reward_min=reward_min,
        reward_max=reward_max,
        version=version,
        q=q or None,
        cursor=cursor,
        limit=limit,
    )


@router.get("/episodes/{episode_id}")
async def episode(request: Request, episode_id: str) -> dict[str, Any]:
    return await transcripts.episode(store_of(request), episode_id)


@router.get("/episodes/{episode_id}/agents/{agent}/turns")
async def conversation(
    request: Request, episode_id: str, agent: int, offset: int = 0, limit: int = 50
) -> dict[str, Any]:
    return await transcripts.conversation(
        store_of(request), episode_id, agent, offset=offset, limit=limit
    )


@router.get("/episodes/{episode_id}/agents/{agent}/turns/{index}")
async def turn(
    request: Request, episode_id: str, agent: int, index: int, attempt: int | None = None
) -> dict[str, Any]:
    return await transcripts.turn_tokens(store_of(request), episode_id, agent, index, attempt)


@router.get("/machines")
async def machines(request: Request, recent_s: float = RECENT_SECONDS) -> dict[str, Any]:
    return await store_of(request).machines(recent_seconds=recent_s)
