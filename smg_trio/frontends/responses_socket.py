"""I/O. OpenAI's Responses WebSocket mode: `GET /v1/responses` upgraded to a WebSocket, the
socket the openai SDK's `client.responses.connect()` opens (docs/client-apis.md §3.4).

    receive loop ──create──▶ per-create tasks (one nursery; FIFO per lane, lanes side by side)
         │                        │ sinks
         └── protocol errors ──▶ frames channel (bounded) ──▶ sender task ──▶ ASGI send

- Each `response.create` is one request through `Gateway.handle` (`POST /v1/responses`'s own
  entry: admission, drain, deadline, metrics with transport `ws`, its log line), with a
  `ClientSink` that frames the SSE stream's events one per WebSocket message.
- Lanes: a create's `stream_id` names its lane (none: the default lane). A lane runs its creates
  one after another in arrival order (a fair `trio.Lock`); lanes run side by side, as the openai
  SDK's `stream_id` multiplexing describes. At most `MAX_RESPONSES_PER_SOCKET` creates are
  running or queued on one socket; one more is refused under its lane (429).
- Every create that reached a lane ends in exactly one terminal event on it:
  `response.completed`, `response.incomplete` (a cancelled response: `status: "cancelled"`),
  `response.failed` (after its `error` event), or, for a create that never began, an `error`
  without `sequence_number`. Frames that open no response get an error with `"stream_id": null`.
- `previous_response_id` looks in the socket's own cache of its recent responses first
  (`responses_socket_cache`), so a chain on the socket works with `store: false` too.
- `response.cancel` (our extension) cancels a running response: the engine requests are
  aborted as for a client that left.
- `response.steer`: no engine here takes input into a running generation, so accepted input
  continues the response once it ends (an automatic successor on its lane, or after a function
  call the client's own continuation; `responses_socket_steering`), or is handed back.
- One task (the sender) owns the send side; everything reaches it through a small bounded
  channel (`websocket_sender`), so a client that reads slowly holds back its own responses
  only. `websocket.disconnect` cancels the nursery: every response leaves its backend stream,
  which aborts its engine requests.
"""

from __future__ import annotations

import logging
from typing import Any, Final, assert_never

import msgspec
import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, WebsocketScope

from smg_trio.core.api_dialect import split_named_events
from smg_trio.errors import ClientError, ClientGone, GatewayError
from smg_trio.frontends.answers import client_address
from smg_trio.frontends.responses_socket_cache import SocketResponses
from smg_trio.frontends.responses_socket_events import (
    Cancel,
    Create,
    Refused,
    Steer,
    create_body,
    error_event,
    event_error,
    protocol_error_event,
    read_event,
)
from smg_trio.frontends.responses_socket_sink import LaneSink
from smg_trio.frontends.responses_socket_steering import (
    MAX_STEERS_PER_RESPONSE,
    PendingSteers,
    QueuedSteer,
    accepted_event,
    failed_event,
    pending_event,
    required_input,
    steer_items,
    successor_body,
    with_queued_input,
)
from smg_trio.frontends.websocket_sender import FrameOutbox, serve_socket
from smg_trio.observability.request_ids import new_request_id
from smg_trio.request.arrival import Arrival
from smg_trio.request.endpoints import RESPONSES_PATH
from smg_trio.request.gateway import Gateway
from smg_trio.request.memory_budget import Reservation
from smg_trio.tenancy.api_keys import Tenant
from smg_trio.wire.json_depth import MAX_JSON_DEPTH, JsonTooDeep, json_depth_exceeds

logger = logging.getLogger(__name__)

MAX_RESPONSES_PER_SOCKET: Final = 256
TRANSPORT: Final = "ws"


class _Running:
    """The response running on a lane: its id, its scope, its sink, its create and the steers
    accepted for it."""

    def __init__(
        self, response_id: str, scope: trio.CancelScope, sink: LaneSink, body: dict[str, Any]
    ) -> None:
        self.response_id = response_id
        self.scope = scope
        self.sink = sink
        self.body = body
        self.steers: list[QueuedSteer] = []


class _Lane:
    """One lane: its creates run one at a time, in order (trio's Lock is fair)."""

    def __init__(self) -> None:
        self.turn = trio.Lock()
        self.creates = 0  # running or waiting for their turn
        self.running: _Running | None = None


