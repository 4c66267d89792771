"""I/O. The HTTP side of responses that outlive their connection (docs/client-apis.md §3.5):

    POST /v1/responses  background: true       → the queued response object at once (or,
                                                  with stream: true, its event log from 0)
    POST /v1/responses  stream + store          → a resumable stream: the event log from 0
    GET  /v1/responses/{id}                     → the run's current object, else the stored one
    GET  /v1/responses/{id}?stream=true&starting_after=N
                                                → the events after N, then the live ones
    DELETE /v1/responses/{id}                   → a 400 while it still generates
    POST /v1/responses/{id}/cancel              → cancel a background response (any process's)

A stream here only follows the log (`ResponseRuns.follow`): a client leaving ends its stream,
never the run. Each stream is admitted into the gateway's lifecycle like a request (keep-alives
while the log is quiet; refused, then ended `draining`, by a drain).
"""

from __future__ import annotations

from typing import Final

import msgspec
import trio

from smg_trio.core.api_dialect import NamedEventDialect, named_event
from smg_trio.core.run_events import ENDED_STATUSES, parse_retrieve_query
from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import ClientError, Draining
from smg_trio.frontends.answers import send_json
from smg_trio.frontends.http.asgi_types import Scope, Send
from smg_trio.frontends.http.client_disconnect import client_disconnect_of
from smg_trio.frontends.response_started import ResponseStarted
from smg_trio.frontends.sse import SseResponse, respond
from smg_trio.handoff import Taken
from smg_trio.request.arrival import Arrival
from smg_trio.request.gateway import Gateway
from smg_trio.request.routes import path_id
from smg_trio.request.run_start import admit_response
from smg_trio.responses.run import Tail
from smg_trio.responses.runs import SynchronousResponse
from smg_trio.responses.store.event_log import LoggedEvent
from smg_trio.responses.store.service import ResponseNotFound

_EVENTS: Final = NamedEventDialect()
"""The log's events are framed and numbered already: sent as they are."""
_END: Final = StreamEnd()  # a Responses stream has no end marker: its last event ends it


async def serve_cancel(gateway: Gateway, path: str, send: Send) -> None:
    run_id = path_id(path)
    response = await gateway.runs.cancel(run_id)
    if response is None:
        if gateway.responses.store is not None and await gateway.responses.store.get(run_id):
            raise SynchronousResponse()
        raise ResponseNotFound(run_id)
    await send_json(send, 200, response)


async def refuse_deleting_a_running_response(gateway: Gateway, path: str) -> None:
    """`DELETE` of a response still generating is a 400: its run would write it again."""
    run_id = path_id(path)
    current = await gateway.runs.retrieve(run_id)
    if current is not None and msgspec.json.decode(current)["status"] not in ENDED_STATUSES:
        raise ClientError(
            f"response '{run_id}' is still generating: cancel it first "
            f"(POST /v1/responses/{run_id}/cancel) or let it end",
            param="response_id",
        )


async def serve_retrieve(gateway: Gateway, scope: Scope, path: str, send: ResponseStarted) -> None:
    """`GET /v1/responses/{id}` with its query (module doc)."""
    run_id = path_id(path)
    query = parse_retrieve_query(scope.get("query_string", b""))
    if not query.stream:
        current = await gateway.runs.retrieve(run_id)
        if current is None:
            current = await gateway.responses.retrieve(run_id)
        await send_json(send, 200, current)
        return
    tail = await gateway.runs.open_tail(run_id, query.starting_after)
    if tail is None:
        await gateway.responses.retrieve(run_id)  # a 404 when nothing has the id
        raise ClientError(  # kept, but its events were not (a body, or `store` came later)
            f"response '{run_id}' was not created as a background response or a stored "
            "stream: its events are not kept",
            param="stream",
        )
    await stream_tail(gateway, scope, send, tail, resumed=True)


async def stream_tail(
    gateway: Gateway, scope: Scope, send: ResponseStarted, tail: Tail, *, resumed: bool
) -> None:
    """The run's events after `tail.after` as an SSE stream, until its last event."""
    source = "memory" if gateway.runs.local(tail.run_id) is not None else "log"
    gateway.metrics.response_streams.labels("resumed" if resumed else "first", source).inc()

    async def follow(response: SseResponse) -> None:
        async def send(events: list[LoggedEvent]) -> None:
            await response.send_chunks([named_event(event.name, event.data) for event in events])

        def send_now(events: list[LoggedEvent]) -> Taken:
            return response.send_chunks_now([named_event(e.name, e.data) for e in events])

        with gateway.live_requests.admit(response) as live:
            live.streaming = True
            await gateway.runs.follow(tail, send, send_now)
        if live.drained or live.timed_out:
            await response.fail(Draining("the gateway shut down; resume the stream elsewhere"))
            return
        await response.end_stream(_END)

    await respond(follow, client_disconnect_of(scope), send, _EVENTS, *send.direct_sending(scope))


async def serve_run(
    gateway: Gateway,
    scope: Scope,
    send: ResponseStarted,
    body: bytes,
    arrival: Arrival,
    *,
    background: bool,
    stream: bool,
) -> None:
    """`POST /v1/responses` that runs apart from its connection (module doc); the arrival's
    tenant (its API key's, `--api-keys`) is charged at the create: over its budget, the create
    is the 429."""
    # A resumable stream's create may wait for its tenant's slot: a client that leaves then
    # leaves the queue at once, as a foreground request's does (docs/fleet.md §2). A
    # background create never waits, and is started even if its client hung up at once.
    disconnect = None if background else client_disconnect_of(scope)
    with trio.CancelScope() as admitting:
        if disconnect is not None:
            disconnect.on_fire(admitting.cancel)
        try:
            admitted = await admit_response(gateway, body, background=background, arrival=arrival)
        finally:
            if disconnect is not None:
                disconnect.on_fire(None)
    if admitting.cancelled_caught:
        return  # nobody to answer
    # A resumable stream's grace starts when this one ends.
    run = await admitted.start(creator_follows=stream)
    if not stream:
        await send_json(send, 200, run.response)
        return
    try:
        if not background:
            await gateway.runs.first_event(run)  # an early failure is this request's status
        await stream_tail(gateway, scope, send, Tail(run.id, -1), resumed=False)
    finally:
        gateway.runs.unsubscribe(run)
