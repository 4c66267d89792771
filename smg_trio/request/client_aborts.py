"""I/O. A running request aborted by its id (vLLM's `POST /inference/v1/abort_requests`,
docs/vllm-frontend.md §9).

A request's `ClientAbort` lives on its `LiveRequest` (request/live_requests.py, which finds it
by the id its response carries); the per-request nursery (request/nursery.py) runs its engine
stream inside `scope()`. `request()` cancels that scope: leaving the backend stream aborts the
engine requests (as a router-side stop does), and the choices not yet finished end with the
finish reason `abort`, as vLLM's do, the tokens received so far kept. An abort that arrives
before the stream opened cancels the scope as soon as it is entered: no ADD goes out.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio


class ClientAbort:
    """One request's abort (module doc)."""

    __slots__ = ("_scope", "requested")

    def __init__(self) -> None:
        self.requested = False
        self._scope: trio.CancelScope | None = None

    @contextmanager
    def scope(self) -> Iterator[trio.CancelScope]:
        """Run the block in a scope an abort cancels (at once, if it was already asked)."""
        scope = trio.CancelScope()
        if self.requested:
            scope.cancel()
        self._scope = scope
        try:
            with scope:
                yield scope
        finally:
            self._scope = None

    def request(self) -> None:
        """Abort the request: its current scope now, any later one as it is entered."""
        self.requested = True
        if self._scope is not None:
            self._scope.cancel()
