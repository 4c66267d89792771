"""I/O. How a generation request hears, at once and without a task of its own, that its client
left (docs/architecture.md §3.1).

hypercorn tells an ASGI app that its client left only by queueing `http.disconnect` on the
app's `receive` channel (it advertises ASGI 2.1: sends to a gone client do not raise). Reading
that channel took a watcher task and a nursery per request. Instead our task group hands every
app a `ClientDisconnect` in its scope and wraps the function hypercorn queues messages with
(`app_put`): the moment hypercorn queues a disconnect, the request's callback runs, in the
task that learned it, which may be in the middle of telling every stream of a closed
connection (`frontends.sse.respond` therefore only marks the response gone there and cancels
the request's scope from trio's next scheduling round, as the watcher task did).

A disconnect that comes before the request registers its callback is kept, and the callback
runs when it registers. A stream reset in the same packet as its request (rapid reset) must be
seen before the request costs an engine ADD, but hypercorn hands a packet's frames to the apps
one at a time, yielding between them, so the request's task may run before the reset is
handled. `settled()` waits, only while that is so, until the connection's reader has handed
hypercorn every byte it read (`ReadProgress`): then a reset in the request's packet has fired.
Only for h2 streams: an HTTP/1.1 request has no stream to reset, and with pipelined requests
hypercorn's reader stays inside the packet until the first one is answered.
The wrapped `app_put` queues without yielding while the app's channel has room (where trio's
`send` takes a scheduling round per message: three per request, the body, its end and the
disconnect after the answer), so the reader usually handles a whole packet before the apps it
fed run, and `settled()` seldom waits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, cast

import trio
from hypercorn.config import Config
from hypercorn.trio.task_group import TaskGroup
from hypercorn.typing import AppWrapper, ASGIReceiveEvent, ASGISendEvent, Scope

from smg_trio.frontends.http.hypercorn_seam import memory_channel_of

CLIENT_DISCONNECT_KEY: Final = "smg_trio.client_disconnect"
"""Where `DisconnectTaskGroup` puts each request's `ClientDisconnect` in its ASGI scope."""


class ReadProgress:
    """Whether a connection's reader is handing hypercorn the bytes it read last."""

    __slots__ = ("_lot", "handling")

    def __init__(self) -> None:
        self.handling = False
        self._lot = trio.lowlevel.ParkingLot()

    def start(self) -> None:
        self.handling = True

    def finish(self) -> None:
        self.handling = False
        if self._lot:
            self._lot.unpark_all()

    async def settled(self) -> None:
        """Return once the bytes being handled went through hypercorn (at once, with no
        checkpoint, when none are being handled)."""
        if self.handling:
            await self._lot.park()


class ClientDisconnect:
    """One request's news that its client left: `fire` once, `on_fire` to be told."""

    __slots__ = ("_callback", "_read", "fired")

    def __init__(self, read: ReadProgress | None = None) -> None:
        self.fired = False
        self._callback: Callable[[], None] | None = None
        self._read = read

    async def settled(self) -> None:
        """Return once the connection's reader handled every byte read so far (module doc)."""
        if self._read is not None:
            await self._read.settled()

    def fire(self) -> None:
        """The client left (idempotent): run the registered callback, if any."""
        if self.fired:
            return
        self.fired = True
        if self._callback is not None:
            self._callback()

    def on_fire(self, callback: Callable[[], None] | None) -> None:
        """Register `callback` (None: unregister); it runs now if the client left already."""
        self._callback = callback
        if callback is not None and self.fired:
            callback()


def client_disconnect_of(scope: Mapping[str, Any]) -> ClientDisconnect:
    """The request's `ClientDisconnect`; the app is served only by `frontends.http.server`,
    whose task group puts one in every scope."""
    disconnect = scope.get(CLIENT_DISCONNECT_KEY)
    if not isinstance(disconnect, ClientDisconnect):
        raise RuntimeError("the gateway's app runs only under smg_trio's HTTP server")
    return disconnect


class DisconnectTaskGroup(TaskGroup):
    """hypercorn's trio task group, with a `ClientDisconnect` per app (module doc); `read` is
    its connection's reader's progress."""

    def __init__(self, read: ReadProgress | None = None) -> None:
        super().__init__()
        self._read = read

    async def spawn_app(
        self,
        app: AppWrapper,
        config: Config,
        scope: Scope,
        send: Callable[[ASGISendEvent | None], Awaitable[None]],
    ) -> Callable[[ASGIReceiveEvent], Awaitable[None]]:
        # Only an h2 stream can be reset in its own request's packet. An HTTP/1.1 connection
        # has one request at a time, and hypercorn's reader waits inside that packet for the
        # response when the client pipelined the next request behind it: waiting for the
        # reader there would wait for ever.
        read = self._read if scope.get("http_version") == "2" else None
        disconnect = ClientDisconnect(read)
        cast(dict[str, Any], scope)[CLIENT_DISCONNECT_KEY] = disconnect
        put = await super().spawn_app(app, config, scope, send)
        channel = memory_channel_of(put)  # hypercorn queues on a trio memory channel
        put_nowait = channel.send_nowait if isinstance(channel, trio.MemorySendChannel) else None

        async def app_put(message: ASGIReceiveEvent) -> None:
            if message["type"] == "http.disconnect":  # WebSockets watch their own socket
                disconnect.fire()
            # Queued without a scheduling round while the app keeps up: the reader hands
            # hypercorn a whole packet before the apps it fed run (module doc).
            if put_nowait is not None:
                try:
                    put_nowait(message)
                except trio.WouldBlock:
                    pass
                else:
                    return
            await put(message)

        return app_put
