"""Tool use and thinking through Anthropic's Messages API (docs/client-apis.md §2.2): the
reference vLLM EngineCore replays a model's markup (a think block, text, a hermes tool call)
token by token; the gateway runs `--tool-call-parser hermes --reasoning-parser qwen3` behind a
copy of the demo model whose chat template knows tools. The SDK's stream accumulator rebuilds
the body's `thinking`, `text` and `tool_use` blocks; the next turn sends the `tool_result`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any, Final

import anthropic
import httpx
import pytest
import trio
from anthropic.types import Message

from tests.e2e.live_server import MODEL, LiveServer, demo_model_with_template, live_server
from tests.e2e.test_anthropic_messages import blocks_of, event_names, sdk_client

TEST_TIMEOUT_S: Final = 30.0
ARGUMENTS: Final = {"city": "Paris", "days": [1, 2]}
MARKUP: Final = (
    "<think>The user wants weather.</think>Checking.\n<tool_call>\n"
    f'{{"name": "get_weather", "arguments": {json.dumps(ARGUMENTS)}}}\n</tool_call>'
)
TOOLS: Final[list[Any]] = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
QUESTION: Final[list[Any]] = [{"role": "user", "content": "Weather in Paris?"}]
THINKING: Final[Any] = {"type": "enabled", "budget_tokens": 1024}
# ChatML that also renders tool calls and tool results (the demo's template refuses the tool
# role, as a model without tools would).
TOOL_TEMPLATE: Final = (
    "{%- for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{%- for c in m.get('tool_calls') or [] %}<tool_call>{{ c.function.name }} "
    "{{ c.function.arguments | tojson }}</tool_call>{%- endfor %}"
    "{%- if m.get('tool_call_id') %} ({{ m['tool_call_id'] }}){%- endif %}<|im_end|>\n"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def tool_model(tmp_path: Path) -> Path:
    """The demo model folder with TOOL_TEMPLATE as its chat template."""
    return demo_model_with_template(tmp_path / "model", TOOL_TEMPLATE)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(
        tmp_path,
        replay_text=MARKUP,
        tool_call_parser="hermes",
        reasoning_parser="qwen3",
        model_path=tool_model(tmp_path),
        served_model_names=(MODEL,),
    ) as running:
        yield running


def create_and_stream(client: anthropic.Anthropic, **fields: Any) -> tuple[Message, Message]:
    whole = client.messages.create(model=MODEL, max_tokens=2000, **fields)
    with client.messages.stream(model=MODEL, max_tokens=2000, **fields) as stream:
        streamed = stream.get_final_message()
    return whole, streamed


async def test_thinking_text_and_tool_use_blocks_stream_and_not(server: LiveServer) -> None:
    for http2 in (False, True):
        with trio.fail_after(TEST_TIMEOUT_S), sdk_client(server, http2=http2) as client:
            whole, streamed = await trio.to_thread.run_sync(
                partial(
                    create_and_stream, client, messages=QUESTION, tools=TOOLS, thinking=THINKING
                )
            )
        blocks = blocks_of(whole)
        call_id = blocks[2]["id"]
        assert call_id.startswith("toolu_")
        assert blocks == [
            {"type": "thinking", "thinking": "The user wants weather.", "signature": ""},
            {"type": "text", "text": "Checking.\n"},
            {"type": "tool_use", "id": call_id, "name": "get_weather", "input": ARGUMENTS},
        ]
        assert (whole.stop_reason, whole.stop_sequence) == ("tool_use", None)
        streamed_blocks = blocks_of(streamed)
        assert streamed_blocks[2]["id"].startswith("toolu_")
        streamed_blocks[2]["id"] = call_id  # ids name their request
        assert streamed_blocks == blocks
        assert streamed.stop_reason == "tool_use"


async def test_the_stream_has_thinking_text_and_input_json_deltas(server: LiveServer) -> None:
    body = {"model": MODEL, "max_tokens": 2000, "stream": True, "messages": QUESTION}
    body |= {"tools": TOOLS, "thinking": THINKING, "tool_choice": {"type": "auto"}}
    with trio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
            response = await client.post("/v1/messages", json=body, headers=server.auth)
    events = event_names(response.content)
    starts = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert [block["type"] for block in starts] == ["thinking", "text", "tool_use"]
    assert starts[2]["input"] == {}  # the input arrives as input_json_delta
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]
    by_type: dict[str, str] = {}
    for delta in deltas:
        kind = delta["type"]
        field = {"thinking_delta": "thinking", "text_delta": "text"}.get(kind, "partial_json")
        by_type[kind] = by_type.get(kind, "") + delta[field]
    assert by_type["thinking_delta"] == "The user wants weather."
    assert by_type["text_delta"] == "Checking.\n"
    assert json.loads(by_type["input_json_delta"]) == ARGUMENTS
    assert sum(d["type"] == "input_json_delta" for d in deltas) > 1  # streamed in pieces
    stops = [data["index"] for name, data in events if name == "content_block_stop"]
    assert stops == [0, 1, 2]


async def test_without_thinking_the_think_block_stays_text(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), sdk_client(server) as client:
        whole = await trio.to_thread.run_sync(
            lambda: client.messages.create(
                model=MODEL, max_tokens=2000, messages=QUESTION, tools=TOOLS
            )
        )
    blocks = blocks_of(whole)
    assert [block["type"] for block in blocks] == ["text", "tool_use"]
    assert blocks[0]["text"] == "<think>The user wants weather.</think>Checking.\n"


def next_turn(client: anthropic.Anthropic, server: LiveServer) -> tuple[Message, int, int]:
    first = client.messages.create(
        model=MODEL, max_tokens=2000, messages=QUESTION, tools=TOOLS, thinking=THINKING
    )
    call = first.content[2]
    assert call.type == "tool_use"
    turns: list[Any] = [
        *QUESTION,
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 C"},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]
    answer = client.messages.create(
        model=MODEL, max_tokens=2000, messages=turns, tools=TOOLS, thinking=THINKING
    )
    counted = client.messages.count_tokens(
        model=MODEL, messages=turns, tools=TOOLS, thinking=THINKING
    ).input_tokens
    # The chat request the turns mean, tokenized by /v1/tokenize.
    chat = [
        *QUESTION,
        {
            "role": "assistant",
            "content": "Checking.\n",
            "reasoning_content": "The user wants weather.",
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps(ARGUMENTS)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    tokenize = {"model": MODEL, "messages": chat, "chat_template_kwargs": {"enable_thinking": True}}
    tokenize["tools"] = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": t["input_schema"],
            },
        }
        for t in TOOLS
    ]
    tokenized = httpx.post(
        f"{server.base_url}/v1/tokenize", json=tokenize, headers=server.auth, timeout=20
    ).json()
    return answer, counted, tokenized["count"]


async def test_the_next_turn_sends_the_tool_result(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S), sdk_client(server) as client:
        answer, counted, tokenized = await trio.to_thread.run_sync(next_turn, client, server)
    assert answer.stop_reason == "tool_use"  # the replay answers the same again
    assert answer.usage.input_tokens == counted == tokenized
