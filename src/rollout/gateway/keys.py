"""Seat keys: read them from request headers and resolve them through the ledger.

Every agent seat of every episode attempt has its own key (issued by the ledger with the seat
claim). Clients send it as `Authorization: Bearer KEY` (OpenAI SDK, Codex, Claude Code with
`ANTHROPIC_AUTH_TOKEN`) or `x-api-key: KEY` (Anthropic SDK, Claude Code with `ANTHROPIC_API_KEY`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from rollout.gateway.errors import GatewayError
from rollout.ledger import KeyInfo, LedgerError, StaleFence


def keys_from_headers(headers: Mapping[str, str]) -> list[str]:
    """The keys a request carries, in the order to try them (Bearer first, then x-api-key)."""
    keys: list[str] = []
    auth = headers.get("authorization")
    if auth:
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            keys.append(token.strip())
    api_key = headers.get("x-api-key")
    if api_key and api_key.strip() and api_key.strip() not in keys:
        keys.append(api_key.strip())
    return keys


class _Resolver(Protocol):
    """The part of the ledger the resolver needs."""

    async def resolve_key(self, api_key: str) -> KeyInfo | None: ...


class KeyResolver:
    """Resolves keys to seats, caching hits for `ttl` seconds (never caching misses).

    A cached key of a seat that was taken over or ended meanwhile still fails where it matters:
    the ledger fences the turn's write by attempt, so nothing is recorded for it. The key of an
    ended seat or an expired claim stops resolving (401) once its cache entry is `ttl` old.
    """

    def __init__(self, ledger: _Resolver, *, ttl: float = 2.0, max_entries: int = 10_000) -> None:
        self._ledger = ledger
        self._ttl = ttl
        self._max = max_entries
        self._cache: OrderedDict[str, tuple[float, KeyInfo]] = OrderedDict()

    async def resolve(self, keys: list[str]) -> KeyInfo:
        """The seat of the first known key; 401 when none is known, 409 when fenced out."""
        if not keys:
            raise GatewayError(
                "missing API key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
                kind="authentication",
                code="invalid_api_key",
            )
        now = time.monotonic()
        for key in keys:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        for key in keys:
            try:
                info = await self._ledger.resolve_key(key)
            except StaleFence as exc:
                raise GatewayError(
                    f"this key's episode attempt was taken over: {exc}",
                    kind="conflict",
                    code="attempt_fenced",
                ) from exc
            except LedgerError:
                info = None
            if info is not None:
                if self._ttl > 0:  # cached without its lag view: that is only fresh now
                    self._cache[key] = (now + self._ttl, replace(info, lag=None))
                    self._cache.move_to_end(key)
                    while len(self._cache) > self._max:
                        self._cache.popitem(last=False)
                return info
        shown = keys[0][:6] + "..." if len(keys[0]) > 8 else "***"
        raise GatewayError(
            f"invalid API key {shown!r}: unknown, or its seat has ended or its claim expired "
            "(each episode seat has its own key)",
            kind="authentication",
            code="invalid_api_key",
        )

    def forget(self, keys: list[str]) -> None:
        """Drop cached entries (after a fenced write)."""
        for key in keys:
            self._cache.pop(key, None)
