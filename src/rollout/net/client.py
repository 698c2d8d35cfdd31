"""A small JSON-over-HTTP client for the roles' hot paths (runner -> gateway -> inference).

It wraps an aiohttp session, created lazily inside the running event loop (and again if the
loop changed, as in tests that run several loops). aiohttp is used rather than httpx here
because httpx's connection pool spends time quadratic in the number of concurrent requests
(hundreds of seats in flight), which made the HTTP client the largest CPU cost of a turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import aiohttp

from rollout.errors import RolloutError


class TransportError(RolloutError, ConnectionError):
    """The request never got an HTTP answer (connection refused or reset, timeout)."""


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class JsonHttpClient:
    """POST/GET with pooled keep-alive connections; transport failures raise TransportError."""

    def __init__(
        self, *, timeout: float = 600.0, connect_timeout: float = 5.0, max_connections: int = 512
    ) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                connector=aiohttp.TCPConnector(limit=self._max_connections),
            )
            self._loop = loop
        return self._session

    async def request(
        self,
        method: str,
        url: str,
        *,
        data: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpResponse:
        try:
            async with self._client().request(
                method, url, data=data, headers=dict(headers or {})
            ) as response:
                return HttpResponse(response.status, await response.read())
        except (TimeoutError, aiohttp.ClientConnectionError) as error:
            raise TransportError(f"{method} {url}: {error!r}") from error

    async def lines(
        self,
        url: str,
        *,
        data: bytes | str,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[HttpResponse]:
        """POST and yield the answer's non-empty lines as they arrive, each as an
        `HttpResponse` with the answer's status; an answer other than 200 is yielded once,
        whole. Transport failures raise TransportError."""
        try:
            async with self._client().post(url, data=data, headers=dict(headers or {})) as response:
                if response.status != 200:
                    yield HttpResponse(response.status, await response.read())
                    return
                async for line in response.content:
                    if line.strip():
                        yield HttpResponse(200, line.rstrip(b"\r\n"))
        except (TimeoutError, aiohttp.ClientConnectionError) as error:
            raise TransportError(f"POST {url}: {error!r}") from error

    async def close(self) -> None:
        session = self._session
        if session is not None and not session.closed and self._loop is asyncio.get_running_loop():
            await session.close()
        self._session = None
