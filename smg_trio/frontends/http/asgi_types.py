"""I/O types. What the HTTP server and the ASGI app above it share: the ASGI callables' types,
and the direct chunk writer a connection offers its responses (docs/performance.md §2). The
server defines them so that it never imports the app (docs/architecture.md §1.1)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol, TypeAlias

from smg_trio.handoff import Taken

Scope: TypeAlias = dict[str, Any]
Message: TypeAlias = dict[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
Header: TypeAlias = tuple[bytes, bytes]
AsgiApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]

DIRECT_CHUNKS_KEY: Final = "smg_trio.direct_chunks"
"""Where `frontends.http.connection` puts each connection (a `DirectChunksSource`) in the state
hypercorn copies into every request's scope."""


class DirectChunks(Protocol):
    """A way to send a body chunk without ASGI's layers (docs/performance.md §2): an HTTP/1.1
    connection writes it to its socket, an h2 stream frames it as DATA. `write_chunk_now`
    answers as a hand-off's `take_now` (smg_trio/handoff.py): ALL, sent; PART, with the rest
    still to write (`write_rest`; only HTTP/1.1 leaves one); REFUSED, nothing sent (then ASGI
    `send` must). `start_now`: the same for a `200` head with `headers` and the first chunk,
    sent together (docs/performance.md §3). `end_now`: the body's last chunk (`last`, none
    if empty) and its end, in one write where the connection can (HTTP/1.1): True, the
    response is over; False, nothing sent (then ASGI `send` ends it)."""

    def write_chunk_now(self, data: bytes) -> tuple[Taken, bytes]: ...

    def start_now(
        self, headers: Sequence[tuple[bytes, bytes]], first: bytes
    ) -> tuple[Taken, bytes]: ...

    async def write_rest(self, rest: bytes) -> None: ...

    async def end_now(self, last: bytes) -> bool: ...


class DirectChunksSource(Protocol):
    """What `frontends.http.connection` puts under `DIRECT_CHUNKS_KEY`: each connection."""

    def chunks_for(self, send: Send) -> DirectChunks | None: ...


def direct_chunks_of(scope: Mapping[str, Any], send: Send) -> DirectChunks | None:
    """The direct chunk writer of the response that hypercorn's `send` answers, if any."""
    state = scope.get("state")
    source: DirectChunksSource | None = (
        state.get(DIRECT_CHUNKS_KEY) if isinstance(state, dict) else None
    )
    return None if source is None else source.chunks_for(send)
