"""I/O. A small, bounded pool of blocking database connections used from worker threads
(docs/client-apis.md §3.3).

Every store call runs in `trio.to_thread.run_sync` under the pool's `CapacityLimiter`, with one
connection of its own: at most `size` threads and `size` connections, created on first use (a
gateway that never stores opens nothing) and reused. A connection whose call raised a database
error is closed rather than reused (it may be mid-transaction). Thread calls are never
abandoned on cancellation, so a write is never half-done when the caller is cancelled; each call
is one short statement.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Generic, Protocol, TypeVar

import trio

from smg_trio.errors import GatewayError


class Closable(Protocol):
    def close(self) -> None: ...


_C = TypeVar("_C", bound=Closable)
_T = TypeVar("_T")


class StoreUnavailable(GatewayError):
    """The response store failed (a 503: the request may be retried)."""

    status = 503
    code = "response_store_unavailable"


class ConnectionPool(Generic[_C]):
    """At most `size` connections made by `connect`, each used by one thread at a time."""

    def __init__(
        self, connect: Callable[[], _C], errors: tuple[type[Exception], ...], size: int = 4
    ) -> None:
        self._connect = connect
        self._errors = errors
        self._limiter = trio.CapacityLimiter(size)
        self._free: list[_C] = []
        self._closed = False
        self.used = False  # a call was made (so the database exists)

    async def run(self, work: Callable[[_C], _T]) -> _T:
        """`work(connection)` in a worker thread; a database error is `StoreUnavailable`."""
        self.used = True
        async with self._limiter:
            if self._closed:
                raise StoreUnavailable("the response store is closed")
            idle = self._free.pop() if self._free else None
            try:
                connection, result = await trio.to_thread.run_sync(partial(self._call, idle, work))
            except self._errors as exc:
                raise StoreUnavailable(f"the response store failed: {exc}") from None
            self._free.append(connection)
            return result

    def _call(self, connection: _C | None, work: Callable[[_C], _T]) -> tuple[_C, _T]:
        if connection is None:
            connection = self._connect()
        try:
            return connection, work(connection)
        except BaseException:
            connection.close()
            raise

    async def aclose(self) -> None:
        """Close every idle connection (shielded and bounded: one close per connection)."""
        self._closed = True
        free, self._free = self._free, []
        with trio.CancelScope(shield=True):
            for connection in free:
                await trio.to_thread.run_sync(connection.close)
