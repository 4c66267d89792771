"""The multiplexed WebSocket endpoint against a real gateway: hypercorn's trio worker, our ZMQ
backend and the reference vLLM EngineCore subprocess, driven by our trio-websocket client and by
raw trio-websocket frames for the protocol checks."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pytest
import trio
import trio_websocket

from smg_trio import client as client_module
from smg_trio.client import GatewayClient, GatewayClientError, chat_text, open_gateway_client
from smg_trio.core.api_dialect import named_event
from smg_trio.core.responses_dialect import ResponsesDialect
from smg_trio.core.stream_end import ChoiceFinish, StreamEnd
from smg_trio.errors import GatewayError
from smg_trio.frontends import websocket, websocket_frames, websocket_sender
from smg_trio.frontends.websocket import handle_websocket
from smg_trio.handoff import Taken
from smg_trio.wire.openai_responses import Usage, error_body
from tests.e2e.live_server import API_KEY, REPLAY_HEAD, live_server
from tests.e2e.live_server import STOP as LIVE_STOP
from tests.frontends.websocket_harness import REPLAY_TEXT, RunningGateway, running_gateway

TEST_S: Final = 60.0
ABORT_WITHIN_S: Final = 0.05
SLOW_STEP_MS: Final = 15.0  # the bound for an abort to reach the engine
GROUPING_ATTEMPTS: Final = 3  # runs until the SSE and WebSocket chunks group tokens alike
BEFORE_STOP: Final = REPLAY_TEXT.split("STOP")[0]
CHAT: Final = "/v1/chat/completions"
COMPLETIONS: Final = "/v1/completions"
GENERATE: Final = "/generate"
LONG_CHAT: Final[dict[str, Any]] = {
    "messages": [{"role": "user", "content": "go on forever"}],
    "stream": True,
    "ignore_eos": True,
}


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "stream": True, **extra}


def text_of(path: str, chunks: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """The text of each choice, as a client would assemble it from the chunks."""
    texts: dict[int, str] = {}
    for chunk in chunks:
        if path == GENERATE:
            texts[chunk.get("index", 0)] = chunk["text"]  # /generate streams cumulative text
            continue
        for choice in chunk["choices"]:
            piece = choice["delta"].get("content") if path == CHAT else choice["text"]
            texts[choice["index"]] = texts.get(choice["index"], "") + (piece or "")
    return texts


async def run_stream(
    client: GatewayClient, path: str, body: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, dict[str, Any] | None]:
    async with client.stream(path, body) as stream:
        chunks = [chunk async for chunk in stream]
    return chunks, stream.finish, stream.usage


async def wait_for_engine(
    gateway: RunningGateway, *, active: int, aborted: int | None, within_s: float
) -> Mapping[str, int]:
    """Poll the engine's counters until `active` requests run and `aborted` were aborted."""
    with trio.fail_after(within_s):
        while True:
            counters = await gateway.counters()
            if counters["requests_active"] == active and aborted in (
                None,
                counters["requests_aborted"],
            ):
                return counters


async def test_many_concurrent_streams_on_one_socket_give_the_same_text_as_alone(
    tmp_path: Path,
) -> None:
    requests: list[tuple[str, dict[str, Any]]] = [
        (CHAT, chat("a", stop=["STOP"], stream_options={"include_usage": True})),
        (CHAT, chat("b", max_tokens=5)),
        (CHAT, chat("c", n=2, stop=["engine"])),
        (CHAT, chat("d")),
        (COMPLETIONS, {"prompt": "once", "stream": True, "max_tokens": 7}),
        (COMPLETIONS, {"prompt": "upon", "stream": True, "stop": ["you"]}),
        (GENERATE, {"text": "a time", "stream": True, "sampling_params": {"stop": ["STOP"]}}),
        (GENERATE, {"text": "there", "stream": True, "sampling_params": {"max_new_tokens": 9}}),
    ] * 4
    with trio.fail_after(TEST_S):
        async with running_gateway(tmp_path) as gateway:
            async with open_gateway_client(gateway.url) as client:
                alone = []
                for path, body in requests[:8]:
                    chunks, finish, usage = await run_stream(client, path, body)
                    alone.append((text_of(path, chunks), finish, usage))
            together: list[Any] = [None] * len(requests)
            async with open_gateway_client(gateway.url) as client:

                async def one(i: int, path: str, body: Mapping[str, Any]) -> None:
                    chunks, finish, usage = await run_stream(client, path, body)
                    together[i] = (text_of(path, chunks), finish, usage)

                async with trio.open_nursery() as nursery:
                    for i, (path, body) in enumerate(requests):
                        nursery.start_soon(one, i, path, body)
    for i, (text, finish, usage) in enumerate(together):
        alone_text, alone_finish, alone_usage = alone[i % 8]
        assert (text, finish) == (alone_text, alone_finish), requests[i]
        # A router stop counts the engine tokens up to the message that stopped the choice, and
        # how many tokens one engine message carries depends on timing: only presence is fixed.
        assert (usage is None) == (alone_usage is None)
    texts = [text for text, _, _ in alone]
    assert texts[0] == {0: BEFORE_STOP}
    assert texts[2] == {0: "Tokens stream from the ", 1: "Tokens stream from the "}
    assert texts[5] == {0: "Tokens stream from the engine to "}
    assert texts[6] == {0: BEFORE_STOP}


