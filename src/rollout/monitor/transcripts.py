"""Transcripts for the web monitor: episodes (filtered, paged), conversations, token views.

- `episodes`: a page of episodes, newest first, filtered by run, environment, kind, status,
  reward range, sampling version and a text search (episode id, parameters, and the messages
  of every recorded request); the cursor is the episode's sequence number.
- `episode`: one episode's header: run, parameters, seats and how each ended.
- `conversation`: a page of one agent's turns as a conversation: each turn shows only the
  messages that are new since the previous turn's request and reply (or the whole context,
  marked, when the client started over), the reply with its tool calls, the sampling version
  and whether the turn's tokens extend the previous turn's.
- `turn_tokens`: one turn's tokens: prompt and completion ids, the completion's logprobs and,
  where the run's tokenizer is readable, each token's text (`rollout.monitor.tokens`).

Only the seat's winning attempt (the one that ended it, else the latest) is shown, as in
`Ledger.episode`.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from rollout.ledger import NotFound
from rollout.monitor.errors import BadParameter, bounded
from rollout.monitor.store import MonitorStore
from rollout.monitor.tokens import decoder_for

MAX_EPISODES = 500
MAX_TURNS = 200
STATUSES = ("pending", "running", "completed", "failed")
KINDS = ("train", "eval", "playground")

# Status, mean completed reward and ended seats of episode `e`.
_STATUS: sql.Composable = sql.SQL(
    """
    CROSS JOIN LATERAL (
        SELECT CASE WHEN bool_and(s.done) THEN
                        CASE WHEN bool_or(x.status = 'failed') THEN 'failed' ELSE 'completed' END
                    WHEN max(s.attempt) > 0 THEN 'running' ELSE 'pending' END AS status,
               avg(x.reward) FILTER (WHERE x.status = 'completed') AS reward,
               count(x.agent) AS seats_ended
        FROM seats s LEFT JOIN seat_ends x ON x.episode_id = s.episode_id AND x.agent = s.agent
        WHERE s.episode_id = e.episode_id) st
    """
)


def _message(raw: Any) -> dict[str, Any]:
    """A recorded message (rollout.contracts.Message as JSON) in the shape pages show."""
    if not isinstance(raw, dict):
        return {"role": "unknown", "text": str(raw), "tool_calls": []}
    content = raw.get("content", "")
    if isinstance(content, list):
        text = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    else:
        text = str(content or "")
    calls = [
        {"id": c.get("id"), "name": c.get("name"), "arguments": c.get("arguments")}
        for c in raw.get("tool_calls") or []
        if isinstance(c, dict)
    ]
    return {
        "role": raw.get("role", "unknown"),
        "text": text,
        "tool_calls": calls,
        "tool_call_id": raw.get("tool_call_id"),
        "name": raw.get("name"),
    }


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Messages equal as a reader sees them (clients re-send replies in their own shape)."""
    return (
        a["role"] == b["role"]
        and a["text"].strip() == b["text"].strip()
        and [c["name"] for c in a["tool_calls"]] == [c["name"] for c in b["tool_calls"]]
    )


def new_messages(
    previous: list[dict[str, Any]] | None, current: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], bool]:
    """The messages of `current` that follow `previous` (the earlier request plus its reply),
    and whether `current` continued it (False: the client sent a new context).

    Example:
        >>> m = lambda role, text: {"role": role, "text": text, "tool_calls": []}
        >>> before = [m("user", "2+2?"), m("assistant", "4")]
        >>> new_messages(before, [*before, m("user", "and 3+3?")])
        ([{'role': 'user', 'text': 'and 3+3?', 'tool_calls': []}], True)
        >>> new_messages(before, [m("user", "hi")])[1]
        False
    """
    if previous is None:
        return current, True
    for known in (previous, previous[:-1]):  # with the reply, or a client that rewrote it
        if len(current) >= len(known) and all(
            _same(a, b) for a, b in zip(known, current, strict=False)
        ):
            return current[len(known) :], True
    return current, False


