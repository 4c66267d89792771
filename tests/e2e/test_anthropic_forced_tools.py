"""Forced tool use through the Messages API: `tool_choice` `any` (chat's "required") and `tool`
(chat's named function), which need no tool-call parser (docs/tools-and-reasoning.md §5); the
reference vLLM EngineCore replays what a grammar-guided model says under the tools' schema, and
the SDK gets a `tool_use` block, in the body and rebuilt from the stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any, Final

import pytest
import trio

from tests.e2e.live_server import LiveServer, live_server
from tests.e2e.test_anthropic_messages import blocks_of, create_and_stream, sdk_client

TEST_TIMEOUT_S: Final = 30.0
REPLAY: Final = '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'
TOOLS: Final[list[Any]] = [
    {
        "name": "get_weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(tmp_path, replay_text=REPLAY) as running:
        yield running


async def test_tool_choice_any_answers_with_a_tool_use_block(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), sdk_client(server) as client:
        whole, streamed = await trio.to_thread.run_sync(
            partial(
                create_and_stream,
                client,
                max_tokens=200,
                tools=TOOLS,
                tool_choice={"type": "any", "disable_parallel_tool_use": True},
            )
        )
    for message in (whole, streamed):
        (block,) = blocks_of(message)
        assert (block["type"], block["name"], block["input"]) == (
            "tool_use",
            "get_weather",
            {"city": "Paris"},
        )
        assert message.stop_reason == "tool_use"


async def test_tool_choice_tool_makes_its_output_the_named_tools_input(tmp_path: Path) -> None:
    # A named tool: the whole output is that call's arguments (chat's named function).
    with trio.fail_after(TEST_TIMEOUT_S):
        async with live_server(tmp_path, replay_text='{"city": "Paris"}') as named:
            with sdk_client(named) as client:
                whole, streamed = await trio.to_thread.run_sync(
                    partial(
                        create_and_stream,
                        client,
                        max_tokens=200,
                        tools=TOOLS,
                        tool_choice={"type": "tool", "name": "get_weather"},
                    )
                )
    for message in (whole, streamed):
        (block,) = blocks_of(message)
        assert (block["type"], block["name"], block["input"]) == (
            "tool_use",
            "get_weather",
            {"city": "Paris"},
        )
        assert message.stop_reason == "tool_use"