async def test_finish_and_usage_in_the_done_frame(tmp_path: Path) -> None:
    with trio.fail_after(TEST_S):
        async with running_gateway(tmp_path) as gateway, open_gateway_client(gateway.url) as client:
            chat_chunks, stopped, usage = await run_stream(
                client, CHAT, chat("x", n=2, stop=["STOP"], stream_options={"include_usage": True})
            )
            _, by_eos, no_usage = await run_stream(client, CHAT, chat("y"))
            _, by_length, _ = await run_stream(
                client, COMPLETIONS, {"prompt": "z", "stream": True, "max_tokens": 3}
            )
            generate_chunks, generated, generate_usage = await run_stream(
                client,
                GENERATE,
                {"text": "w", "stream": True, "sampling_params": {"stop": "STOP", "n": 2}},
            )
    assert stopped == [
        {"index": 0, "reason": "stop", "matched_stop": "STOP"},
        {"index": 1, "reason": "stop", "matched_stop": "STOP"},
    ]
    assert chat_chunks[-1]["choices"] == []
    assert usage == chat_chunks[-1]["usage"]
    # An EOS stop in streaming chat carries no matched_stop, and no usage was asked for.
    assert by_eos == [{"index": 0, "reason": "stop", "matched_stop": None}]
    assert no_usage is None
    assert by_length == [{"index": 0, "reason": "length", "matched_stop": None}]
    assert generated == [
        {"index": 0, "reason": "stop", "matched_stop": "STOP"},
        {"index": 1, "reason": "stop", "matched_stop": "STOP"},
    ]
    last_meta = {chunk["index"]: chunk["meta_info"] for chunk in generate_chunks}
    prompt_tokens = last_meta[0]["prompt_tokens"]
    completion_tokens = last_meta[0]["completion_tokens"] + last_meta[1]["completion_tokens"]
    assert generate_usage == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def test_the_done_frame_is_built_from_the_stream_end_data() -> None:
    end = StreamEnd(
        payloads=(b'{"ignored":true}',),
        finish=(ChoiceFinish(0, "stop", "STOP"), ChoiceFinish(1, "length", None)),
        usage=Usage.of(3, 4),
    )
    assert websocket_frames.done_frame("s1", end, "req-1") == (
        b'{"type":"done","id":"s1","finish":[{"index":0,"reason":"stop","matched_stop":"STOP"},'
        b'{"index":1,"reason":"length","matched_stop":null}],'
        b'"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7},'
        b'"request_id":"req-1"}'
    )
    assert websocket_frames.done_frame(7, StreamEnd(), "r") == (
        b'{"type":"done","id":7,"finish":[],"usage":null,"request_id":"r"}'
    )


async def test_a_non_streaming_request_gets_one_response_frame(tmp_path: Path) -> None:
    with trio.fail_after(TEST_S):
        async with running_gateway(tmp_path) as gateway, open_gateway_client(gateway.url) as client:
            body = await client.request(CHAT, chat("q", stream=False, stop=["STOP"]))
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == BEFORE_STOP
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["matched_stop"] == "STOP"