class _ResponsesSocket:
    """One accepted Responses WebSocket: its lanes and the way to its sender task."""

    def __init__(
        self,
        gateway: Gateway,
        nursery: trio.Nursery,
        frames_send: trio.MemorySendChannel[bytes],
        client: str,
        tenant: Tenant | None,
    ) -> None:
        self._gateway = gateway
        self._tenant = tenant  # the socket's API key's: every create is charged to it
        self._nursery = nursery
        self._client = client
        self.outbox = FrameOutbox(frames_send)
        self._lanes: dict[str | None, _Lane] = {}
        self._creates = 0
        self._responses = SocketResponses(gateway.responses)  # with the socket's own cache
        self._pending_steers = PendingSteers()
        self.largest_frame = 0

    async def receive_until_disconnect(self, receive: ASGIReceiveCallable) -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if message["type"] != "websocket.receive":
                continue
            text = message.get("text")
            if text is None:
                await self._refuse(
                    event_error("binary frames are not part of this protocol", "unsupported_frame")
                )
            else:
                await self._on_text(text)

    async def _on_text(self, text: str) -> None:
        self.largest_frame = max(self.largest_frame, len(text))
        if json_depth_exceeds(text, MAX_JSON_DEPTH):
            await self._refuse(JsonTooDeep(MAX_JSON_DEPTH))
            return
        event = read_event(text)
        match event:
            case Create(stream_id=stream_id, body=body):
                await self._create(stream_id, body, len(text))
            case Cancel():
                await self._cancel(event)
            case Steer():
                await self._steer(event)
            case Refused(error=error):
                await self._refuse(error)
            case _:
                assert_never(event)

    async def _refuse(self, error: ClientError) -> None:
        self._gateway.metrics.request_rejected(RESPONSES_PATH, TRANSPORT, error.status, error.code)
        await self.outbox.send_frame(protocol_error_event(error))

    async def _create(self, stream_id: str | None, body: dict[str, Any], size: int) -> None:
        try:
            if self._creates >= MAX_RESPONSES_PER_SOCKET:
                raise event_error(
                    f"at most {MAX_RESPONSES_PER_SOCKET} responses may run or wait on one socket",
                    "too_many_responses",
                    status=429,
                )
            # A waiting create holds its body too: reserved now, as an HTTP body is while it
            # is read (docs/limits.md §4), released when the response ends.
            reservation = self._gateway.memory_budget.reserve(size)
        except ClientError as error:
            self._gateway.metrics.request_rejected(
                RESPONSES_PATH, TRANSPORT, error.status, error.code
            )
            await self.outbox.send_frame(error_event(error, stream_id))
            return
        lane = self._lanes.get(stream_id)
        if lane is None:
            lane = self._lanes[stream_id] = _Lane()
        lane.creates += 1
        self._creates += 1
        self._nursery.start_soon(self._take_turn, stream_id, lane, body, reservation)

    async def _take_turn(
        self, stream_id: str | None, lane: _Lane, body: dict[str, Any], reservation: Reservation
    ) -> None:
        try:
            with reservation:
                async with lane.turn:
                    next_body: dict[str, Any] | None = body
                    while next_body is not None:  # a steered response's successor goes next
                        running = await self._serve(stream_id, lane, next_body, reservation)
                        next_body = await self._after_steered(stream_id, running)
        except ClientGone:  # the socket went while steers were answered: nobody to tell
            pass
        finally:
            self._creates -= 1
            lane.creates -= 1
            if lane.creates == 0 and self._lanes.get(stream_id) is lane:
                del self._lanes[stream_id]

    async def _serve(
        self, stream_id: str | None, lane: _Lane, body: dict[str, Any], reservation: Reservation
    ) -> _Running:
        request_id = new_request_id()
        queued = self._pending_steers.take(stream_id, body.get("previous_response_id"))
        if queued is not None:
            body = with_queued_input(body, queued)
        scope = trio.CancelScope()
        sink = LaneSink(self.outbox, stream_id, scope)
        running = _Running(f"resp_{request_id}", scope, sink, body)
        lane.running = running
        streams = self._gateway.metrics.websocket_streams
        streams.inc()
        try:
            with scope:
                try:
                    # One yield first: a cancel that came in the same read costs no ADD.
                    await trio.lowlevel.checkpoint()
                    try:
                        http_body = create_body(body)
                    except ClientError as error:
                        self._gateway.metrics.request_rejected(
                            RESPONSES_PATH, TRANSPORT, error.status, error.code
                        )
                        raise
                    arrival = Arrival(
                        request_id=request_id,
                        transport=TRANSPORT,
                        client=self._client,
                        tenant=self._tenant,
                        body_reservation=reservation,
                        responses=self._responses,
                    )
                    await self._gateway.handle(RESPONSES_PATH, http_body, sink, arrival)
                except GatewayError as error:  # raised only while nothing was sent
                    await sink.fail(error)
                except ClientGone:
                    raise
                except Exception:
                    # One response's bug must not end the others sharing the socket.
                    logger.exception("a response on a Responses WebSocket failed")
                    await sink.fail(GatewayError("internal error"))
            if scope.cancelled_caught:
                await sink.cancelled()
        except ClientGone:
            pass
        finally:
            streams.dec()
            lane.running = None
        return running

    async def _after_steered(
        self, stream_id: str | None, running: _Running
    ) -> dict[str, Any] | None:
        """What becomes of a finished response's accepted steers (`responses_socket_steering`):
        the body of its automatic successor, or None (pending, or failed)."""
        steers = running.steers
        if not steers:
            return None
        previous = running.response_id
        name, response = b"", {}
        for event_name, data in split_named_events(running.sink.last_payload):
            name, response = event_name, msgspec.json.decode(data)["response"]
        if name != b"response.completed":
            for steer in steers:
                await self.outbox.send_frame(
                    failed_event(
                        previous,
                        steer.input,
                        "response_not_active",
                        "the response ended without completing: nothing continues it",
                        stream_id,
                        steer.id,
                    )
                )
            return None
        required = required_input(response)
        if not required:
            return successor_body(running.body, previous, steers)
        self._pending_steers.add(stream_id, previous, [i for s in steers for i in s.items])
        for steer in steers:
            await self.outbox.send_frame(pending_event(steer.id, previous, required, stream_id))
        return None

    def _running(self, response_id: str) -> tuple[str | None, _Running] | None:
        for stream_id, lane in self._lanes.items():
            if lane.running is not None and lane.running.response_id == response_id:
                return stream_id, lane.running
        return None

    async def _cancel(self, cancel: Cancel) -> None:
        running: _Running | None = None
        if cancel.response_id is not None:
            found = self._running(cancel.response_id)
            if found is not None and (cancel.stream_id in (None, found[0])):
                running = found[1]
        else:
            lane = self._lanes.get(cancel.stream_id)
            if lane is not None:
                running = lane.running
        if running is None:
            what = cancel.response_id or f"lane {cancel.stream_id!r}"
            await self.outbox.send_frame(
                protocol_error_event(
                    event_error(
                        f"no running response to cancel ({what})", "response_not_found", status=404
                    )
                )
            )
            return
        running.scope.cancel()

    async def _steer(self, steer: Steer) -> None:
        previous = steer.previous_response_id
        found = self._running(previous)
        stream_id = None if found is None else found[0]
        try:
            items = steer_items(steer.input)
        except ClientError as error:
            await self.outbox.send_frame(
                failed_event(previous, steer.input, "invalid_input", error.message, stream_id)
            )
            return
        if found is None or found[1].sink.ended:
            code, message = "response_not_found", "no response with this id runs on this socket"
            if found is not None or self._responses.knows(previous):
                code, message = "response_already_completed", "the response has completed"
            await self.outbox.send_frame(failed_event(previous, steer.input, code, message, None))
            return
        running = found[1]
        if len(running.steers) >= MAX_STEERS_PER_RESPONSE:
            await self.outbox.send_frame(
                failed_event(
                    previous,
                    steer.input,
                    "too_many_pending_steers",
                    f"at most {MAX_STEERS_PER_RESPONSE} steers wait on one response",
                    stream_id,
                )
            )
            return
        steer_id = f"steer_{new_request_id()}"
        running.steers.append(QueuedSteer(steer_id, steer.input, items))
        await self.outbox.send_frame(accepted_event(steer_id, previous, stream_id))


async def handle_websocket(
    gateway: Gateway,
    scope: WebsocketScope,
    receive: ASGIReceiveCallable,
    send: ASGISendCallable,
    tenant: Tenant | None = None,
) -> None:
    """Serve one Responses WebSocket until the client leaves (the caller routed and
    authenticated it; `tenant`, its API key's under `--api-keys`, is charged for each create)."""
    await serve_socket(
        gateway,
        receive,
        send,
        lambda nursery, frames: _ResponsesSocket(
            gateway, nursery, frames, client_address(scope), tenant
        ),
    )
