"""I/O. Admission control: at most `max_concurrent` requests at the engines, a bounded queue of
waiting ones, and a 429 with Retry-After for the rest (docs/routing.md §5).

A request is admitted at once while fewer than `max_concurrent` run; otherwise it waits, first
come first served, in a queue of at most `max_queue` requests for at most `queue_timeout_s`;
a full queue or a wait that ran out is `Overloaded` (429, Retry-After). `max_concurrent=None`
admits everything. The slot is held across every retry of the request and freed when it ends,
cancellation included (trio's CapacityLimiter hands it to the next waiter in order).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import trio

from smg_trio.errors import Overloaded

DEFAULT_MAX_QUEUE: Final = 256
DEFAULT_QUEUE_TIMEOUT_S: Final = 10.0


class Admission:
    """The gateway-wide concurrency limit and its wait queue (see the module doc)."""

    def __init__(
        self,
        max_concurrent: int | None = None,
        *,
        max_queue: int = DEFAULT_MAX_QUEUE,
        queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S,
    ) -> None:
        if max_concurrent is not None and max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        self._limiter = None if max_concurrent is None else trio.CapacityLimiter(max_concurrent)
        self._max_queue = max_queue
        self._queue_timeout_s = queue_timeout_s
        self._retry_after_s = max(1, math.ceil(queue_timeout_s))
        self.rejected = 0
        """Requests turned away with 429 since start."""

    @property
    def running(self) -> int:
        return 0 if self._limiter is None else self._limiter.borrowed_tokens

    @property
    def waiting(self) -> int:
        return 0 if self._limiter is None else self._limiter.statistics().tasks_waiting

    @asynccontextmanager
    async def admitted(self) -> AsyncIterator[None]:
        """Hold one slot for the block; Overloaded if none came in time."""
        limiter = self._limiter
        if limiter is None:
            yield
            return
        borrower = object()  # one request, whichever task serves it
        try:
            limiter.acquire_on_behalf_of_nowait(borrower)
        except trio.WouldBlock:
            if self.waiting >= self._max_queue:
                raise self._reject("the wait queue is full") from None
            acquired = False
            with trio.move_on_after(self._queue_timeout_s):
                await limiter.acquire_on_behalf_of(borrower)
                acquired = True
            if not acquired:
                raise self._reject(f"no slot freed within {self._queue_timeout_s:g} s") from None
        try:
            yield
        finally:
            limiter.release_on_behalf_of(borrower)

    def _reject(self, why: str) -> Overloaded:
        self.rejected += 1
        return Overloaded(
            f"the gateway is at its concurrent request limit and {why}; retry later",
            retry_after_s=self._retry_after_s,
        )
