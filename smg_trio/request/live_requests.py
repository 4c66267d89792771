"""I/O. The gateway's live requests: the graceful drain and the keep-alives of silent streams
(docs/resilience.md §4–§5).

Every request `Gateway.handle` serves is admitted here for its lifetime, in a cancel scope of
its own, with its sink:

- drain (`drain(timeout_s)`, run by serving/serve.py when SIGTERM/SIGINT arrives): from that moment
  a new request is refused with 503 `draining` and `/health` answers 503; requests already
  running may finish for `timeout_s` (a second signal cuts that short); then each one left is cancelled (leaving its backend
  stream aborts its engine requests) and marked drained, so `Gateway.handle` ends its response
  with the `draining` error (`LiveRequest.end_if_cut_short`): SSE an error event then `[DONE]`,
  WebSocket the id's error frame (its one terminal frame). A request past its deadline ends
  the same way with the `request_timeout` error.
- abort by id (`abort(ids)`, vLLM's `POST /inference/v1/abort_requests`): a request named
  (`name(live, id)`, by the gateway once its plan is made: the id its response carries) is
  aborted through its `ClientAbort` (request/client_aborts.py); an id naming no live request is
  no error, as vLLM's.
- keep-alive (`keep_alive_forever(period_s)`, one task per process): every quarter period it
  scans the live streaming requests; a sink that sent nothing for four scans in a row (so
  silent for between 1 and 1.25 periods) gets `keep_alive()` (SSE: a `: keep-alive` comment;
  WebSocket: a keepalive frame). The token path only clears a flag per chunk; the scan costs
  one pass over the live requests per quarter period, and each keep-alive runs as a child of
  this task, so one slow client never delays the others' (a sink still busy with its previous
  keep-alive is skipped).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final, Protocol, cast, runtime_checkable

import trio

from smg_trio.errors import ClientGone, Draining, GatewayError, RequestTimeout
from smg_trio.observability.request_record import DEADLINE, DRAIN, RequestRecord
from smg_trio.request.client_aborts import ClientAbort
from smg_trio.sink import ClientSink

logger = logging.getLogger(__name__)

DRAIN_END_GRACE_S: Final = 3.0
"""After the drain timeout: time for the cancelled requests to abort (≤ 1 s each, in parallel)
and send their error events."""
KEEPALIVE_SCANS_PER_PERIOD: Final = 4
# How long a request that ran out of time may still spend sending its timeout error.
TIMEOUT_ERROR_GRACE_S: Final = 1.0


@runtime_checkable
class KeepAliveSink(Protocol):
    """A sink that can keep a silent stream open: it sets `quiet = False` whenever it sends."""

    quiet: bool

    async def keep_alive(self) -> None: ...


_KEEPS_ALIVE: dict[type, bool] = {}


def _keeps_alive(sink: ClientSink) -> bool:
    """Whether `sink` is a `KeepAliveSink`, asked once per sink class: a runtime protocol
    check walks the protocol's members on every call (a request's largest single check)."""
    kind = type(sink)
    known = _KEEPS_ALIVE.get(kind)
    if known is None:
        known = _KEEPS_ALIVE[kind] = isinstance(sink, KeepAliveSink)
    return known


@dataclass(eq=False)
class LiveRequest:
    sink: ClientSink
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    abort: ClientAbort = field(default_factory=ClientAbort)
    """Its abort by id (`LiveRequests.abort`)."""
    name: str | None = None
    """The id its response carries, once named (`LiveRequests.name`)."""
    streaming: bool = False
    """A stream (keep-alives apply) rather than one JSON body; the gateway sets it once known."""
    drained: bool = False
    """Cancelled by the drain: its response must end with the `Draining` error."""
    quiet_scans: int = 0
    keeping_alive: bool = False
    keep_alive_sink: KeepAliveSink | None = None
    """The sink, if it can keep a stream alive: checked once at admission (a protocol check
    costs microseconds; the scan must not pay it per request per scan)."""

    @property
    def timed_out(self) -> bool:
        """Ended by the deadline the gateway set on `scope` (one scope serves the drain and
        the request deadline: each costs a request a few microseconds)."""
        return self.scope.cancelled_caught and not self.drained

    async def end_if_cut_short(self, record: RequestRecord, request_timeout_s: float) -> None:
        """End the response of a request cut short by the drain or by its deadline with that
        error (once its scope has been left), on its record too."""
        if self.drained:  # docs/resilience.md §4: past the drain timeout
            record.aborted(DRAIN)
            with trio.move_on_after(TIMEOUT_ERROR_GRACE_S, shield=True):
                await self.sink.fail(Draining("the gateway shut down before the request finished"))
        elif self.timed_out:
            error = RequestTimeout(f"the request did not finish within {request_timeout_s:g} s")
            record.failed(error)
            record.aborted(DEADLINE)
            # Past the deadline: telling the client gets a short, shielded grace of its own.
            with trio.move_on_after(TIMEOUT_ERROR_GRACE_S, shield=True):
                await self.sink.fail(error)


class LiveRequests:
    """The gateway's live requests (module doc)."""

    def __init__(self) -> None:
        self.draining = False
        self._live: set[LiveRequest] = set()
        self._named: dict[str, set[LiveRequest]] = {}
        self._emptied = trio.Event()
        self._emptied.set()

    @property
    def requests(self) -> frozenset[LiveRequest]:
        return frozenset(self._live)

    @contextmanager
    def admit(self, sink: ClientSink) -> Iterator[LiveRequest]:
        """Run the block as one live request (in its cancel scope); `Draining` when draining."""
        if self.draining:
            raise Draining()
        live = LiveRequest(sink)
        if _keeps_alive(sink):
            live.keep_alive_sink = cast(KeepAliveSink, sink)
        if not self._live:
            self._emptied = trio.Event()
        self._live.add(live)
        try:
            with live.scope:
                yield live
        finally:
            self._live.discard(live)
            if live.name is not None:
                self._unname(live, live.name)
            if not self._live:
                self._emptied.set()

    def name(self, live: LiveRequest, request_id: str) -> None:
        """`live` is the request whose response carries `request_id` (several may: a client
        may reuse an id; an abort then aborts each)."""
        if live.name is not None:
            self._unname(live, live.name)
        live.name = request_id
        self._named.setdefault(request_id, set()).add(live)

    def _unname(self, live: LiveRequest, request_id: str) -> None:
        named = self._named.get(request_id)
        if named is not None:
            named.discard(live)
            if not named:
                del self._named[request_id]

    def abort(self, request_ids: Iterable[str]) -> int:
        """Abort the live requests named by `request_ids`; how many there were."""
        aborted = 0
        for request_id in request_ids:
            for live in self._named.get(request_id, ()):
                live.abort.request()
                aborted += 1
        if aborted:
            logger.info("aborted %d requests by id", aborted)
        return aborted

    async def drain(
        self, timeout_s: float, *, hurry: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Refuse new requests, let the live ones run for `timeout_s` (or until `hurry`
        returns: a second Ctrl-C), then end the rest."""
        self.draining = True
        # A warning only when a shutdown will wait for someone (or cut them short).
        level = logging.WARNING if self._live else logging.INFO
        logger.log(
            level, "draining: %d requests may finish within %g s", len(self._live), timeout_s
        )
        with trio.move_on_after(timeout_s):
            async with trio.open_nursery() as nursery:
                if hurry is not None:
                    nursery.start_soon(_cancel_when_done, hurry, nursery.cancel_scope)
                await self._emptied.wait()
                nursery.cancel_scope.cancel()
        if self._live:
            logger.warning("drain timeout: ending %d requests", len(self._live))
            for live in self._live:
                live.drained = True
                live.scope.cancel()
            with trio.move_on_after(DRAIN_END_GRACE_S):
                await self._emptied.wait()
        logger.info("drained")

    async def keep_alive_forever(self, period_s: float) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                await trio.sleep(period_s / KEEPALIVE_SCANS_PER_PERIOD)
                for live, sink in self.scan_keep_alives():
                    nursery.start_soon(_keep_alive, live, sink)

    def scan_keep_alives(self) -> list[tuple[LiveRequest, KeepAliveSink]]:
        """One scan: count quiet scans per streaming request; return those now due (marked
        as keeping alive until their keep-alive is sent)."""
        due: list[tuple[LiveRequest, KeepAliveSink]] = []
        for live in self._live:
            sink = live.keep_alive_sink
            if sink is None or not live.streaming:
                continue
            if not sink.quiet:
                sink.quiet, live.quiet_scans = True, 0
                continue
            live.quiet_scans += 1
            if live.quiet_scans >= KEEPALIVE_SCANS_PER_PERIOD and not live.keeping_alive:
                live.quiet_scans = 0
                live.keeping_alive = True
                due.append((live, sink))
        return due


async def _cancel_when_done(hurry: Callable[[], Awaitable[None]], scope: trio.CancelScope) -> None:
    await hurry()
    logger.warning("asked again to stop: ending the drain now")
    scope.cancel()


async def _keep_alive(live: LiveRequest, sink: KeepAliveSink) -> None:
    try:
        await sink.keep_alive()
    except (GatewayError, ClientGone):  # its request sees the same on its next send
        pass
    finally:
        live.keeping_alive = False