@pytest.mark.serial
async def test_cancel_aborts_only_that_engine_request(tmp_path: Path) -> None:
    with trio.fail_after(TEST_S):
        async with running_gateway(tmp_path) as gateway, open_gateway_client(gateway.url) as client:
            async with (
                client.stream(CHAT, LONG_CHAT) as first,
                client.stream(CHAT, LONG_CHAT) as second,
            ):
                for stream in (first, second, first, second):
                    await stream.__anext__()
                before = await gateway.counters()
                assert before["requests_active"] == 2
                await first.cancel()
                after = await wait_for_engine(
                    gateway,
                    active=1,
                    aborted=before["requests_aborted"] + 1,
                    within_s=ABORT_WITHIN_S,
                )
                assert after["tokens_after_abort"] == 0
                async for _ in first:  # what was in flight, then a quiet end
                    pass
                assert first.finish is None
                # The other request keeps streaming on the same socket.
                received = [await second.__anext__() for _ in range(20)]
                assert "".join(chat_text(c) for c in received)
                assert (await gateway.counters())["requests_active"] == 1
            # Leaving `second`'s block cancels it too.
            final = await wait_for_engine(
                gateway,
                active=0,
                aborted=before["requests_aborted"] + 2,
                within_s=ABORT_WITHIN_S * 4,
            )
    assert final["tokens_after_abort"] == 0


@pytest.mark.serial
async def test_closing_the_socket_aborts_every_request(tmp_path: Path) -> None:
    with trio.fail_after(TEST_S):
        async with running_gateway(tmp_path) as gateway:
            async with open_gateway_client(gateway.url) as client:
                streams = [client.stream(CHAT, LONG_CHAT) for _ in range(3)]
                for stream in streams:
                    await stream.__anext__()
                before = await gateway.counters()
                assert before["requests_active"] == 3
                # Leave without closing the streams: only the socket's close tells the server.
            after = await wait_for_engine(
                gateway, active=0, aborted=before["requests_aborted"] + 3, within_s=ABORT_WITHIN_S
            )
    assert after["tokens_after_abort"] == 0


async def _next_json(connection: trio_websocket.WebSocketConnection) -> dict[str, Any]:
    message = await connection.get_message()
    assert isinstance(message, str)
    frame: dict[str, Any] = json.loads(message)
    return frame


async def _until_terminal(
    connection: trio_websocket.WebSocketConnection, stream_id: object
) -> dict[str, Any]:
    while True:
        frame = await _next_json(connection)
        if frame["id"] == stream_id and frame["type"] != "chunk":
            return frame


async def test_protocol_errors_get_error_frames_and_the_socket_stays_usable(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TEST_S):
        async with (
            running_gateway(tmp_path) as gateway,
            trio_websocket.open_websocket_url(gateway.url) as ws,
        ):

            async def expect_error(message: str | bytes, stream_id: object, code: str) -> None:
                await ws.send_message(message)
                frame = await _next_json(ws)
                assert frame["type"] == "error", frame
                assert frame["id"] == stream_id, frame
                assert frame["error"]["code"] == code, frame

            await expect_error("{not json", None, "invalid_json")
            await expect_error(b'{"type":"cancel","id":1}', None, "unsupported_frame")
            await expect_error('{"type":"request","id":7,"body":{}}', 7, "invalid_message")
            await expect_error(
                '{"type":"request","path":"/generate","body":{}}', None, "invalid_message"
            )
            await expect_error('{"type":"subscribe","id":3}', 3, "invalid_message")
            await expect_error(
                '{"type":"request","id":9,"path":"/generate","body":{', 9, "invalid_json"
            )
            await expect_error('{"type":"cancel","id":4,"x":[', None, "invalid_json")
            await expect_error(
                '{"type":"request","id":true,"path":"/generate","body":{}}', None, "invalid_message"
            )
            await expect_error("[1,2]", None, "invalid_message")
            await expect_error('{"type":"cancel","id":"nobody"}', None, "unknown_id")
            await expect_error(
                json.dumps({"type": "request", "id": 8, "path": "/v2/nothing", "body": {}}),
                8,
                "not_found",
            )

            live = {"type": "request", "id": "a", "path": CHAT, "body": LONG_CHAT}
            await ws.send_message(json.dumps(live))
            first = await _next_json(ws)
            assert first["type"] == "chunk"
            assert first["id"] == "a"
            await ws.send_message(json.dumps(live))  # same id while "a" is live
            while (frame := await _next_json(ws))["type"] == "chunk":
                assert frame["id"] == "a"
            assert frame["id"] is None, frame
            assert frame["error"]["code"] == "duplicate_id", frame
            await ws.send_message('{"type":"cancel","id":"a"}')
            cancelled = await _until_terminal(ws, "a")
            assert cancelled["type"] == "error"
            assert cancelled["error"]["code"] == "cancelled"

            # The socket still works, and the id is free again.
            again = {
                "type": "request",
                "id": "a",
                "path": CHAT,
                "body": chat("ok", stop=["STOP"]),
                "request_id": "client-req-7",
            }
            await ws.send_message(json.dumps(again))
            done = await _until_terminal(ws, "a")
            assert done == {
                "type": "done",
                "id": "a",
                "finish": [{"index": 0, "reason": "stop", "matched_stop": "STOP"}],
                "usage": None,
                "request_id": "client-req-7",
            }
            await wait_for_engine(gateway, active=0, aborted=None, within_s=1.0)


