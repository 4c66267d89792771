"""Harmony (gpt-oss) end to end (docs/tools-and-reasoning.md §10): the gateway serves the
Harmony test model with `--tool-call-parser openai --reasoning-parser openai_gptoss`; the
reference vLLM EngineCore replays gpt-oss markup over the real ZMQ wire and stops on `<|call|>`
because the gateway asked it to. The `openai` SDK rebuilds from the stream the same message as
the body, and the same comes over WebSocket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest
import trio
from openai import OpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
)

from smg_trio.core.harmony_prompt import harmony_stop_ids
from smg_trio.model.folder import load_model_dir
from tests.e2e.live_server import (
    MODEL,
    LiveServer,
    live_server,
    openai_client,
    websocket_chat_both_ways,
)

TEST_TIMEOUT_S: Final = 30.0
HARMONY_MODEL: Final = Path(__file__).resolve().parents[1] / "harmony_model"
REASONING: Final = "The user asks for the weather; call get_weather."
ARGUMENTS: Final = '{"city": "Paris"}'
# What gpt-oss says after the prompt's `<|start|>assistant`; `<|call|>` ends it, and the
# words after it must never be seen: the engine stops on the id the gateway sent.
REPLAY: Final = (
    f"<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant<|channel|>commentary "
    f"to=functions.get_weather <|constrain|>json<|message|>{ARGUMENTS}<|call|>never said"
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
MESSAGES: Final[list[ChatCompletionMessageParam]] = [{"role": "user", "content": "Weather?"}]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(
        tmp_path,
        replay_text=REPLAY,
        model_path=HARMONY_MODEL,
        served_model_names=(MODEL,),
        tool_call_parser="openai",
        reasoning_parser="openai_gptoss",
    ) as running:
        yield running


def message_of(completion: ChatCompletion) -> dict[str, Any]:
    choice = completion.choices[0]
    return {
        "content": choice.message.content or None,
        "reasoning": (choice.message.model_extra or {}).get("reasoning_content"),
        "calls": [
            (c.function.name, json.loads(c.function.arguments))
            for c in choice.message.tool_calls or ()
        ],
        "finish_reason": choice.finish_reason,
    }


EXPECTED: Final = {
    "content": None,
    "reasoning": REASONING,
    "calls": [("get_weather", {"city": "Paris"})],
    "finish_reason": "tool_calls",
}


def body_and_stream(client: OpenAI) -> tuple[ChatCompletion, ChatCompletion]:
    body = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        tools=TOOLS,
        reasoning_effort="low",
        extra_headers={"x-request-id": "harmony-body"},
    )
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState(input_tools=TOOLS)
    for chunk in client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, reasoning_effort="low", stream=True
    ):
        state.handle_chunk(chunk)
    return body, state.get_final_completion()


async def test_reasoning_and_a_call_body_and_stream_agree(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), openai_client(server) as client:
        body, streamed = await trio.to_thread.run_sync(body_and_stream, client)
        sent = await server.backend.call_utility("smg_trio_received", "harmony-body")
    assert message_of(body) == message_of(streamed) == EXPECTED
    stops = harmony_stop_ids(load_model_dir(HARMONY_MODEL).tokenizer)  # <|return|>, <|call|>
    assert set(stops) <= set(sent["stop_token_ids"])  # the engine itself stops on them


async def test_the_same_over_websocket(server: LiveServer) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS}
    with trio.fail_after(TEST_TIMEOUT_S):
        done, rebuilt, completion = await websocket_chat_both_ways(server, body, TOOLS)
    assert done["type"] == "done", done
    assert done["finish"][0]["reason"] == "tool_calls"
    assert message_of(rebuilt) == message_of(completion) == EXPECTED
