"""SseResponse and `respond` against a recording ASGI server: the state machine decides what an
error becomes, a disconnect cancels the request at once, and a bug is a logged 500."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

import pytest
import trio

from smg_trio.core.responses_dialect import ResponsesDialect
from smg_trio.core.stream_end import StreamEnd
from smg_trio.errors import BackendUnavailable, ClientError, ClientGone, EngineDead
from smg_trio.frontends.http.asgi_types import Message
from smg_trio.frontends.http.client_disconnect import ClientDisconnect
from smg_trio.frontends.sink_state import SinkState
from smg_trio.frontends.sse import SSE_HEADERS, SseResponse, respond
from smg_trio.handoff import Taken

TEST_TIMEOUT_S: Final = 5.0
END: Final = b"data: [DONE]\n\n"


class RecordingServer:
    """The ASGI server side: records what the app sends and feeds what `receive` returns."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self._incoming_send, self._incoming = trio.open_memory_channel[Message](10)
        self.disconnect = ClientDisconnect()

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        await trio.lowlevel.checkpoint()

    async def receive(self) -> Message:
        return await self._incoming.receive()

    def client_sends(self, message: Message) -> None:
        self._incoming_send.send_nowait(message)

    def client_leaves(self) -> None:
        """What our task group does when hypercorn queues `http.disconnect`."""
        self.disconnect.fire()

    @property
    def status(self) -> int:
        assert self.sent[0]["type"] == "http.response.start"
        status: int = self.sent[0]["status"]
        return status

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent[1:])

    @property
    def complete(self) -> bool:
        return self.sent[-1]["type"] == "http.response.body" and not self.sent[-1].get(
            "more_body", False
        )


async def test_stream_goes_idle_streaming_closed() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()
        response = SseResponse(server.send)
        states = [response.state]
        await response.send_chunks([b'{"a":1}'])
        states.append(response.state)
        await response.send_chunks([b'{"a":2}'])
        await response.end_stream(StreamEnd(payloads=(b'{"usage":3}',)))
        states.append(response.state)
        assert states == [SinkState.IDLE, SinkState.STREAMING, SinkState.CLOSED]
        assert server.status == 200
        assert server.headers[b"content-type"].startswith(b"text/event-stream")
        assert server.body == (
            b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: {"usage":3}\n\ndata: [DONE]\n\n'
        )
        assert server.complete
        await response.end_stream(StreamEnd())  # ending twice sends nothing more
        await response.fail(EngineDead("late"))  # nor does an error after the end
        assert len(server.sent) == 4
        with pytest.raises(RuntimeError):
            await response.send_chunks([b"{}"])


async def test_payloads_that_piled_up_go_out_as_one_write_of_separate_events() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()
        response = SseResponse(server.send)
        await response.send_chunks([b'{"a":1}', b'{"a":2}', b'{"a":3}'])
        body_messages = [m for m in server.sent if m["type"] == "http.response.body"]
        assert len(body_messages) == 1
        assert body_messages[0]["body"] == b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: {"a":3}\n\n'
        assert body_messages[0]["more_body"] is True


async def test_error_before_the_first_byte_is_an_http_status_with_the_code_header() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()
        response = SseResponse(server.send)
        await response.fail(BackendUnavailable("no engine is ready"))
        assert response.state is SinkState.CLOSED
        assert server.status == 503
        assert server.headers[b"x-error-code"] == b"backend_unavailable"
        assert server.headers[b"content-type"] == b"application/json"
        error = json.loads(server.body)["error"]
        assert error["code"] == "backend_unavailable"
        assert error["message"] == "no engine is ready"
        assert server.complete


async def test_error_after_the_first_byte_is_a_final_event_then_done() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()
        response = SseResponse(server.send)
        await response.send_chunks([b'{"a":1}'])
        await response.fail(EngineDead("engine went silent"))
        assert server.status == 200
        events = server.body.decode().split("\n\n")
        assert json.loads(events[1].removeprefix("data: "))["error"]["code"] == "engine_dead"
        assert events[2:] == ["data: [DONE]", ""]
        assert server.complete


