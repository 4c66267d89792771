"""deepseek_v3: calls in DeepSeek's special tokens (docs/tools-and-reasoning.md §2)."""

from __future__ import annotations

import pytest
from hypothesis import given

from smg_trio.core.parsers.deepseek_calls import (
    ARGUMENTS_BEGIN,
    ARGUMENTS_END,
    CALL_BEGIN,
    CALLS_BEGIN,
    CALLS_END,
    SEPARATOR,
)
from smg_trio.core.plan import ParserSetup
from tests.core.parsers.splits import Call, check_any_split, cut_lists, whole

DEEPSEEK = ParserSetup(tool_parser="deepseek_v3", tool_names=frozenset({"f", "g"}))


def call(name: str, arguments: str) -> str:
    return f"{CALL_BEGIN}function{SEPARATOR}{name}{ARGUMENTS_BEGIN}{arguments}{ARGUMENTS_END}"


TWO = f'Sure.{CALLS_BEGIN}{call("f", """{"a": "```"}""")}{call("g", "{}")}{CALLS_END} after'
UNKNOWN = f"{CALLS_BEGIN}{call('zz', '{}')}{CALLS_END}"
CASES: list[tuple[str, str, list[Call]]] = [
    (TWO, "Sure.", [("call-0", "f", '{"a": "```"}'), ("call-1", "g", "{}")]),
    (UNKNOWN, UNKNOWN, []),
    (
        f'x{CALLS_BEGIN}{CALL_BEGIN}function{SEPARATOR}f\n```json\n{{"a"',
        "x",
        [("call-0", "f", '{"a"')],
    ),
    (f"x{CALLS_BEGIN}{CALL_BEGIN}funct", f"x{CALLS_BEGIN}{CALL_BEGIN}funct", []),
    ("plain <｜tool", "plain <｜tool", []),
]


@pytest.mark.parametrize(("text", "content", "calls"), CASES)
def test_calls_and_content(text: str, content: str, calls: list[Call]) -> None:
    assert whole(DEEPSEEK, text) == (content, "", calls)
    check_any_split(DEEPSEEK, text, range(len(text) + 1))


@given(cuts=cut_lists)
def test_any_split_agrees(cuts: list[int]) -> None:
    for text, _, _ in CASES:
        check_any_split(DEEPSEEK, text, cuts)


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    single = ParserSetup(
        tool_parser="deepseek_v3", tool_names=DEEPSEEK.tool_names, parallel_tool_calls=False
    )
    assert whole(single, TWO)[2] == [("call-0", "f", '{"a": "```"}')]
