"""What the gateway keeps in memory per seat (episode, agent, attempt).

A `Seat` holds a lock that orders the seat's recordings, the last recorded turn (kept up to date
by each recording; read from the ledger only when a recording finds its index taken) and the few
most recent turns by fingerprint, with their prompt's text when it is known, so the common case
(a client sending back the reply it just got) builds its prompt with no ledger read and no
second rendering. `SeatCache` keeps the most recently used seats; the ledger stays the truth, so
a dropped seat is simply read again.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field

from rollout.contracts import Turn
from rollout.ledger import KeyInfo

SeatId = tuple[str, int, int]


def seat_id(info: KeyInfo) -> SeatId:
    """(episode, agent, attempt): the seat a key belongs to."""
    return (info.episode_id, info.agent, info.attempt)


@dataclass
class Seat:
    """One seat's recording lock, last turn and recent turns."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last: Turn | None = None
    loaded: bool = True
    """Whether `last` is taken as current (False: read it from the ledger before the next
    recording). A seat new to this gateway is taken to have no turns, which is true of every
    seat's first request, so that request reads nothing first; when it is not true (this
    gateway restarted mid-episode, another gateway has the seat, the seat was dropped from the
    cache), recording under index 0 finds the index taken and the seat is read then."""
    recent: OrderedDict[str, tuple[Turn, str | None]] = field(default_factory=OrderedDict)
    """Recently recorded turns by fingerprint, with their prompt's text when known."""

    def remember(self, fingerprint: str, turn: Turn, prompt_text: str | None, keep: int) -> None:
        """Record `turn` as the seat's last, and among its `keep` most recent."""
        self.last = turn
        self.recent[fingerprint] = (turn, prompt_text)
        while len(self.recent) > keep:
            self.recent.popitem(last=False)

    def prompt_text(self, turn: Turn) -> str | None:
        """The prompt text of `turn` if it is a recent turn of this seat and its text is known."""
        cached = self.recent.get(turn.request.get("fingerprint", ""))
        return cached[1] if cached is not None and cached[0] is turn else None


class SeatCache:
    """The `max_seats` most recently used seats (a seat busy recording is never dropped)."""

    def __init__(self, max_seats: int = 1024) -> None:
        self._seats: OrderedDict[SeatId, Seat] = OrderedDict()
        self._max = max_seats

    def get(self, info: KeyInfo) -> Seat:
        """The seat of `info`, created when new."""
        sid = seat_id(info)
        seat = self._seats.get(sid)
        if seat is None:
            seat = self._seats[sid] = Seat()
            while len(self._seats) > self._max:
                old_id, old = next(iter(self._seats.items()))
                if old.lock.locked():
                    break
                del self._seats[old_id]
        self._seats.move_to_end(sid)
        return seat

    def drop(self, info: KeyInfo) -> None:
        """Forget the seat of `info` (it was taken over: nothing it holds is current)."""
        self._seats.pop(seat_id(info), None)
