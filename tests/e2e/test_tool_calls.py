"""Tool calls and reasoning end to end (docs/tools-and-reasoning.md): the reference vLLM
EngineCore replays a model's markup token by token over the real ZMQ wire; the gateway runs
`--tool-call-parser hermes --reasoning-parser qwen3`. The `openai` SDK's stream accumulator
rebuilds from the deltas the same message as the non-streaming body, over HTTP and WebSocket."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest
import trio
from openai import OpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
    ChatCompletionToolChoiceOptionParam,
)

from tests.e2e.live_server import (
    MODEL,
    LiveServer,
    live_server,
    openai_client,
    websocket_chat_both_ways,
)

TEST_TIMEOUT_S: Final = 30.0
ARGUMENTS: Final = '{"city": "Paris", "days": [1, 2]}'
MARKUP: Final = (
    "<think>The user wants weather.</think>Checking.\n<tool_call>\n"
    f'{{"name": "get_weather", "arguments": {ARGUMENTS}}}\n</tool_call>'
)
TOOLS: Final[list[ChatCompletionFunctionToolParam]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
MESSAGES: Final[list[ChatCompletionMessageParam]] = [
    {"role": "user", "content": "Weather in Paris?"}
]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(
        tmp_path, replay_text=MARKUP, tool_call_parser="hermes", reasoning_parser="qwen3"
    ) as running:
        yield running


def message_of(completion: ChatCompletion) -> dict[str, Any]:
    choice = completion.choices[0]
    message = choice.message
    # Ids differ between two requests (they name the request): each must be there.
    calls = [
        (c.function.name, c.function.arguments, c.id.split("-")[0])
        for c in message.tool_calls or ()
    ]
    extra = message.model_extra or {}
    return {
        "content": message.content,
        "reasoning": extra.get("reasoning_content"),
        "reasoning_alias": extra.get("reasoning"),
        "tool_calls": calls,
        "finish_reason": choice.finish_reason,
    }


def body_and_stream(
    client: OpenAI, tool_choice: ChatCompletionToolChoiceOptionParam = "auto"
) -> tuple[ChatCompletion, ChatCompletion]:
    body = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=tool_choice
    )
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState(input_tools=TOOLS)
    chunks = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=tool_choice, stream=True
    )
    for chunk in chunks:
        state.handle_chunk(chunk)
    return body, state.get_final_completion()


async def test_the_stream_accumulates_to_the_body(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        body, streamed = await trio.to_thread.run_sync(body_and_stream, client)
    expected = message_of(body)
    assert expected["content"] == "Checking.\n"
    assert expected["reasoning"] == "The user wants weather."
    assert expected["reasoning_alias"] == "The user wants weather."
    assert expected["finish_reason"] == "tool_calls"
    assert expected["tool_calls"] == [("get_weather", ARGUMENTS, "chatcmpl")]
    got = message_of(streamed)
    # The accumulator keeps delta fields it does not know only from the last chunk: compare the
    # reasoning from the raw deltas instead (below); the rest must match exactly.
    got.pop("reasoning"), expected.pop("reasoning")
    got.pop("reasoning_alias"), expected.pop("reasoning_alias")
    assert got == expected


def stream_chunks(client: OpenAI) -> list[ChatCompletionChunk]:
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, stream=True
    )
    return list(stream)


async def test_streamed_deltas_are_openai_shaped(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        chunks = await trio.to_thread.run_sync(stream_chunks, client)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    alias = "".join((d.model_extra or {}).get("reasoning") or "" for d in deltas)
    assert reasoning == alias == "The user wants weather."
    calls = [call for d in deltas for call in d.tool_calls or ()]
    first = calls[0]
    assert (first.index, first.type, first.function and first.function.name) == (
        0,
        "function",
        "get_weather",
    )
    assert all(c.id is None and c.function and c.function.name is None for c in calls[1:])
    assert "".join(c.function.arguments or "" for c in calls if c.function) == ARGUMENTS
    assert len(calls) > 1  # the arguments streamed in pieces, not at the close
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


async def test_tool_choice_none_leaves_the_markup_as_content(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        body, streamed = await trio.to_thread.run_sync(body_and_stream, client, "none")
    for completion in (body, streamed):
        got = message_of(completion)
        assert got["content"] == MARKUP.split("</think>")[1]  # reasoning is still separated
        assert got["tool_calls"] == []
        assert got["finish_reason"] == "stop"


async def test_the_same_over_websocket(server: LiveServer) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS}
    with trio.fail_after(TEST_TIMEOUT_S):
        done, rebuilt_completion, completion = await websocket_chat_both_ways(server, body, TOOLS)
    assert done["type"] == "done", done
    assert done["finish"][0]["reason"] == "tool_calls"
    rebuilt = message_of(rebuilt_completion)
    expected = message_of(completion)
    assert expected["tool_calls"][0][:2] == ("get_weather", ARGUMENTS)
    rebuilt.pop("reasoning"), expected.pop("reasoning")
    rebuilt.pop("reasoning_alias"), expected.pop("reasoning_alias")
    assert rebuilt == expected