async def test_a_body_validation_error_is_the_openai_400_error_object(tmp_path: Path) -> None:
    body = chat("hi", temperature=7)
    with trio.fail_after(TEST_S):
        async with running_gateway(tmp_path) as gateway:
            with pytest.raises(GatewayError) as raised:
                await gateway.gateway.handle(CHAT, json.dumps(body).encode(), CollectingSink())
            async with open_gateway_client(gateway.url) as client:
                with pytest.raises(GatewayClientError) as failed:
                    await run_stream(client, CHAT, body)
    assert failed.value.error == json.loads(error_body(raised.value))["error"]
    assert failed.value.error["type"] == "invalid_request_error"
    assert failed.value.error["param"] == "temperature"
    assert raised.value.status == 400


class CollectingSink:
    """A ClientSink that keeps what the request layer hands it (what SSE would frame)."""

    def __init__(self) -> None:
        self.payloads: list[bytes] = []
        self.end: StreamEnd | None = None
        self.failure: GatewayError | None = None

    def gone_before_engine(self) -> bool:
        return False

    async def send_chunks(self, payloads: Sequence[bytes]) -> None:
        self.payloads.extend(payloads)
        await trio.lowlevel.checkpoint()

    def send_chunks_now(self, payloads: Sequence[bytes]) -> Taken:
        self.payloads.extend(payloads)
        return Taken.ALL

    async def send_body(self, body: bytes) -> None:
        self.payloads.append(body)
        await trio.lowlevel.checkpoint()

    async def end_stream(self, end: StreamEnd) -> None:
        self.end = end
        self.payloads.extend(end.payloads)
        await trio.lowlevel.checkpoint()

    async def fail(self, error: GatewayError) -> None:
        self.failure = error
        await trio.lowlevel.checkpoint()


_RESPONSE_ID = re.compile(rb'^\{"id":"[^"]*","object":"([a-z._]+)","created":\d+')


def chunk_texts(path: str, payloads: Sequence[bytes]) -> list[dict[int, str]]:
    """Which text each chunk carries: how the tokens were grouped, whatever the bytes say."""
    return [text_of(path, [json.loads(payload)]) for payload in payloads]


def _normalised(payload: bytes) -> bytes:
    """A chunk with its per-request id and creation time blanked."""
    return _RESPONSE_ID.sub(rb'{"id":"ID","object":"\1","created":0', payload)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, chat("p", n=2, stop=["STOP"], stream_options={"include_usage": True})),
        (COMPLETIONS, {"prompt": "p", "stream": True, "max_tokens": 12, "echo": True}),
        (
            GENERATE,
            {"text": "p", "rid": "fixed", "stream": True, "sampling_params": {"stop": "STOP"}},
        ),
    ],
    ids=["chat", "completions", "generate"],
)
@pytest.mark.serial
async def test_websocket_chunks_are_the_sse_payloads_byte_for_byte(
    tmp_path: Path, path: str, body: dict[str, Any]
) -> None:
    encoded = json.dumps(body).encode()
    with trio.fail_after(TEST_S):
        # Slow engine steps so neither consumer falls a step behind: tokens that wait in the
        # backend mailbox are coalesced into one chunk, which changes chunk boundaries. On a
        # loaded machine a consumer still falls behind at times; which tokens share a chunk is
        # then scheduling, not encoding, so a pair of runs whose chunks hold different texts is
        # run again (at most GROUPING_ATTEMPTS times), and the bytes are compared on a pair that
        # grouped alike (docs/architecture.md §8.1).
        async with running_gateway(tmp_path, step_ms=SLOW_STEP_MS) as gateway:
            await gateway.gateway.handle(path, encoded, CollectingSink())  # warm up
            for _ in range(GROUPING_ATTEMPTS):
                sink = CollectingSink()
                await gateway.gateway.handle(path, encoded, sink)
                relayed, message = await relay_chunks(gateway.url, path, body)
                if chunk_texts(path, relayed) == chunk_texts(path, sink.payloads):
                    break
    done = json.loads(message)
    assert done["type"] == "done"
    assert sink.failure is None
    assert sink.end is not None
    assert done["finish"] == [
        {"index": f.index, "reason": f.reason, "matched_stop": f.matched_stop}
        for f in sink.end.finish
    ]
    assert [_normalised(p) for p in relayed] == [_normalised(p) for p in sink.payloads]
    assert len(relayed) > 3


