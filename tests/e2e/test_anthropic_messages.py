"""Anthropic's Messages API end to end (docs/client-apis.md §2): the official `anthropic` SDK
against the gateway and the reference vLLM EngineCore replaying a known text over the real ZMQ
wire. Stop sequences are the router's (the engine request is aborted), `max_tokens` ends the
message, the stream's events come in Anthropic's order, and the SDK's accumulator rebuilds the
same message as the whole body, over HTTP/1.1, h2c and the WebSocket protocol."""

from __future__ import annotations

import json
from functools import partial
from typing import Any, Final

import anthropic
import httpx
import httpx2
import pytest
import trio
import trio_websocket
from anthropic.types import Message, TextBlock

from tests.e2e.live_server import API_KEY, MODEL, REPLAY_HEAD, STOP, LiveServer

TEST_TIMEOUT_S: Final = 30.0
MESSAGES: Final[list[Any]] = [{"role": "user", "content": "How does the gateway work?"}]


def sdk_client(server: LiveServer, *, http2: bool = False) -> anthropic.Anthropic:
    """The SDK pointed at `server` (it sends `x-api-key`), without retries; h2c when `http2`.
    Run in a worker thread, as the openai SDK tests do."""
    http_client = httpx2.Client(http1=not http2, http2=http2, timeout=20)
    return anthropic.Anthropic(
        base_url=server.base_url, api_key=API_KEY, max_retries=0, http_client=http_client
    )


def text_of(message: Message) -> str:
    return "".join(block.text for block in message.content if isinstance(block, TextBlock))


def blocks_of(message: Message) -> list[dict[str, Any]]:
    """The content blocks as plain data (the stream's accumulator adds `parsed_output`)."""
    return [
        block.model_dump(exclude={"parsed_output"}, exclude_none=True) for block in message.content
    ]


def create_and_stream(client: anthropic.Anthropic, **fields: Any) -> tuple[Message, Message]:
    whole = client.messages.create(model=MODEL, messages=MESSAGES, **fields)
    with client.messages.stream(model=MODEL, messages=MESSAGES, **fields) as stream:
        streamed = stream.get_final_message()
    return whole, streamed


def same_message(whole: Message, streamed: Message) -> None:
    assert whole.id.startswith("msg_")
    assert streamed.id.startswith("msg_")
    assert whole.id != streamed.id
    fields = ("stop_reason", "stop_sequence", "model", "role", "type")
    assert {f: getattr(streamed, f) for f in fields} == {f: getattr(whole, f) for f in fields}
    assert blocks_of(streamed) == blocks_of(whole)
    assert streamed.usage.output_tokens == whole.usage.output_tokens
    assert streamed.usage.input_tokens == whole.usage.input_tokens > 0


@pytest.mark.serial  # a real-time bound (docs/architecture.md §8.1)
async def test_a_stop_sequence_ends_the_message_and_the_engine_request(
    server: LiveServer,
) -> None:
    for http2 in (False, True):
        with trio.fail_after(TEST_TIMEOUT_S), sdk_client(server, http2=http2) as client:
            whole, streamed = await trio.to_thread.run_sync(
                partial(create_and_stream, client, max_tokens=200, stop_sequences=[STOP])
            )
            assert text_of(whole) == REPLAY_HEAD
            assert (whole.stop_reason, whole.stop_sequence) == ("stop_sequence", STOP)
            same_message(whole, streamed)
            # The router's stop left the engine request: nothing keeps generating.
            assert await server.seconds_until_idle() <= 0.05


async def test_max_tokens_ends_the_message(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), sdk_client(server) as client:
        whole, streamed = await trio.to_thread.run_sync(
            lambda: create_and_stream(
                client,
                max_tokens=5,
                system=[{"type": "text", "text": "Be brief."}],
                metadata={"user_id": "u-1"},
                # SDK 2 has dropped the sampling knobs; the API (and this gateway) takes them.
                extra_body={"temperature": 0.5, "top_p": 0.9, "top_k": 40},
            )
        )
    assert (whole.stop_reason, whole.stop_sequence) == ("max_tokens", None)
    assert whole.usage.output_tokens == 5
    assert REPLAY_HEAD.startswith(text_of(whole))
    assert text_of(whole)
    same_message(whole, streamed)


def event_names(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in raw.decode().split("\n\n"):
        if block:
            name, data = block.split("\n")
            events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


async def test_the_stream_sends_anthropics_events_in_order(server: LiveServer) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 100, "stream": True}
    body["stop_sequences"] = [STOP]
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
            response = await client.post(
                "/v1/messages",
                json=body,
                headers={"x-api-key": API_KEY, "anthropic-version": "2023-06-01"},
            )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = event_names(response.content)
    names = [name for name, _ in events]
    assert all(data["type"] == name for name, data in events)
    deltas = names.count("content_block_delta")
    assert deltas > 1
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0][1]["message"]
    assert (start["content"], start["stop_reason"], start["role"]) == ([], None, "assistant")
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    text = "".join(data["delta"]["text"] for name, data in events if name == "content_block_delta")
    assert text == REPLAY_HEAD
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": STOP}
    assert events[-2][1]["usage"]["output_tokens"] > 0


