"""The failure threshold: a run whose episodes mostly fail pauses itself, marked `failed`.

A broken environment (a Task whose `start()` raises) makes every seat end `failed`; training on
rewards of 0 would only hide it. Once at least `MIN_ENDED` episodes have ended and more than the
run setting `max_failure_fraction` of them failed (`rollout.runs.live`, default 0.5; 1.0 turns
the check off), `check_failures` pauses the run (setting `paused`: no new seats are handed out, the
seats in flight play on), records why (setting `error`: the counts and the first error, one
line) and marks it `status: failed`. Supervisors retire its roles, `rollout train` exits
non-zero showing the error, and `rollout runs list`/`runs show` and the monitor show it.

Nothing recorded is lost: after fixing the environment, `rollout runs resume RUN`
(`Ledger.resume_run`) clears the failure and the run trains on (under a running `rollout up`, or
`rollout up --run RUN --until-finished`). The threshold then judges only the episodes ended
since that resume (the counts at the resume are the setting `failures_baseline`), so the old
failures do not pause it again at once.

Example:
    >>> too_many_failures({"ended": 10, "failed": 6})
    True
    >>> too_many_failures({"ended": 10, "failed": 5})
    False
    >>> too_many_failures({"ended": 3, "failed": 3})  # too few to judge yet
    False
    >>> too_many_failures({"ended": 10, "failed": 10}, fraction=1.0)  # the check is off
    False
"""

from __future__ import annotations

from collections.abc import Mapping

from rollout.ledger import Ledger
from rollout.runs import live

MIN_ENDED = 8
"""Ended episodes needed before the fraction is judged."""


def too_many_failures(
    counts: Mapping[str, int],
    *,
    fraction: float = live.DEFAULT_MAX_FAILURE_FRACTION,
    min_ended: int = MIN_ENDED,
) -> bool:
    """Whether the failed share of ended episodes (`episode_counts`) passes `fraction`."""
    ended = int(counts.get("ended", 0))
    return ended >= min_ended and int(counts.get("failed", 0)) > fraction * ended


async def first_error(ledger: Ledger, run_id: str, since: float = 0.0) -> str | None:
    """The error of the run's earliest failed seat among its latest episodes (ended after
    `since`, seconds since the epoch by the database's clock), or None."""
    episodes = await ledger.list_episodes(run_id, limit=200, with_turns=False)
    ends = [
        end
        for e in episodes
        for end in e.ends
        if end.status == "failed" and end.error and end.created_at > since
    ]
    if not ends:
        return None
    return min(ends, key=lambda end: end.created_at).error


def one_line(text: str, limit: int = 300) -> str:
    """The first line of an error (a traceback follows it), cut to `limit` characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def counted(counts: Mapping[str, int], baseline: live.FailuresBaseline | None) -> dict[str, int]:
    """The ended and failed episodes since the last resume (`baseline`: the counts then).

    Example:
        >>> counted({"ended": 30, "failed": 12}, live.FailuresBaseline(ended=20, failed=10))
        {'ended': 10, 'failed': 2}
    """
    base = {"ended": baseline.ended, "failed": baseline.failed} if baseline else {}
    return {key: max(0, int(counts.get(key, 0)) - base.get(key, 0)) for key in ("ended", "failed")}


async def check_failures(ledger: Ledger, run_id: str) -> str | None:
    """Pause the run and mark it failed when its failures pass the threshold; return why it
    failed (one line), or None.

    A run already marked failed returns its recorded error.
    """
    settings = await ledger.run_settings(run_id)
    if settings.status == "failed":
        return settings.error or "the run failed"
    fraction = settings.max_failure_fraction
    baseline = settings.failures_baseline
    counts = counted(await ledger.episode_counts(run_id), baseline)
    if not too_many_failures(counts, fraction=fraction):
        return None
    error = await first_error(ledger, run_id, baseline.at if baseline else 0.0)
    name = (await ledger.get_run(run_id)).name
    since = " since the last resume" if baseline else ""
    message = (
        f"{counts['failed']} of {counts['ended']} episodes failed{since} "
        f"(max_failure_fraction {fraction:g}); the first error: {one_line(error or 'unknown')}; "
        f"the run is paused: fix the environment, then `uv run rollout runs resume {name}`"
    )
    # Paused first: no seat is handed out from here on, whoever reads the status.
    await ledger.pause_run(run_id)
    await ledger.set_setting(run_id, live.ERROR, message)
    await ledger.set_setting(run_id, live.STATUS, "failed")
    return message
