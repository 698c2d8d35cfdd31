"""Concurrency helpers shared by the sync/async adapters, rollouts and graders.

- `run_sync(awaitable)`: run a coroutine to completion from synchronous code, whatever thread
  it is called from (plain code, a worker thread of a running loop, or the loop's own thread).
- `InstanceLock`: the lock that serializes calls on one `AsyncEnv`, usable from any event loop
  and any thread, reentrant within one task.
- `is_async_callable(fn)`: whether calling `fn` returns an awaitable.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextvars
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["InstanceLock", "is_async_callable", "run_sync", "thread_executor"]


class _BackgroundLoop:
    """One event loop on a daemon thread, shared by every sync adapter of the process.

    Running async code on a dedicated loop (rather than `asyncio.run` per call) keeps
    loop-bound resources of an async environment (sessions, subprocesses) valid across calls,
    and works when the caller's thread already runs a loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _ensure(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is not None and self._thread is not None and self._thread.is_alive():
            return loop
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=main, name="rolloutlib-sync-bridge", daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            assert self._loop is not None
            return self._loop

    def in_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._ensure()
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def shutdown(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)


_BRIDGES: list[_BackgroundLoop] = []
_BRIDGES_LOCK = threading.Lock()


def _bridge_for_current_thread() -> _BackgroundLoop:
    # Code already running on bridge k must not block that loop on itself: nested sync calls
    # go to bridge k + 1 (each level keeps one consistent loop).
    level = 0
    for index, bridge in enumerate(_BRIDGES):
        if bridge.in_loop_thread():
            level = index + 1
            break
    with _BRIDGES_LOCK:
        while len(_BRIDGES) <= level:
            _BRIDGES.append(_BackgroundLoop())
        return _BRIDGES[level]


def _shutdown_bridges() -> None:
    for bridge in reversed(_BRIDGES):
        bridge.shutdown()


atexit.register(_shutdown_bridges)


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def run_sync(awaitable: Awaitable[T]) -> T:
    """Run `awaitable` to completion and return its result, from any synchronous context.

    The awaitable runs on rolloutlib's background event loop, so this works from plain code,
    from a worker thread while another thread runs an event loop, and (blocking that loop) from
    inside a coroutine.
    """
    coro = awaitable if inspect.iscoroutine(awaitable) else _await(awaitable)
    return _bridge_for_current_thread().run(coro)


def is_async_callable(fn: Any) -> bool:
    """Whether `fn` is an `async def` function (or a partial of one, or has an async __call__)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - we want the bound __call__ itself
    return call is not None and inspect.iscoroutinefunction(call)


_EXECUTOR: concurrent.futures.ThreadPoolExecutor | None = None
_EXECUTOR_LOCK = threading.Lock()


def thread_executor() -> concurrent.futures.ThreadPoolExecutor:
    """The thread pool that runs synchronous environments and graders for async callers.

    It is larger than asyncio's default pool (which is sized by CPU count) because the work it
    runs usually waits on I/O: 64 blocking environments should step at the same time.
    """
    global _EXECUTOR
    if _EXECUTOR is None:
        with _EXECUTOR_LOCK:
            if _EXECUTOR is None:
                _EXECUTOR = concurrent.futures.ThreadPoolExecutor(
                    max_workers=256, thread_name_prefix="rolloutlib-worker"
                )
    return _EXECUTOR


async def run_in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`asyncio.to_thread` on rolloutlib's worker pool (context variables are kept)."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    return await loop.run_in_executor(thread_executor(), call)


_HELD: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "rolloutlib_held_locks", default=frozenset()
)


class InstanceLock:
    """A mutual-exclusion lock for coroutines on any event loop and any thread.

    `asyncio.Lock` binds to one loop; an environment may be driven from the caller's loop and
    from the sync bridge's loop, so this lock hands ownership between loops with
    `call_soon_threadsafe`. It is reentrant within one task (tracked by a context variable), so
    `await super().step(...)` inside a serialized `step` does not deadlock.
    """

    __slots__ = ("__weakref__", "_locked", "_mutex", "_waiters")

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locked = False
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = (
            collections.deque()
        )

    def held_here(self) -> bool:
        """Whether the current task (context) already holds this lock."""
        return id(self) in _HELD.get()

    async def acquire(self) -> contextvars.Token[frozenset[int]]:
        with self._mutex:
            if not self._locked:
                self._locked = True
                return _HELD.set(_HELD.get() | {id(self)})
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()
            entry = (loop, waiter)
            self._waiters.append(entry)
        try:
            await waiter
        except BaseException:
            with self._mutex:
                if entry in self._waiters:
                    self._waiters.remove(entry)
                    raise
            if waiter.done() and not waiter.cancelled():
                # Ownership arrived together with the cancellation: pass it on.
                self.release()
            # Otherwise the hand-over is in flight and `_hand_over` sees the cancelled waiter.
            raise
        return _HELD.set(_HELD.get() | {id(self)})

    def release(self, token: contextvars.Token[frozenset[int]] | None = None) -> None:
        if token is not None:
            try:
                _HELD.reset(token)
            except ValueError:  # token from another context: drop our id explicitly
                _HELD.set(_HELD.get() - {id(self)})
        with self._mutex:
            while self._waiters:
                loop, waiter = self._waiters.popleft()
                if loop.is_closed() or waiter.done():
                    continue
                loop.call_soon_threadsafe(self._hand_over, waiter)
                return  # still locked: ownership moves to the waiter
            self._locked = False

    def _hand_over(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done():  # cancelled after being chosen
            self.release()
        else:
            waiter.set_result(None)

    @property
    def locked(self) -> bool:
        return self._locked
