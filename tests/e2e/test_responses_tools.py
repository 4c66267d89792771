"""Tool use and reasoning through the Responses API (docs/client-apis.md §3.2): the reference
vLLM EngineCore replays a model's markup over the real ZMQ wire, the gateway runs
`--tool-call-parser hermes --reasoning-parser qwen3`, and the `openai` SDK gets `reasoning`,
`message` and `function_call` items, whole and streamed alike; the call's output goes back as
a `function_call_output` item on the next turn."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest
import trio
from openai import OpenAI
from openai.types.responses import FunctionToolParam, Response

from tests.e2e.live_server import (
    MODEL,
    LiveServer,
    demo_model_with_template,
    live_server,
    openai_client,
)

TEST_TIMEOUT_S: Final = 30.0
ARGUMENTS: Final = '{"city": "Paris", "days": [1, 2]}'
MARKUP: Final = (
    "<think>The user wants weather.</think>Checking.\n<tool_call>\n"
    f'{{"name": "get_weather", "arguments": {ARGUMENTS}}}\n</tool_call>'
)
TOOLS: Final[list[FunctionToolParam]] = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": False,
    }
]


# The demo template refuses the `tool` role; this one renders calls and their results.
TOOL_TEMPLATE: Final = (
    "{%- for message in messages %}{{- '<|im_start|>' ~ message['role'] ~ '\\n' ~ "
    "message['content'] }}{%- for call in message.get('tool_calls') or [] %}{{- '<tool_call>' ~ "
    "call['function']['name'] ~ (call['function']['arguments'] | tojson) ~ '</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def model_with_tool_template(tmp_path: Path) -> Path:
    # The served name is the folder's.
    return demo_model_with_template(tmp_path / MODEL, TOOL_TEMPLATE)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[LiveServer]:
    async with live_server(
        tmp_path,
        replay_text=MARKUP,
        tool_call_parser="hermes",
        reasoning_parser="qwen3",
        model_path=model_with_tool_template(tmp_path),
    ) as running:
        yield running


def items_of(response: Response) -> list[tuple[str, ...]]:
    """Each output item's kind and content (ids differ between two requests)."""
    out: list[tuple[str, ...]] = []
    for item in response.output:
        if item.type == "reasoning":
            out.append(("reasoning", "".join(part.text for part in item.content or ())))
        elif item.type == "message":
            out.append(("message", "".join(getattr(p, "text", "") for p in item.content)))
        elif item.type == "function_call":
            out.append(("function_call", item.name, item.arguments))
    return out


def call_then_answer(client: OpenAI) -> tuple[Response, Response, list[str], Response, int]:
    with client:
        whole = client.responses.create(model=MODEL, input="Weather in Paris?", tools=TOOLS)
        with client.responses.stream(model=MODEL, input="Weather in Paris?", tools=TOOLS) as stream:
            names: list[str] = [event.type for event in stream]
            streamed = stream.get_final_response()
        call = next(item for item in whole.output if item.type == "function_call")
        answer = client.responses.create(
            model=MODEL,
            previous_response_id=whole.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
            tools=TOOLS,
        )
        # The same conversation as chat messages: its prompt is the second turn's.
        chat = client.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": "Checking.\n",
                    "tool_calls": [
                        {
                            "id": call.call_id,
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ARGUMENTS},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"},
            ],
            max_tokens=1,
        )
    assert chat.usage is not None
    return whole, streamed, names, answer, chat.usage.prompt_tokens


async def test_function_call_items_whole_and_streamed(server: LiveServer) -> None:
    with trio.fail_after(TEST_TIMEOUT_S):
        whole, streamed, names, answer, chat_prompt = await trio.to_thread.run_sync(
            call_then_answer, openai_client(server)
        )
    expected = [
        ("reasoning", "The user wants weather."),
        ("message", "Checking.\n"),
        ("function_call", "get_weather", ARGUMENTS),
    ]
    assert items_of(whole) == expected
    assert items_of(streamed) == expected
    assert whole.status == streamed.status == "completed"
    assert "response.reasoning_text.delta" in names
    assert "response.function_call_arguments.delta" in names
    assert names.index("response.function_call_arguments.done") < names.index("response.completed")
    call = whole.output[-1]
    assert call.type == "function_call"
    assert call.call_id.startswith("call_")
    # The next turn carries the call and its output back to the model.
    assert answer.previous_response_id == whole.id
    assert answer.usage is not None
    assert answer.usage.input_tokens == chat_prompt
