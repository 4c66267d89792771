"""`--stream-interval K` end to end (docs/performance.md §4): over SSE and over the WebSocket,
a streamed completion comes in fewer chunks, each after the first carrying at least K tokens
(the last one, flushed before the finish, may carry fewer), and the concatenated text,
the tokens and the usage are exactly those of the same request answered whole; a request's own
`stream_interval` raises the server's for that request."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Final

import httpx
import trio

from smg_trio.client import open_gateway_client
from tests.e2e.live_server import MODEL, live_server, parse_sse

TEST_TIMEOUT_S: Final = 30.0
COMPLETIONS: Final = "/v1/completions"
INTERVAL: Final = 4
MAX_TOKENS: Final = 21


def completion_body(*, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "prompt": "Say something.",
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "logprobs": 0,  # each chunk lists its tokens: how many a chunk carries is visible
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def chunked(events: list[dict[str, Any]]) -> tuple[list[list[str]], str, object, object]:
    """The tokens of each text chunk, the text, the finish reason and the usage of a stream."""
    chunks: list[list[str]] = []
    text, finish, usage = "", None, None
    for event in events:
        usage = event.get("usage") or usage
        for choice in event["choices"]:
            if choice["text"]:
                chunks.append(choice["logprobs"]["tokens"])
                text += choice["text"]
            finish = choice.get("finish_reason") or finish
    return chunks, text, finish, usage


async def test_interval_k_groups_tokens_over_sse_and_websocket_with_the_same_text(
    tmp_path: Path,
) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        async with live_server(tmp_path, api_key=None, stream_interval=INTERVAL) as server:
            async with httpx.AsyncClient(base_url=server.base_url) as client:
                whole = (await client.post(COMPLETIONS, json=completion_body(stream=False))).json()
                response = await client.post(COMPLETIONS, json=completion_body(stream=True))
                sse = parse_sse(response.content)
            url = f"ws://127.0.0.1:{server.port}/v1/ws"
            async with (
                open_gateway_client(url) as ws_client,
                ws_client.stream(COMPLETIONS, completion_body(stream=True)) as stream,
            ):
                ws = [chunk async for chunk in stream]
    assert sse[-1] == "[DONE]"
    expected_text = whole["choices"][0]["text"]
    expected_tokens = whole["choices"][0]["logprobs"]["tokens"]
    assert len(expected_tokens) == MAX_TOKENS
    for transport, events in (("sse", sse[:-1]), ("websocket", ws)):
        chunks, text, finish, usage = chunked(events)  # type: ignore[arg-type]
        assert (text, finish, usage) == (expected_text, "length", whole["usage"]), transport
        assert [token for chunk in chunks for token in chunk] == expected_tokens, transport
        # The first text is never held; every chunk between it and the last has K or more.
        assert all(len(chunk) >= INTERVAL for chunk in chunks[1:-1]), (transport, chunks)
        assert 3 <= len(chunks) <= 1 + math.ceil((MAX_TOKENS - 1) / INTERVAL), (transport, chunks)


async def test_interval_one_sends_each_engine_step_and_a_request_may_raise_it(
    tmp_path: Path,
) -> None:
    """The default: with the engine stepping slower than the gateway, a chunk per token; a
    request's own `stream_interval` (vLLM's field) raises it for that request only."""
    raised = {**completion_body(stream=True), "stream_interval": INTERVAL}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with (
            live_server(tmp_path, api_key=None, step_ms=5.0) as server,
            httpx.AsyncClient(base_url=server.base_url) as client,
        ):
            response = await client.post(COMPLETIONS, json=completion_body(stream=True))
            grouped = await client.post(COMPLETIONS, json=raised)
    chunks, _, _, _ = chunked(parse_sse(response.content)[:-1])  # type: ignore[arg-type]
    assert sum(map(len, chunks)) == MAX_TOKENS
    assert len(chunks) > MAX_TOKENS // 2, chunks  # mostly one token each (a slow round may merge)
    chunks, _, _, _ = chunked(parse_sse(grouped.content)[:-1])  # type: ignore[arg-type]
    assert sum(map(len, chunks)) == MAX_TOKENS
    assert all(len(chunk) >= INTERVAL for chunk in chunks[1:-1]), chunks
    assert 3 <= len(chunks) <= 1 + math.ceil((MAX_TOKENS - 1) / INTERVAL), chunks