async def test_an_error_while_idle_is_the_http_error_with_its_own_status() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()
        await SseResponse(server.send).fail(ClientError("bad", status=422, code="x"))
        assert server.status == 422
        assert json.loads(server.body)["error"]["code"] == "x"


async def test_a_stream_that_ends_before_any_chunk_is_still_a_whole_event_stream() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()
        await SseResponse(server.send).end_stream(StreamEnd())
        assert server.status == 200
        assert server.headers[b"content-type"].startswith(b"text/event-stream")
        assert server.body == b"data: [DONE]\n\n"
        assert server.complete


async def test_non_streaming_body_is_json_200() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()
        response = SseResponse(server.send)
        await response.send_body(b'{"ok":true}')
        assert response.state is SinkState.CLOSED
        assert server.status == 200
        assert server.headers[b"content-length"] == b"11"
        assert server.body == b'{"ok":true}'


async def test_disconnect_cancels_the_request_at_once_and_later_chunks_raise() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()
        seen: list[SseResponse] = []
        cancelled_after: list[float] = []

        async def handle(response: SseResponse) -> None:
            seen.append(response)
            await response.send_chunks([b'{"n":0}'])
            await trio.sleep(0.01)
            start = trio.current_time()
            server.client_leaves()
            assert response.client_gone  # at once; the cancel in the next scheduling round
            try:
                await trio.sleep_forever()
            finally:
                cancelled_after.append(trio.current_time() - start)

        await respond(handle, server.disconnect, server.send)
        assert cancelled_after[0] < 0.05  # the next scheduling round, not a timeout
        response = seen[0]
        assert response.client_gone
        with pytest.raises(ClientGone):
            await response.send_chunks([b"{}"])
        with pytest.raises(ClientGone):
            await response.send_body(b"{}")
        await response.fail(EngineDead("x"))  # nothing is sent to a gone client
        await response.end_stream(StreamEnd())
        assert len(server.sent) == 2


async def test_gateway_error_from_the_handler_ends_the_response() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()

        async def handle(response: SseResponse) -> None:
            raise ClientError("`n` must be at least 1", param="n")

        response = await respond(handle, server.disconnect, server.send)
        assert response.state is SinkState.CLOSED
        assert server.status == 400
        assert json.loads(server.body)["error"]["param"] == "n"


async def test_a_bug_mid_stream_is_logged_and_ends_with_an_error_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()

        async def handle(response: SseResponse) -> None:
            await response.send_chunks([b'{"n":0}'])
            raise KeyError("oops")

        await respond(handle, server.disconnect, server.send)
        assert server.status == 200
        body = server.body.decode()
        assert '"code":"internal_error"' in body
        assert "oops" not in body  # no traceback or exception text reaches the client
        assert body.endswith("data: [DONE]\n\n")
        assert "KeyError" in caplog.text


async def test_cancellation_from_outside_is_never_swallowed() -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()

        async def handle(response: SseResponse) -> None:
            await trio.sleep_forever()

        with trio.move_on_after(0.01) as scope:
            await respond(handle, server.disconnect, server.send)
        assert scope.cancelled_caught
        assert server.sent == []


async def test_a_client_gone_before_the_request_registered_costs_no_engine_request() -> None:
    # Rapid reset: hypercorn queued the disconnect before the app ran; the request sees it
    # right before its ADD would go out, and its scope is cancelled.
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()
        server.client_leaves()
        asked: list[bool] = []

        async def handle(response: SseResponse) -> None:
            asked.append(response.gone_before_engine())
            await trio.sleep_forever()

        response = await respond(handle, server.disconnect, server.send)
        assert asked == [True]
        assert response.client_gone
        assert server.sent == []


