"""The failure threshold: a run whose episodes mostly fail stops itself as `failed`.

A broken environment (a Task whose `start()` raises) makes every seat end `failed`; training on
rewards of 0 would only hide it. Once at least `MIN_ENDED` episodes have ended and more than the
run setting `max_failure_fraction` of them failed (default `MAX_FAILURE_FRACTION`; 1.0 turns the
check off), the supervisor marks the run `status: failed` with the first error (settings
`error`), retires its roles, and `rollout train` exits non-zero showing that error.

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

MAX_FAILURE_FRACTION = 0.5
"""The default of the run setting `max_failure_fraction`."""
MIN_ENDED = 8
"""Ended episodes needed before the fraction is judged."""
STOPPED_STATUSES = ("stopped", "failed")
"""Run `status` settings that plain `rollout up` does not resume."""


def too_many_failures(
    counts: Mapping[str, int], *, fraction: float = MAX_FAILURE_FRACTION, min_ended: int = MIN_ENDED
) -> bool:
    """Whether the failed share of ended episodes (`episode_counts`) passes `fraction`."""
    ended = int(counts.get("ended", 0))
    return ended >= min_ended and int(counts.get("failed", 0)) > fraction * ended


async def first_error(ledger: Ledger, run_id: str) -> str | None:
    """The error of the run's earliest failed seat among its latest episodes, or None."""
    episodes = await ledger.list_episodes(run_id, limit=200, with_turns=False)
    ends = [end for e in episodes for end in e.ends if end.status == "failed" and end.error]
    if not ends:
        return None
    return min(ends, key=lambda end: end.created_at).error


def one_line(text: str, limit: int = 300) -> str:
    """The first line of an error (a traceback follows it), cut to `limit` characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


async def check_failures(ledger: Ledger, run_id: str) -> str | None:
    """Mark the run failed when its failures pass the threshold; return why it failed, or None.

    A run already marked failed returns its recorded error.
    """
    settings = await ledger.settings(run_id)
    if settings.get("status") == "failed":
        return str(settings.get("error") or "the run failed")
    fraction = float(settings.get("max_failure_fraction", MAX_FAILURE_FRACTION))
    counts = await ledger.episode_counts(run_id)
    if not too_many_failures(counts, fraction=fraction):
        return None
    error = await first_error(ledger, run_id)
    message = (
        f"{counts['failed']} of {counts['ended']} episodes failed "
        f"(max_failure_fraction {fraction:g}); the first error: {one_line(error or 'unknown')}"
    )
    await ledger.set_setting(run_id, "error", message)
    await ledger.set_setting(run_id, "status", "failed")
    return message
