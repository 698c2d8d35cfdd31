"""Transcripts for the web monitor: episodes (filtered, paged), conversations, token views.

- `episodes`: a page of episodes, newest first, filtered by run, environment, kind, status,
  reward range, sampling version and a text search (episode id, parameters, and the messages
  of every recorded request); the cursor is the episode's sequence number.
- `episode`: one episode's header: run, parameters, seats and how each ended.
- `conversation`: a page of one agent's turns as a conversation: each turn shows only the
  messages that are new since the previous turn's request and reply (or the whole context,
  marked, when the client started over), the reply with its tool calls and their results (the
  tool messages that answer them, from the next request: a command and its output in the turn
  that ran it), the sampling version and whether the turn's tokens extend the previous turn's.
- `turn_tokens`: one turn's tokens: prompt and completion ids, the completion's logprobs and,
  where the run's tokenizer is readable, each token's text (`rollout.monitor.tokens`).

Only the seat's winning attempt (the one that ended it, else the latest) is shown, as in
`Ledger.episode`. The rows come from the ledger's `MonitorReads` (`MonitorStore.reads`).
"""

from __future__ import annotations

from typing import Any

from rollout.ledger import NotFound
from rollout.ledger.monitor import EPISODE_STATUSES, EpisodeFilter
from rollout.ledger.records import EPISODE_KINDS
from rollout.monitor.errors import BadParameter, bounded
from rollout.monitor.store import MonitorStore
from rollout.monitor.tokens import decoder_for

MAX_EPISODES = 500
MAX_TURNS = 200


# What an episode shows first, in the order pages and the API show it.
_EPISODE = ("episode_id", "run_id", "run_name", "environment", "kind", "group_index", "member")


def _columns(row: dict[str, Any], *names: str) -> dict[str, Any]:
    """The columns `names` of `row`, in that order."""
    return {name: row[name] for name in names}


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
    if status is not None and status not in EPISODE_STATUSES:
        raise BadParameter(f"status must be one of {EPISODE_STATUSES}, got {status!r}")
    if kind is not None and kind not in EPISODE_KINDS:
        raise BadParameter(f"kind must be one of {EPISODE_KINDS}, got {kind!r}")
    where = EpisodeFilter(
        run_id=None if run is None else (await store.get_run(run)).run_id,
        environment=environment,
        kind=kind,
        status=status,
        reward_min=reward_min,
        reward_max=reward_max,
        version=version,
        text=q,
    )
    rows = await store.reads.episodes(where, cursor=cursor, limit=limit + 1)
    items = [
        {
            **_columns(row, *_EPISODE, "agents", "created_at", "parameters", "status"),
            "reward": None if row["reward"] is None else float(row["reward"]),
            "seats_ended": row["seats_ended"],
            "turns": row["turns"],
            "versions": None
            if row["version_low"] is None
            else [row["version_low"], row["version_high"]],
        }
        for row in rows[:limit]
    ]
    more = len(rows) > limit
    return {"items": items, "next": rows[limit - 1]["seq"] if more else None}


async def episode(store: MonitorStore, episode_id: str) -> dict[str, Any]:
    """One episode's header: run, parameters, status, and each seat with how it ended."""
    row = await store.reads.episode(episode_id)
    if row is None:
        raise NotFound(f"episode {episode_id!r} not found")
    seats = await store.reads.seats(episode_id)
    return {
        **_columns(row, *_EPISODE, "parameters", "seed", "agents", "created_at", "status"),
        "reward": None if row["reward"] is None else float(row["reward"]),
        "seats": [
            {
                "agent": seat["agent"],
                "attempt": seat["attempt"],
                "runner": seat["runner"],
                "expires_at": seat["expires_at"],
                "ended": seat["ended"],
                "status": seat["status"] or ("running" if seat["attempt"] else "pending"),
                "reward": seat["reward"],
                "score": seat["score"],
                "metrics": seat["metrics"],
                "error": seat["error"],
                "turns": seat["turns"],
            }
            for seat in seats
        ],
    }


