"""Helpers for the ledger's tests."""

from __future__ import annotations

import time
from typing import Any

from rollout.contracts import Turn
from rollout.ledger import SeatClaim


def turn_for(claim: SeatClaim, index: int = 0, **overrides: Any) -> Turn:
    """A turn of `claim`'s seat attempt, with float64 logprobs that float32 would round."""
    fields: dict[str, Any] = {
        "episode_id": claim.episode_id,
        "agent": claim.agent,
        "attempt": claim.attempt,
        "index": index,
        "prompt_tokens": tuple(range(100 + index, 120 + index)),
        "completion_tokens": (7, 8, 9),
        "logprobs": (-0.1234567890123, -1e-9, -3.0000000001),
        "version": 0,
        "stop_reason": "stop",
        "extends_previous": index > 0,
        "started_at": time.time(),
        "ended_at": time.time() + 0.5,
        "temperature": 0.7,
        "request": {"protocol": "chat", "messages": [{"role": "user", "content": "hi"}]},
    }
    fields.update(overrides)
    return Turn(**fields)
