"""I/O. The `send` every HTTP request's handlers use: it remembers whether a response began (then
no error status can follow), and puts the request's `x-request-id` on that response, whoever
starts it, through ASGI or past it (`frontends/sse.py` `StartNow`, docs/performance.md §3)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from smg_trio.frontends.http.asgi_types import DirectChunks, Message, Scope, Send, direct_chunks_of
from smg_trio.frontends.sse import StartNow
from smg_trio.handoff import Taken
from smg_trio.observability.request_ids import REQUEST_ID_HEADER


class ResponseStarted:
    """Wraps the server's ASGI `send` (see the module doc)."""

    def __init__(self, send: Send, request_id: str) -> None:
        self._send = send  # the server's own `send` (asgi_types.direct_chunks_of knows it)
        self._id_header = (REQUEST_ID_HEADER, request_id.encode("ascii"))
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            message = {**message, "headers": [*message.get("headers", ()), self._id_header]}
        await self._send(message)

    def direct_sending(self, scope: Scope) -> tuple[DirectChunks, StartNow] | tuple[None, None]:
        """The response's way past ASGI (`frontends.sse.direct_chunks_of`), if its connection
        has one, and its `start_now` with this request's fields."""
        direct = direct_chunks_of(scope, self._send)
        if direct is None:
            return None, None
        return direct, partial(self._start_now, direct)

    def _start_now(
        self, direct: DirectChunks, headers: Sequence[tuple[bytes, bytes]], first: bytes
    ) -> tuple[Taken, bytes]:
        taken, rest = direct.start_now([*headers, self._id_header], first)
        if taken is not Taken.REFUSED:
            self.started = True
        return taken, rest
