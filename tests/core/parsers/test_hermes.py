"""hermes / qwen: `<tool_call>{json}</tool_call>` (docs/tools-and-reasoning.md §2)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from smg_trio.core.plan import ParserSetup
from tests.core.parsers.splits import check_any_split, cut_lists, pieces_of, streamed, whole

HERMES = ParserSetup(tool_parser="hermes", tool_names=frozenset({"get_weather", "add"}))
ONE_CALL = (
    "Let me check.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Pa\\"ris {x}", "days": [1, {"n": 2}]}}\n'
    "</tool_call>"
)
TWO_CALLS = (
    '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
    '<tool_call>\n{"arguments": {"city": "Oslo"}, "name": "get_weather"}\n</tool_call>'
)
EXAMPLES = [
    ONE_CALL,
    TWO_CALLS,
    "no call at all, just <tool text and a < sign",
    '<tool_call>\n{"name": "unknown_fn", "arguments": {}}\n</tool_call> after',
    '<tool_call>\n{"name": "add", "arguments": {"a": 1',  # unterminated
    "<tool_call>not json</tool_call>",
    '<tool_call>\n{"name": "add", "arguments": {"s": "\\\\"}}\n</tool_call>',
    "text <tool_ca",
]


def test_a_call_after_text() -> None:
    content, reasoning, calls = whole(HERMES, ONE_CALL)
    assert content == "Let me check.\n"
    assert reasoning == ""
    assert calls == [
        ("call-0", "get_weather", '{"city": "Pa\\"ris {x}", "days": [1, {"n": 2}]}'),
    ]
    assert json.loads(calls[0][2]) == {"city": 'Pa"ris {x}', "days": [1, {"n": 2}]}


def test_arguments_stream_as_the_model_writes_them() -> None:
    out = streamed(HERMES, list(ONE_CALL))  # one character at a time
    fragments = [p for p in out.calls if hasattr(p, "fragment")]
    assert len(fragments) > 10  # not one piece at the close


def test_two_calls_in_either_key_order_and_text_between_is_dropped() -> None:
    content, _, calls = whole(HERMES, TWO_CALLS)
    assert content == ""
    assert calls == [
        ("call-0", "add", '{"a": 1, "b": 2}'),
        ("call-1", "get_weather", '{"city": "Oslo"}'),  # read whole at its close
    ]


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    single = ParserSetup(
        tool_parser="hermes", tool_names=HERMES.tool_names, parallel_tool_calls=False
    )
    assert whole(single, TWO_CALLS)[2] == [("call-0", "add", '{"a": 1, "b": 2}')]


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "unknown_fn", "arguments": {}}\n</tool_call>',
        "<tool_call>not json</tool_call>",
        "<tool_call>[1, 2]</tool_call>",
        '<tool_call>{"name": "add"',
        "text <tool_ca",
        '<tool_call>{"name": "\\x", "arguments": {}}</tool_call>',  # not a JSON escape
    ],
)
def test_what_is_no_call_of_the_tools_is_content(text: str) -> None:
    assert whole(HERMES, text) == (text, "", [])


def test_an_unterminated_call_that_opened_keeps_what_it_streamed() -> None:
    """The call's name went out; a stream cannot take it back, so the body keeps it too."""
    text = '<tool_call>\n{"name": "add", "arguments": {"a": 1'
    assert whole(HERMES, text) == ("", "", [("call-0", "add", '{"a": 1')])


def test_an_unterminated_whole_call_is_a_call() -> None:
    text = '<tool_call>\n{"arguments": {"a": 1}, "name": "add"}'
    assert whole(HERMES, text) == ("", "", [("call-0", "add", '{"a": 1}')])


@pytest.mark.parametrize("text", EXAMPLES)
def test_every_one_character_split_agrees(text: str) -> None:
    check_any_split(HERMES, text, range(len(text) + 1))


@given(cuts=cut_lists)
def test_any_split_agrees(cuts: list[int]) -> None:
    for text in EXAMPLES:
        check_any_split(HERMES, text, cuts)


def test_pieces_of_cuts_everywhere_asked() -> None:
    assert pieces_of("abc", [1, 2]) == ["a", "b", "c"]
