"""The monitor's HTML pages (Jinja2 templates, htmx for live parts and controls).

Each page is rendered from the same functions as the JSON API (`MonitorStore`,
`rollout.monitor.transcripts`). Parts that update live or load on demand are fragments under
`/_/...`, fetched by htmx: the runs table, a run's status and controls, a page of episodes, a
page of one agent's conversation, one turn's tokens, the machines table.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from rollout.ledger import NotFound
from rollout.monitor import transcripts
from rollout.monitor.app import HERE, store_of

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=HERE / "templates")


def _when(value: float | None) -> str:
    if value is None:
        return "-"
    return dt.datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M:%S")


def _ago(value: float | None) -> str:
    if value is None:
        return "never"
    seconds = time.time() - value
    later, seconds = seconds < -0.5, abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or unit == "s":
            amount = f"{seconds / size:.0f}{unit}"
            return f"in {amount}" if later else f"{amount} ago"
    raise AssertionError  # pragma: no cover


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}g}" if abs(value) >= 1e4 or abs(value) < 1e-3 else f"{value:.3f}"


def logprob_color(logprob: float | None) -> str:
    """A background colour for a token: red (unlikely) through yellow to green (likely).

    Example:
        >>> logprob_color(0.0), logprob_color(-50.0)
        ('hsl(120, 75%, 82%)', 'hsl(0, 75%, 82%)')
    """
    if logprob is None or not math.isfinite(logprob):
        return "hsl(0, 0%, 90%)"
    return f"hsl({120 * math.exp(max(logprob, -50.0)):.0f}, 75%, 82%)"


templates.env.filters.update(
    when=_when,
    ago=_ago,
    num=_num,
    color=logprob_color,
    tojson_pretty=lambda v: json.dumps(v, indent=2, default=str),
)


def _page(request: Request, name: str, code: int = 200, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=code)


def error_page(request: Request, status: int, message: str) -> Response:
    return _page(request, "error.html", status, status=status, message=message)


# --- runs ---------------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
async def runs_page(request: Request, offset: int = 0) -> Response:
    runs = await store_of(request).runs(offset=offset, limit=50)
    return _page(request, "runs.html", runs=runs, offset=offset)


@router.get("/_/runs", response_class=HTMLResponse)
async def runs_rows(request: Request, offset: int = 0) -> Response:
    runs = await store_of(request).runs(offset=offset, limit=50)
    return _page(request, "_runs_table.html", runs=runs, offset=offset)


@router.get("/runs/{run}", response_class=HTMLResponse)
async def run_page(request: Request, run: str) -> Response:
    detail = await store_of(request).run(run)
    return _page(request, "run.html", run=detail)


@router.get("/_/runs/{run}/status", response_class=HTMLResponse)
async def run_status(request: Request, run: str) -> Response:
    return _page(request, "_run_status.html", run=await store_of(request).run(run))


@router.post("/_/runs/{run}/pause", response_class=HTMLResponse)
async def pause(request: Request, run: str) -> Response:
    await store_of(request).pause(run)
    return await run_status(request, run)


@router.post("/_/runs/{run}/resume", response_class=HTMLResponse)
async def resume(request: Request, run: str) -> Response:
    await store_of(request).resume(run)
    return await run_status(request, run)


@router.post("/_/runs/{run}/max_lag", response_class=HTMLResponse)
async def max_lag(request: Request, run: str) -> Response:
    # A url-encoded form of one field: parsed here rather than with a multipart dependency.
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    value = (form.get("max_lag") or [""])[0].strip()
    await store_of(request).set_max_lag(run, value)
    return await run_status(request, run)


@router.get("/runs/{run}/checkpoints", response_class=HTMLResponse)
async def checkpoints_page(
    request: Request, run: str, after: int = -1, policy: str | None = None
) -> Response:
    """The checkpoint tree; a run with several policies has a chain per policy (every policy's
    first versions, or, with `policy`, that one's from `after`)."""
    store = store_of(request)
    detail = await store.run(run)
    evals: dict[int, list[dict[str, Any]]] = {}
    policy_evals: dict[str, dict[int, list[dict[str, Any]]]] = {}  # each policy's scores
    if detail["has_evals"]:
        for row in (await store.evals(run))["items"]:
            evals.setdefault(row["version"], []).append(row)
            policy_evals.setdefault(row["policy"], {}).setdefault(row["version"], []).append(row)
    if not detail["policies"]:
        tree = await store.checkpoints(run, after=after, limit=200)
        return _page(request, "checkpoints.html", run=detail, tree=tree, evals=evals, after=after)
    names = [store.policy_of(await store.get_run(run), policy)] if policy else detail["policies"]
    chains = {
        name: await store.checkpoints(run, after=after if policy else -1, limit=200, policy=name)
        for name in names
    }
    # An eval of version V plays every policy's checkpoint V and scores each policy.
    return _page(
        request,
        "checkpoints.html",
        run=detail,
        chains=chains,
        evals=policy_evals,
        after=after if policy else -1,
        policy=policy,
    )


@router.get("/runs/{run}/evals", response_class=HTMLResponse)
async def evals_page(request: Request, run: str) -> Response:
    store = store_of(request)
    detail = await store.run(run)
    if not detail["has_evals"]:
        raise NotFound(f"run {detail['name']!r} has no eval episodes")
    return _page(request, "evals.html", run=detail, evals=await store.evals(run))


# --- transcripts --------------------------------------------------------------------------------

FILTERS = ("run", "environment", "kind", "status", "reward_min", "reward_max", "version", "q")


def _filters(request: Request) -> dict[str, str]:
    return {k: v for k in FILTERS if (v := request.query_params.get(k, "").strip())}


async def _episode_page(request: Request, cursor: int | None) -> dict[str, Any]:
    raw = _filters(request)
    values: dict[str, Any] = dict(raw)
    for name, kind in (("reward_min", float), ("reward_max", float), ("version", int)):
        if name in values:
            try:
                values[name] = kind(values[name])
            except ValueError:
                from rollout.monitor.errors import BadParameter

                raise BadParameter(f"{name} must be a number, got {values[name]!r}") from None
    page = await transcripts.episodes(store_of(request), cursor=cursor, limit=50, **values)
    more = None
    if page["next"] is not None:
        more = "/_/episodes?" + urlencode({**raw, "cursor": page["next"]})
    return {"page": page, "filters": raw, "more": more}


@router.get("/episodes", response_class=HTMLResponse)
async def episodes_page(request: Request) -> Response:
    context = await _episode_page(request, None)
    run = None
    if "run" in context["filters"]:
        run = await store_of(request).get_run(context["filters"]["run"])
    return _page(request, "episodes.html", run=run, **context)


@router.get("/_/episodes", response_class=HTMLResponse)
async def episodes_rows(request: Request, cursor: int | None = None) -> Response:
    return _page(request, "_episode_rows.html", **await _episode_page(request, cursor))


@router.get("/episodes/{episode_id}", response_class=HTMLResponse)
async def episode_page(request: Request, episode_id: str) -> Response:
    detail = await transcripts.episode(store_of(request), episode_id)
    return _page(request, "episode.html", episode=detail)


@router.get("/_/episodes/{episode_id}/agents/{agent}/turns", response_class=HTMLResponse)
async def conversation(request: Request, episode_id: str, agent: int, offset: int = 0) -> Response:
    page = await transcripts.conversation(store_of(request), episode_id, agent, offset=offset)
    return _page(request, "_turns.html", page=page, episode_id=episode_id, agent=agent)


@router.get(
    "/_/episodes/{episode_id}/agents/{agent}/turns/{index}/tokens", response_class=HTMLResponse
)
async def tokens(request: Request, episode_id: str, agent: int, index: int) -> Response:
    turn = await transcripts.turn_tokens(store_of(request), episode_id, agent, index)
    return _page(request, "_tokens.html", turn=turn)


# --- machines -----------------------------------------------------------------------------------


@router.get("/machines", response_class=HTMLResponse)
async def machines_page(request: Request) -> Response:
    machines = await store_of(request).machines()
    return _page(request, "machines.html", machines=machines)


@router.get("/_/machines", response_class=HTMLResponse)
async def machines_rows(request: Request) -> Response:
    machines = await store_of(request).machines()
    return _page(request, "_machines_table.html", machines=machines)
