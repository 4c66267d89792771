"""Batched completions end to end: the openai SDK sends `prompt` as a list of strings or of
token id lists to the real server in front of the reference vLLM EngineCore (replay mode) and
parses one choice set per prompt (index i * n + j), echo per prompt, usage summed; streaming,
non-streaming and over the WebSocket protocol."""

from __future__ import annotations

import json
from typing import Final

import httpx
import trio
import trio_websocket
from openai.types import Completion, CompletionUsage

from tests.e2e.live_server import (
    API_KEY,
    MODEL,
    REPLAY_HEAD,
    STOP,
    LiveServer,
    openai_client,
)

TEST_TIMEOUT_S: Final = 30.0
PROMPTS: Final = ["First prompt", "The second, longer prompt"]


async def prompt_lengths(server: LiveServer) -> list[int]:
    async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as http:
        counts = [
            (await http.post("/v1/tokenize", json={"prompt": p})).json()["count"] for p in PROMPTS
        ]
    return counts


async def test_sdk_batch_non_streaming_with_n_and_echo(server: LiveServer) -> None:
    def call() -> Completion:
        return openai_client(server).completions.create(
            model=MODEL, prompt=PROMPTS, n=2, echo=True, stop=[STOP], max_tokens=60
        )

    with trio.fail_after(TEST_TIMEOUT_S):
        answer = await trio.to_thread.run_sync(call)
        lengths = await prompt_lengths(server)
    choices = answer.choices
    assert [c.index for c in choices] == [0, 1, 2, 3]
    for choice in choices:
        assert choice.text == PROMPTS[choice.index // 2] + REPLAY_HEAD
        assert choice.finish_reason == "stop"
    usage = answer.usage
    assert usage is not None
    assert usage.prompt_tokens == sum(lengths)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


async def test_sdk_batch_of_token_id_lists_streaming_with_usage(server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=server.base_url, headers=server.auth) as http:
        ids = [
            (await http.post("/v1/tokenize", json={"prompt": p})).json()["tokens"] for p in PROMPTS
        ]

    def call() -> tuple[dict[int, str], dict[int, str], CompletionUsage | None]:
        stream = openai_client(server).completions.create(
            model=MODEL,
            prompt=ids,
            stream=True,
            stop=[STOP],
            max_tokens=60,
            stream_options={"include_usage": True},
        )
        texts: dict[int, str] = {}
        finishes: dict[int, str] = {}
        usage = None
        for chunk in stream:
            for choice in chunk.choices:
                texts[choice.index] = texts.get(choice.index, "") + choice.text
                if choice.finish_reason is not None:
                    finishes[choice.index] = choice.finish_reason
            usage = chunk.usage or usage
        return texts, finishes, usage

    with trio.fail_after(TEST_TIMEOUT_S):
        texts, finishes, usage = await trio.to_thread.run_sync(call)
    assert texts == {0: REPLAY_HEAD, 1: REPLAY_HEAD}
    assert finishes == {0: "stop", 1: "stop"}
    assert usage is not None
    assert usage.prompt_tokens == sum(len(i) for i in ids)


async def test_a_batch_over_the_websocket_reports_every_choice(server: LiveServer) -> None:
    body = {
        "model": MODEL,
        "prompt": PROMPTS,
        "stream": True,
        "stop": [STOP],
        "max_tokens": 60,
        "stream_options": {"include_usage": True},
    }
    url = f"ws://127.0.0.1:{server.port}/v1/ws"
    with trio.fail_after(TEST_TIMEOUT_S):
        async with trio_websocket.open_websocket_url(
            url, extra_headers=[(b"authorization", f"Bearer {API_KEY}".encode())]
        ) as connection:
            await connection.send_message(
                json.dumps({"type": "request", "id": 1, "path": "/v1/completions", "body": body})
            )
            while (frame := json.loads(await connection.get_message()))["type"] == "chunk":
                pass
        lengths = await prompt_lengths(server)
    assert frame["type"] == "done", frame
    assert [f["index"] for f in frame["finish"]] == [0, 1]
    assert frame["usage"]["prompt_tokens"] == sum(lengths)