async def ws_messages(server: LiveServer, *, stream: bool) -> list[dict[str, Any]]:
    """One Messages request over our WebSocket protocol: every frame up to its last."""
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 100, "stop_sequences": [STOP]}
    body["stream"] = stream
    frames: list[dict[str, Any]] = []
    async with trio_websocket.open_websocket_url(
        f"ws://127.0.0.1:{server.port}/v1/ws", extra_headers=[(b"x-api-key", API_KEY.encode())]
    ) as connection:
        request = {"type": "request", "id": "m", "path": "/v1/messages", "body": body}
        await connection.send_message(json.dumps(request))
        while True:
            frames.append(json.loads(await connection.get_message()))
            if frames[-1]["type"] != "chunk":
                return frames


async def test_the_same_text_over_the_websocket(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        streamed = await ws_messages(server, stream=True)
        whole = await ws_messages(server, stream=False)
    *chunks, done = streamed
    assert done["type"] == "done"
    assert done["finish"] == [{"index": 0, "reason": "stop_sequence", "matched_stop": STOP}]
    assert [frame["event"] for frame in chunks][:3] == [
        "message_start",
        "content_block_start",
        "ping",
    ]
    assert all(frame["event"] == frame["data"]["type"] for frame in chunks)
    text = "".join(
        frame["data"]["delta"].get("text", "")
        for frame in chunks
        if frame["event"] == "content_block_delta"
    )
    assert text == REPLAY_HEAD
    body = whole[-1]
    assert body["type"] == "response"
    assert body["data"]["content"] == [{"type": "text", "text": REPLAY_HEAD}]
    assert body["data"]["stop_reason"] == "stop_sequence"


def open_and_close(client: anthropic.Anthropic) -> None:
    with client.messages.stream(model=MODEL, messages=MESSAGES, max_tokens=2000) as stream:
        for _ in stream:
            break


@pytest.mark.serial  # a real-time bound (docs/architecture.md §8.1)
async def test_closing_a_stream_aborts_the_engine_request(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), sdk_client(server) as client:
        await trio.to_thread.run_sync(open_and_close, client)
        assert await server.seconds_until_idle() <= 0.05


def count_and_tokenize(client: anthropic.Anthropic, server: LiveServer) -> tuple[int, int]:
    counted = client.messages.count_tokens(model=MODEL, messages=MESSAGES, system="Be brief.")
    chat = [{"role": "system", "content": "Be brief."}, *MESSAGES]
    tokenized = httpx.post(
        f"{server.base_url}/v1/tokenize",
        json={"model": MODEL, "messages": chat, "chat_template_kwargs": {"enable_thinking": False}},
        headers=server.auth,
        timeout=20,
    ).json()
    return counted.input_tokens, tokenized["count"]


async def test_count_tokens_counts_the_rendered_prompt(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), sdk_client(server) as client:
        counted, tokenized = await trio.to_thread.run_sync(count_and_tokenize, client, server)
    assert counted == tokenized > 10


def count_with_cache_marks(client: anthropic.Anthropic) -> tuple[int, int]:
    """The same prompt counted bare and with Claude Code's cache breakpoints on the system
    block and the last user block (docs/client-apis.md §2.5)."""
    mark: Any = {"type": "ephemeral"}
    marked: Any = [
        *MESSAGES[:-1],
        {
            "role": MESSAGES[-1]["role"],
            "content": [{"type": "text", "text": MESSAGES[-1]["content"], "cache_control": mark}],
        },
    ]
    system: Any = [{"type": "text", "text": "Be brief.", "cache_control": {**mark, "ttl": "1h"}}]
    bare = client.messages.count_tokens(model=MODEL, messages=MESSAGES, system="Be brief.")
    with_marks = client.messages.count_tokens(
        model=MODEL,
        messages=marked,
        system=system,
    )
    return bare.input_tokens, with_marks.input_tokens


async def test_cache_control_marks_are_accepted_and_leave_the_prompt_unchanged(
    server: LiveServer,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), sdk_client(server) as client:
        bare, with_marks = await trio.to_thread.run_sync(count_with_cache_marks, client)
    assert bare == with_marks > 10


async def test_a_bad_body_over_the_websocket_gets_anthropics_error_object(
    server: LiveServer,
) -> None:
    request = {"type": "request", "id": 3, "path": "/v1/messages", "body": {"model": MODEL}}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio_websocket.open_websocket_url(
            f"ws://127.0.0.1:{server.port}/v1/ws", extra_headers=[(b"x-api-key", API_KEY.encode())]
        ) as connection:
            await connection.send_message(json.dumps(request))
            frame = json.loads(await connection.get_message())
    assert (frame["type"], frame["id"]) == ("error", 3)
    assert frame["error"]["type"] == "invalid_request_error"
    assert "`messages`" in frame["error"]["message"]  # the first missing field
