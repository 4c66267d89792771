"""A Messages body → the chat request it means (docs/client-apis.md §2.1): turns, blocks,
tools, tool_choice, thinking and metadata, each honoured through the chat path or refused with
a 400 naming it; any JSON at all decodes or is a 400, never another error."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.anthropic_request import (
    chat_request_of,
    decode_count_tokens_request,
    decode_messages_request,
    prepare_messages,
)
from smg_trio.core.prepare import PromptModel
from smg_trio.errors import ClientError
from smg_trio.model.folder import demo_model_path, load_model_dir
from smg_trio.neutral.runtime import Endpoint
from smg_trio.wire import openai as oa

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
USER = {"role": "user", "content": "Hi"}
MODEL: PromptModel = load_model_dir(demo_model_path()).prompt_model()


def decode(**fields: Any) -> Any:
    body = {"model": "m", "max_tokens": 8, "messages": [USER], **fields}
    return decode_messages_request(json.dumps(body).encode())


def test_turns_and_blocks_become_chat_messages() -> None:
    req = decode(
        system=[{"type": "text", "text": "Be"}, {"type": "text", "text": "brief."}],
        messages=[
            USER,
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Hm.", "signature": ""},
                    {"type": "text", "text": "Calling."},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": [1]}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "x"}],
                    },
                    {"type": "text", "text": "Thanks."},
                ],
            },
        ],
    )
    chat = chat_request_of(req)
    assert chat.messages == (
        oa.SystemMessage(content=(oa.TextPart("Be"), oa.TextPart("brief."))),
        oa.UserMessage(content="Hi"),
        oa.AssistantMessage(
            content=(oa.TextPart("Calling."),),
            tool_calls=(oa.ToolCall("t1", oa.FunctionCall("f", '{"a":[1]}')),),
            reasoning_content="Hm.",
        ),
        oa.ToolMessage(content="42", tool_call_id="t1"),
        oa.ToolMessage(content=(oa.TextPart("x"),), tool_call_id="t1"),
        oa.UserMessage(content=(oa.TextPart("Thanks."),)),
    )


def test_fields_map_to_the_chat_request() -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}, "description": "F."}]
    chat = chat_request_of(
        decode(
            stop_sequences=["END"],
            temperature=0.2,
            top_p=0.5,
            top_k=3,
            stream=True,
            metadata={"user_id": "u-7"},
            tools=tools,
            tool_choice={"type": "tool", "name": "f", "disable_parallel_tool_use": True},
            thinking={"type": "enabled", "budget_tokens": 1024},
            max_tokens=2048,
        )
    )
    assert (chat.stop, chat.temperature, chat.top_p, chat.top_k) == (("END",), 0.2, 0.5, 3)
    assert (chat.stream, chat.user, chat.max_tokens) == (True, "u-7", 2048)
    assert chat.tools == (oa.Tool(oa.FunctionDefinition("f", "F.", {"type": "object"})),)
    assert chat.tool_choice == oa.ToolChoiceFunction(oa.NamedFunction("f"))
    assert chat.parallel_tool_calls is False
    assert chat.chat_template_kwargs == {"enable_thinking": True}
    choices = {"auto": "auto", "any": "required", "none": "none"}
    for kind, expected in choices.items():
        chosen = chat_request_of(decode(tools=tools, tool_choice={"type": kind}))
        assert (chosen.tool_choice, chosen.parallel_tool_calls) == (expected, None)
    assert chat_request_of(decode()).chat_template_kwargs == {"enable_thinking": False}


def test_the_plan_is_the_chat_plan_answered_as_messages() -> None:
    req = decode(stop_sequences=["END"], max_tokens=9)
    plan = prepare_messages(req, MODEL, request_id="r", now=NOW)
    assert plan.endpoint is Endpoint.MESSAGES
    assert plan.sampling.max_tokens == 9
    assert plan.stop_spec.strings == ("END",)
    count = decode_count_tokens_request(json.dumps({"model": "m", "messages": [USER]}).encode())
    assert len(plan.prompt_ids) == len(
        prepare_messages(decode(), MODEL, request_id="r", now=NOW).prompt_ids
    )
    assert chat_request_of(count).max_tokens is None


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"top_k": -1}, "top_k"),
        ({"stop_sequences": ["x"] * 65}, "stop_sequences"),
        (
            {
                "messages": [
                    {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
                ]
            },
            "messages[0].content[0].type",
        ),
        (
            {"messages": [{"role": "system", "content": [{"type": "image", "source": {}}]}]},
            "messages[0].content[0].type",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "image", "source": {}}],
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0].content[0]",
        ),
        ({"tools": [{"name": "web", "type": "web_search_20250305"}]}, "tools[0]"),
        ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
        ({"tool_choice": {"type": "tool"}}, "tool_choice.name"),
    ],
)
def test_what_is_not_honoured_is_a_400_naming_it(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(ClientError) as caught:
        chat_request_of(decode(**fields))  # the decoder, or the rewrite into a chat request
    assert caught.value.status == 400
    assert caught.value.param is not None
    assert caught.value.param.startswith(param)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["model", "messages", "role", "content", "type", "text", "max_tokens", "x"]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(json_values)
def test_any_json_decodes_or_is_a_400(value: object) -> None:
    error: ClientError | None = None
    try:
        chat_request_of(decode_messages_request(json.dumps(value).encode()))
    except ClientError as raised:  # anything else (a TypeError, a KeyError) fails the test
        error = raised
    assert error is None or error.status == 400