async def episodes(
    store: MonitorStore,
    *,
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
    """A page of episodes, newest first; pass `next` back as `cursor` for the next page."""
    bounded("limit", limit, 1, MAX_EPISODES)
    if status is not None and status not in STATUSES:
        raise BadParameter(f"status must be one of {STATUSES}, got {status!r}")
    if kind is not None and kind not in KINDS:
        raise BadParameter(f"kind must be one of {KINDS}, got {kind!r}")
    where: list[sql.Composable] = []
    params: dict[str, Any] = {"limit": limit + 1}
    if run is not None:
        params["run"] = (await store.get_run(run)).run_id
        where.append(sql.SQL("e.run_id = %(run)s"))
    if cursor is not None:
        params["cursor"] = cursor
        where.append(sql.SQL("e.seq < %(cursor)s"))
    if environment:
        params["environment"] = environment
        where.append(sql.SQL("r.environment = %(environment)s"))
    if kind is not None:
        params["kind"] = kind
        where.append(sql.SQL("e.kind = %(kind)s"))
    if status is not None:
        params["status"] = status
        where.append(sql.SQL("st.status = %(status)s"))
    if reward_min is not None:
        params["reward_min"] = reward_min
        where.append(sql.SQL("st.reward >= %(reward_min)s"))
    if reward_max is not None:
        params["reward_max"] = reward_max
        where.append(sql.SQL("st.reward <= %(reward_max)s"))
    if version is not None:
        params["version"] = version
        where.append(
            sql.SQL(
                "EXISTS (SELECT 1 FROM turns t WHERE t.episode_id = e.episode_id"
                " AND t.version = %(version)s)"
            )
        )
    if q:
        params["q"] = q
        params["pattern"] = "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        params["pattern"] += "%"
        where.append(
            sql.SQL(
                "(e.episode_id = %(q)s OR e.parameters::text ILIKE %(pattern)s OR EXISTS ("
                "SELECT 1 FROM turns t WHERE t.episode_id = e.episode_id"
                " AND t.request_added::text ILIKE %(pattern)s))"
            )
        )
    query = sql.SQL(
        """
        SELECT e.seq, e.episode_id, e.run_id, r.name, r.environment, e.kind, e.group_index,
               e.member, e.agents, extract(epoch FROM e.created_at)::float8, e.parameters,
               st.status, st.reward, st.seats_ended, tt.turns, tt.low, tt.high
        FROM episodes e JOIN runs r ON r.run_id = e.run_id
        {status}
        CROSS JOIN LATERAL (
            SELECT count(*) AS turns, min(t.version) AS low, max(t.version) AS high
            FROM turns t JOIN seats s ON s.episode_id = t.episode_id AND s.agent = t.agent
                 AND s.attempt = t.attempt
            WHERE t.episode_id = e.episode_id) tt
        {where}
        ORDER BY e.seq DESC LIMIT %(limit)s
        """
    ).format(
        status=_STATUS,
        where=sql.SQL("WHERE ") + sql.SQL(" AND ").join(where) if where else sql.SQL(""),
    )
    rows = await store.fetch_sql(query, params)
    items = [
        {
            "episode_id": row[1],
            "run_id": row[2],
            "run_name": row[3],
            "environment": row[4],
            "kind": row[5],
            "group_index": row[6],
            "member": row[7],
            "agents": row[8],
            "created_at": row[9],
            "parameters": row[10],
            "status": row[11],
            "reward": None if row[12] is None else float(row[12]),
            "seats_ended": row[13],
            "turns": row[14],
            "versions": None if row[15] is None else [row[15], row[16]],
        }
        for row in rows[:limit]
    ]
    more = len(rows) > limit
    return {"items": items, "next": rows[limit - 1][0] if more else None}


async def episode(store: MonitorStore, episode_id: str) -> dict[str, Any]:
    """One episode's header: run, parameters, status, and each seat with how it ended."""
    rows = await store.fetch_sql(
        sql.SQL(
            """
            SELECT e.episode_id, e.run_id, r.name, r.environment, e.kind, e.group_index,
                   e.member, e.parameters, e.seed, e.agents,
                   extract(epoch FROM e.created_at)::float8, st.status, st.reward
            FROM episodes e JOIN runs r ON r.run_id = e.run_id {status}
            WHERE e.episode_id = %(id)s
            """
        ).format(status=_STATUS),
        {"id": episode_id},
    )
    if not rows:
        raise NotFound(f"episode {episode_id!r} not found")
    row = rows[0]
    seats = await store.fetch(
        """
        SELECT s.agent, s.attempt, s.runner, extract(epoch FROM s.expires_at)::float8, s.done,
               x.status, x.reward, x.score, x.metrics, x.error,
               (SELECT count(*) FROM turns t WHERE t.episode_id = s.episode_id
                AND t.agent = s.agent AND t.attempt = s.attempt)
        FROM seats s LEFT JOIN seat_ends x ON x.episode_id = s.episode_id AND x.agent = s.agent
        WHERE s.episode_id = %s ORDER BY s.agent
        """,
        (episode_id,),
    )
    return {
        "episode_id": row[0],
        "run_id": row[1],
        "run_name": row[2],
        "environment": row[3],
        "kind": row[4],
        "group_index": row[5],
        "member": row[6],
        "parameters": row[7],
        "seed": row[8],
        "agents": row[9],
        "created_at": row[10],
        "status": row[11],
        "reward": None if row[12] is None else float(row[12]),
        "seats": [
            {
                "agent": s[0],
                "attempt": s[1],
                "runner": s[2],
                "expires_at": s[3],
                "ended": s[4],
                "status": s[5] or ("running" if s[1] else "pending"),
                "reward": s[6],
                "score": s[7],
                "metrics": s[8],
                "error": s[9],
                "turns": s[10],
            }
            for s in seats
        ],
    }


async def conversation(
    store: MonitorStore, episode_id: str, agent: int, *, offset: int = 0, limit: int = 50
) -> dict[str, Any]:
    """Turns `offset`.. of one agent's winning attempt, as a conversation."""
    bounded("limit", limit, 1, MAX_TURNS)
    bounded("offset", offset, 0, 10**9)
    start = max(offset - 1, 0)  # the turn before the page: what its first turn continues
    rows = await store.fetch(
        """
        SELECT t.turn_index, t.attempt, t.version, t.stop_reason, t.extends_previous,
               t.started_at, t.ended_at, t.temperature, t.prompt_length,
               cardinality(t.completion_tokens),
               (SELECT avg(v) FROM unnest(t.logprobs) v)
        FROM turns t JOIN seats s ON s.episode_id = t.episode_id AND s.agent = t.agent
             AND s.attempt = t.attempt
        WHERE t.episode_id = %s AND t.agent = %s AND t.turn_index >= %s
        ORDER BY t.turn_index LIMIT %s
        """,
        (episode_id, agent, start, limit + 1 + (offset - start)),
    )
    # Requests are stored as what each adds to the one before: rebuilt in one pass.
    requests = (
        await store.ledger.turn_requests(episode_id, agent, rows[0][1], upto=rows[-1][0])
        if rows
        else {}
    )
    previous: list[dict[str, Any]] | None = None
    items = []
    for row in rows:
        request = requests.get(row[0], {})
        messages = [_message(m) for m in request.get("messages") or []]
        reply = _message(request["reply"]) if isinstance(request.get("reply"), dict) else None
        if row[0] >= offset:
            new, continued = new_messages(previous, messages)
            items.append(
                {
                    "index": row[0],
                    "attempt": row[1],
                    "version": row[2],
                    "stop_reason": row[3],
                    "extends_previous": row[4],
                    "seconds": row[6] - row[5],
                    "temperature": row[7],
                    "prompt_tokens": row[8],
                    "completion_tokens": row[9],
                    "mean_logprob": None if row[10] is None else float(row[10]),
                    "protocol": request.get("protocol"),
                    "messages": new,
                    "continued": continued,
                    "reply": reply,
                    "tools": [t.get("name") for t in request.get("tools") or []],
                }
            )
        previous = [*messages, reply] if reply is not None else messages
    more = len(items) > limit
    items = items[:limit]
    return {"items": items, "next": items[-1]["index"] + 1 if more else None}


async def turn_tokens(
    store: MonitorStore, episode_id: str, agent: int, index: int, attempt: int | None = None
) -> dict[str, Any]:
    """One turn's tokens (of the winning attempt unless `attempt` is given), with each
    completion token's text and logprob, decoded by the run's tokenizer where readable."""
    rows = await store.fetch(
        """
        SELECT t.run_id, t.attempt, t.version, t.extends_previous, t.stop_reason,
               t.prompt_tokens, t.completion_tokens, t.logprobs
        FROM turns t JOIN seats s ON s.episode_id = t.episode_id AND s.agent = t.agent
        WHERE t.episode_id = %s AND t.agent = %s AND t.turn_index = %s
              AND t.attempt = COALESCE(%s, s.attempt)
        """,
        (episode_id, agent, index, attempt),
    )
    if not rows:
        raise NotFound(f"turn {index} of agent {agent} of episode {episode_id!r} not found")
    run_id, attempt_, version, extends, stop, prompt, completion, logprobs = rows[0]
    decoder = await decoder_for(await store.get_run(run_id))
    pieces = decoder.pieces(completion)
    return {
        "episode_id": episode_id,
        "agent": agent,
        "index": index,
        "attempt": attempt_,
        "version": version,
        "extends_previous": extends,
        "stop_reason": stop,
        "tokenizer": decoder.source,
        "prompt_tokens": list(prompt),
        "prompt_text": decoder.text(prompt),
        "completion": [
            {
                "id": token,
                "text": None if pieces is None else pieces[i],
                "logprob": logprobs[i] if i < len(logprobs) else None,
            }
            for i, token in enumerate(completion)
        ],
    }