async def test_a_client_leaving_after_the_whole_answer_stops_nothing() -> None:
    # hypercorn tells every ended stream `http.disconnect`, from inside the last send.
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()
        finished: list[bool] = []

        async def handle(response: SseResponse) -> None:
            await response.send_chunks([b'{"n":0}'])
            await response.end_stream(StreamEnd())
            server.client_leaves()
            await trio.sleep(0.01)  # what runs after the answer (logging, metrics) goes on
            finished.append(response.client_gone)

        await respond(handle, server.disconnect, server.send)
        assert finished == [False]


class FakeDirect:
    """A `DirectChunks` that takes what it is told to, and records it."""

    def __init__(self, *, takes: bool) -> None:
        self.takes = takes
        self.heads: list[list[tuple[bytes, bytes]]] = []
        self.written: list[bytes] = []

    def write_chunk_now(self, data: bytes) -> tuple[Taken, bytes]:
        if not self.takes:
            return Taken.REFUSED, data
        self.written.append(data)
        return Taken.ALL, b""

    def start_now(
        self, headers: Sequence[tuple[bytes, bytes]], first: bytes
    ) -> tuple[Taken, bytes]:
        if not self.takes:
            return Taken.REFUSED, first
        self.heads.append(list(headers))
        self.written.append(first)
        return Taken.ALL, b""

    async def write_rest(self, rest: bytes) -> None:
        raise AssertionError("nothing is ever left over here")

    async def end_now(self, last: bytes) -> bool:
        return False  # the end goes through ASGI, where these tests read it


async def test_the_head_and_first_chunk_go_at_once_when_the_connection_takes_them() -> None:
    # docs/performance.md §3: no task hop and no awaited head for the first token.
    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()
        direct = FakeDirect(takes=True)
        response = SseResponse(server.send, direct=direct, start_now=direct.start_now)
        assert response.send_chunks_now([b'{"a":1}']) is Taken.ALL
        assert response.state is SinkState.STREAMING
        assert response.send_chunks_now([b'{"a":2}']) is Taken.ALL
        await response.end_stream(StreamEnd(payloads=()))
    assert direct.heads == [SSE_HEADERS]
    assert direct.written == [b'data: {"a":1}\n\n', b'data: {"a":2}\n\n']
    assert server.sent == [{"type": "http.response.body", "body": END, "more_body": False}]


async def test_events_refused_by_the_connection_go_once_as_they_were_framed() -> None:
    # A Responses dialect numbers events as it frames them: a batch framed for the direct path
    # and refused there is sent by `send_chunks(())` (the request's writer) as framed, after
    # the head, never framed (and numbered) twice.
    def event(delta: str) -> bytes:
        data = json.dumps({"type": "response.output_text.delta", "delta": delta})
        return b"event: response.output_text.delta\ndata: " + data.encode() + b"\n\n"

    with trio.fail_after(TEST_TIMEOUT_S):
        server = RecordingServer()
        direct = FakeDirect(takes=False)
        response = SseResponse(
            server.send, ResponsesDialect(), direct=direct, start_now=direct.start_now
        )
        assert response.send_chunks_now([event("a")]) is Taken.PART
        states = [response.state]  # nothing went out yet
        assert response.send_chunks_now([event("b")]) is Taken.REFUSED  # the first goes first
        await response.send_chunks(())
        states.append(response.state)
        await response.send_chunks([event("b")])
        assert response.send_chunks_now([event("c")]) is Taken.PART
        await response.end_stream(StreamEnd(payloads=(event("d"),)))
    assert states == [SinkState.IDLE, SinkState.STREAMING]
    assert server.status == 200
    numbers = [
        json.loads(line[6:])["sequence_number"]
        for line in server.body.split(b"\n")
        if line.startswith(b"data: ")
    ]
    deltas = [
        json.loads(line[6:])["delta"]
        for line in server.body.split(b"\n")
        if line.startswith(b"data: ")
    ]
    assert (numbers, deltas) == ([0, 1, 2, 3], ["a", "b", "c", "d"])