def _logprob_view(path: str, payloads: Sequence[bytes]) -> tuple[Any, ...]:
    """What a stream says, however its tokens were grouped into chunks: the text, each token's
    logprob entry in order, and the final usage; also whether every chunk carried usage."""
    chunks = [json.loads(p) for p in payloads]
    entries: list[Any] = []
    for chunk in chunks:
        for choice in chunk["choices"]:
            logprobs = choice["logprobs"]
            if logprobs is None:
                continue
            if path == CHAT:
                entries += logprobs["content"]
            else:
                entries += zip(logprobs["tokens"], logprobs["token_logprobs"], strict=True)
    usage_everywhere = all("usage" in chunk for chunk in chunks)
    return text_of(path, chunks), entries, chunks[-1].get("usage"), usage_everywhere


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            CHAT,
            chat(
                "p",
                stop=["STOP"],
                logprobs=True,
                top_logprobs=2,
                stream_options={"include_usage": True, "continuous_usage_stats": True},
            ),
        ),
        (COMPLETIONS, {"prompt": "p", "stream": True, "max_tokens": 12, "logprobs": 3}),
    ],
    ids=["chat", "completions"],
)
async def test_websocket_frames_carry_the_same_logprobs_and_usage_as_sse(
    tmp_path: Path, path: str, body: dict[str, Any]
) -> None:
    """Issue 11 over WebSocket: chunk boundaries may differ (tokens coalesce under load), what
    the chunks say may not."""
    encoded = json.dumps(body).encode()
    with trio.fail_after(TEST_S):
        async with running_gateway(tmp_path) as gateway:
            sink = CollectingSink()
            await gateway.gateway.handle(path, encoded, sink)
            relayed, message = await relay_chunks(gateway.url, path, body)
    assert json.loads(message)["type"] == "done"
    view = _logprob_view(path, relayed)
    assert view == _logprob_view(path, sink.payloads)
    _, entries, usage, usage_everywhere = view
    assert entries
    assert usage_everywhere == ("stream_options" in body)
    if path == COMPLETIONS:
        assert len(entries) == 12
    else:
        assert usage["completion_tokens"] >= len(entries)


async def test_requests_beyond_the_per_socket_limit_get_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(websocket, "MAX_STREAMS_PER_SOCKET", 2)
    with trio.fail_after(TEST_S):
        async with (
            running_gateway(tmp_path) as gateway,
            open_gateway_client(gateway.url) as client,
            client.stream(CHAT, LONG_CHAT) as first,
            client.stream(CHAT, LONG_CHAT),
        ):
            await first.__anext__()
            with pytest.raises(GatewayClientError) as refused:
                await run_stream(client, CHAT, chat("third"))
            assert refused.value.code == "too_many_streams"
            await first.aclose()
            chunks, _finish, _ = await run_stream(client, CHAT, chat("fourth", stop=["STOP"]))
            assert text_of(CHAT, chunks) == {0: BEFORE_STOP}


@pytest.mark.serial
async def test_a_client_that_stops_reading_holds_only_its_own_socket(tmp_path: Path) -> None:
    """The sender blocks on a client that reads nothing; its request stops after a bounded number
    of frames, another socket streams on, and the disconnect still aborts the engine request."""
    with trio.fail_after(TEST_S):
        async with running_gateway(tmp_path) as gateway:
            incoming_send, incoming_receive = trio.open_memory_channel[Any](0)
            sent: list[Any] = []
            stuck = trio.Event()

            async def receive() -> Any:
                return await incoming_receive.receive()

            async def send(message: Any) -> None:
                sent.append(message)
                if len(sent) > 5:  # the accept and four frames, then the client stops reading
                    stuck.set()
                    await trio.sleep_forever()

            async with trio.open_nursery() as nursery:
                scope: Any = {"type": "websocket", "path": "/v1/ws"}
                nursery.start_soon(handle_websocket, gateway.gateway, scope, receive, send)
                await incoming_send.send({"type": "websocket.connect"})
                request = {"type": "request", "id": 1, "path": CHAT, "body": LONG_CHAT}
                await incoming_send.send(
                    {"type": "websocket.receive", "text": json.dumps(request), "bytes": None}
                )
                await stuck.wait()
                generated = (await gateway.counters())["tokens_generated"]
                async with open_gateway_client(gateway.url) as client:
                    chunks, _finish, _ = await run_stream(
                        client, CHAT, chat("other", stop=["STOP"])
                    )
                assert text_of(CHAT, chunks) == {0: BEFORE_STOP}
                counters = await gateway.counters()
                assert counters["tokens_generated"] > generated  # the engine was never held
                assert len(sent) == 6
                assert counters["requests_active"] == 1
                await incoming_send.send({"type": "websocket.disconnect", "code": 1006})
                await wait_for_engine(
                    gateway,
                    active=0,
                    aborted=counters["requests_aborted"] + 1,
                    within_s=ABORT_WITHIN_S,
                )


