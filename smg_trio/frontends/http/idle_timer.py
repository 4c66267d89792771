"""I/O. A connection's idle timer as one task whose deadline moves (docs/http.md §1).

hypercorn restarts its idle timer by cancelling a task and starting a new one, under a lock,
each time a connection turns idle, and stops it each time a request begins: on a keep-alive
connection that is a task spawn, a lock and two scheduling rounds per request. `IdleTimer` runs
one task for the connection's whole life instead; `expire_in` and `stop` only move its cancel
scope's deadline (a heap update, no checkpoint), so they are plain calls.

- `run(wait_terminated, on_expiry)` is the task: it waits for the server's shutdown under a
  cancel scope whose deadline the calls move; when the deadline passes, or the server shuts
  down while the connection is idle, it calls `on_expiry` (the connection's close) once, and
  returns. As with hypercorn's timer, a connection serving a request at the shutdown is
  closed when that request has ended (its `expire_in` then expires at once); the drain's own
  deadline bounds how long that may take.
- `end()`: the connection is closing by itself; `run` returns without calling `on_expiry`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from math import inf

import trio


class IdleTimer:
    """One connection's idle (or header) timer (see the module doc)."""

    __slots__ = ("_deadline", "_ended", "_idle", "_scope", "_shutting_down")

    def __init__(self) -> None:
        self._deadline = inf
        self._ended = False
        self._idle = True
        self._shutting_down = False
        self._scope: trio.CancelScope | None = None

    def expire_in(self, seconds: float) -> None:
        """Close the connection `seconds` from now unless moved again (≤ 0: never); at once
        once the server is shutting down."""
        self._idle = True
        if self._shutting_down:
            self._move(-inf)
        else:
            self._move(trio.current_time() + seconds if seconds > 0 else inf)

    def stop(self) -> None:
        """No expiry until the next `expire_in` (a request is being served)."""
        self._idle = False
        self._move(inf)

    def end(self) -> None:
        """The connection is closing on its own: `run` returns without `on_expiry`."""
        self._ended = True
        if self._scope is not None:
            self._scope.cancel()

    async def run(
        self,
        wait_terminated: Callable[[], Awaitable[None]],
        on_expiry: Callable[[], Awaitable[None]],
    ) -> None:
        if self._ended:
            return
        with trio.CancelScope(deadline=self._deadline) as scope:
            self._scope = scope
            await wait_terminated()
            self._shutting_down = True
            if not self._idle:  # a request is being served: it ends first (`expire_in`)
                await trio.sleep_forever()
        self._scope = None
        if not self._ended:
            await on_expiry()

    def _move(self, deadline: float) -> None:
        self._deadline = deadline
        if self._scope is not None:
            self._scope.deadline = deadline
