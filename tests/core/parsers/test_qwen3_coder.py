"""qwen3_coder: `<tool_call><function=…><parameter=…>` markup (docs/tools-and-reasoning.md §2)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from smg_trio.core.plan import ParserSetup
from tests.core.parsers.splits import Call, check_any_split, cut_lists, whole

CODER = ParserSetup(tool_parser="qwen3_coder", tool_names=frozenset({"f", "g"}))
TWO = (
    'Sure.\n<tool_call>\n<function=f>\n<parameter=city>\nPa"ris\n\n</parameter>\n'
    "<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=g>\n</function>\n</tool_call>"
)
UNKNOWN = "<tool_call>\n<function=zz>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"
CASES: list[tuple[str, str, list[Call]]] = [
    (TWO, "Sure.", [("call-0", "f", '{"city": "Pa\\"ris\\n", "n": "3"}'), ("call-1", "g", "{}")]),
    (UNKNOWN + " after", UNKNOWN + " after", []),
    ("<tool_call>\n<function=f>\n<parameter=a>\nx", "", [("call-0", "f", '{"a": "x')]),
    ("<tool_call>\n<funct", "<tool_call>\n<funct", []),
    ("text <tool_c", "text <tool_c", []),
    ("two\n\nlines\n", "two\n\nlines\n", []),  # a newline not before a call is text
]


@pytest.mark.parametrize(("text", "content", "calls"), CASES)
def test_calls_and_content(text: str, content: str, calls: list[Call]) -> None:
    assert whole(CODER, text) == (content, "", calls)
    check_any_split(CODER, text, range(len(text) + 1))


def test_arguments_are_the_json_of_the_parameters_with_wrapping_newlines_trimmed() -> None:
    assert json.loads(whole(CODER, TWO)[2][0][2]) == {"city": 'Pa"ris\n', "n": "3"}


@given(cuts=cut_lists)
def test_any_split_agrees(cuts: list[int]) -> None:
    for text, _, _ in CASES:
        check_any_split(CODER, text, cuts)


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    single = ParserSetup(
        tool_parser="qwen3_coder", tool_names=CODER.tool_names, parallel_tool_calls=False
    )
    assert [c[1] for c in whole(single, TWO)[2]] == ["f"]