def test_client_cli_streams_one_chat_completion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def scenario() -> int:
        with trio.fail_after(TEST_S):
            async with running_gateway(tmp_path) as gateway:
                return await trio.to_thread.run_sync(
                    client_module.main, [gateway.url, "hello", "--max-tokens", "5"]
                )

    assert trio.run(scenario) == 0
    out = capsys.readouterr().out
    assert out.startswith("Tokens stream")
    assert "[finish: length;" in out


async def test_through_serve_with_an_api_key(tmp_path: Path) -> None:
    """The real app (`serve`, asgi routing, auth) hands `/v1/ws` to our handler."""
    with trio.fail_after(TEST_S):
        async with live_server(tmp_path) as server:
            url = f"ws://127.0.0.1:{server.port}/v1/ws"
            async with open_gateway_client(url, api_key=API_KEY) as client:
                chunks, finish, _ = await run_stream(client, CHAT, chat("hi", stop=[LIVE_STOP]))
    assert text_of(CHAT, chunks) == {0: REPLAY_HEAD}
    assert finish == [{"index": 0, "reason": "stop", "matched_stop": LIVE_STOP}]


async def relay_chunks(url: str, path: str, body: object) -> tuple[list[bytes], str]:
    """Send one request as id 1 over a fresh socket: its chunk payloads, and the frame after."""
    async with trio_websocket.open_websocket_url(url) as ws:
        await ws.send_message(json.dumps({"type": "request", "id": 1, "path": path, "body": body}))
        prefix = '{"type":"chunk","id":1,"data":'
        relayed: list[bytes] = []
        while (message := str(await ws.get_message())).startswith(prefix):
            relayed.append(message.removeprefix(prefix).removesuffix("}").encode())
    return relayed, message


@pytest.mark.parametrize("room", [0, 1, 2])
async def test_responses_frames_refused_by_a_full_sender_go_later_as_they_were_numbered(
    room: int,
) -> None:
    # The Responses API numbers its events as they are framed (core/responses_dialect.py). A
    # batch handed over at once while the socket's sender buffer is full, or has room for part
    # of it, is framed once: the frames the buffer did not take go first with the next send,
    # never framed (and numbered) again (smg_trio/handoff.py). They once skipped numbers here.
    frames_send, frames_receive = trio.open_memory_channel[bytes](3)
    events = [
        named_event(b"response.output_text.delta", b'{"delta":"%d"}' % index) for index in range(9)
    ]
    with trio.fail_after(TEST_S):
        async with trio.open_nursery() as nursery:
            outbox = websocket_sender.FrameOutbox(frames_send)
            scope = trio.CancelScope()
            dialect = ResponsesDialect()
            sink = websocket._StreamSink(outbox, 7, scope, "r", dialect, lambda *_: None)
            await sink.send_chunks(events[: 3 - room])  # the stream is open; `room` slots left
            # Three frames for `room` slots: some or none taken, the rest kept as framed.
            assert sink.send_chunks_now(events[3 - room : 6]) is Taken.PART
            # What the request's hand-off does next: the writer's `send_chunks`, in order.
            received: list[bytes] = []

            async def sender() -> None:
                received.extend([frame async for frame in frames_receive])

            nursery.start_soon(sender)
            await sink.send_chunks(events[6:])
            await frames_send.aclose()
    numbers = [json.loads(frame)["data"]["sequence_number"] for frame in received]
    deltas = [json.loads(frame)["data"]["delta"] for frame in received]
    assert numbers == list(range(9))
    assert deltas == [str(index) for index in range(9)]