async def conversation(
    store: MonitorStore, episode_id: str, agent: int, *, offset: int = 0, limit: int = 50
) -> dict[str, Any]:
    """Turns `offset`.. of one agent's winning attempt, as a conversation."""
    bounded("limit", limit, 1, MAX_TURNS)
    bounded("offset", offset, 0, 10**9)
    start = max(offset - 1, 0)  # the turn before the page: what its first turn continues
    rows = await store.reads.conversation(
        episode_id, agent, start=start, limit=limit + 1 + (offset - start)
    )
    # Requests are stored as what each adds to the one before: rebuilt in one pass.
    requests = (
        await store.ledger.turn_requests(
            episode_id, agent, rows[0]["attempt"], upto=rows[-1]["turn_index"]
        )
        if rows
        else {}
    )
    previous: list[dict[str, Any]] | None = None
    items = []
    for row in rows:
        index = row["turn_index"]
        request = requests.get(index, {})
        messages = [_message(m) for m in request.get("messages") or []]
        reply = _message(request["reply"]) if isinstance(request.get("reply"), dict) else None
        if index >= offset:
            new, continued = new_messages(previous, messages)
            items.append(
                {
                    "index": index,
                    "attempt": row["attempt"],
                    "version": row["version"],
                    "stop_reason": row["stop_reason"],
                    "extends_previous": row["extends_previous"],
                    "seconds": row["ended_at"] - row["started_at"],
                    "temperature": row["temperature"],
                    "prompt_tokens": row["prompt_length"],
                    "completion_tokens": row["completion_length"],
                    "mean_logprob": None
                    if row["mean_logprob"] is None
                    else float(row["mean_logprob"]),
                    "protocol": request.get("protocol"),
                    "messages": new,
                    "continued": continued,
                    "reply": reply,
                    "tools": [t.get("name") for t in request.get("tools") or []],
                }
            )
        previous = [*messages, reply] if reply is not None else messages
    _attach_results(items)
    more = len(items) > limit
    items = items[:limit]
    return {"items": items, "next": items[-1]["index"] + 1 if more else None}


def _attach_results(items: list[dict[str, Any]]) -> None:
    """Show each tool's result with the turn whose reply called it: the tool messages that
    answer a reply's calls move from the next turn's new messages to this turn's `results`
    (a command and its output, side by side)."""
    for item, following in zip(items, [*items[1:], None], strict=True):
        item["results"] = []
        calls = {c["id"] for c in (item["reply"] or {}).get("tool_calls", []) if c.get("id")}
        if not calls or following is None:
            continue
        answers = [
            m for m in following["messages"] if m["role"] == "tool" and m["tool_call_id"] in calls
        ]
        item["results"] = answers
        following["messages"] = [m for m in following["messages"] if m not in answers]


async def turn_tokens(
    store: MonitorStore, episode_id: str, agent: int, index: int, attempt: int | None = None
) -> dict[str, Any]:
    """One turn's tokens (of the winning attempt unless `attempt` is given), with each
    completion token's text and logprob, decoded by the run's tokenizer where readable."""
    row = await store.reads.turn_tokens(episode_id, agent, index, attempt)
    if row is None:
        raise NotFound(f"turn {index} of agent {agent} of episode {episode_id!r} not found")
    completion, logprobs = row["completion_tokens"], row["logprobs"]
    decoder = await decoder_for(await store.get_run(row["run_id"]))
    pieces = decoder.pieces(completion)
    return {
        "episode_id": episode_id,
        "agent": agent,
        "index": index,
        "attempt": row["attempt"],
        "version": row["version"],
        "extends_previous": row["extends_previous"],
        "stop_reason": row["stop_reason"],
        "tokenizer": decoder.source,
        "prompt_tokens": list(row["prompt_tokens"]),
        "prompt_text": decoder.text(row["prompt_tokens"]),
        "completion": [
            {
                "id": token,
                "text": None if pieces is None else pieces[i],
                "logprob": logprobs[i] if i < len(logprobs) else None,
            }
            for i, token in enumerate(completion)
        ],
    }
