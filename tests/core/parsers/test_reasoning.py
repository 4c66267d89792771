"""Reasoning parsers: `<think>…</think>` and granite's markers (docs/tools-and-reasoning.md §3)."""

from __future__ import annotations

import pytest
from hypothesis import given

from smg_trio.core.plan import ParserSetup
from tests.core.parsers.splits import check_any_split, cut_lists, whole

R1 = ParserSetup(reasoning_parser="deepseek_r1")
QWEN3 = ParserSetup(reasoning_parser="qwen3")
GRANITE = ParserSetup(reasoning_parser="granite")
BOTH = ParserSetup(reasoning_parser="qwen3", tool_parser="hermes", tool_names=frozenset({"f"}))

THINK_CASES = [
    ("<think>a plan</think>The answer.", "The answer.", "a plan"),
    ("a plan</think>The answer.", "The answer.", "a plan"),  # the prompt opened the block
    ("\n<think>\nx</think>\n\ny", "\n\ny", "\nx"),
    ("still thinking <thi", "", "still thinking <thi"),  # never ended: all reasoning
    ("<think>", "", ""),
    ("<thi", "", "<thi"),
    ("no markers at all", "", "no markers at all"),
    ("</think>only content", "only content", ""),
]


@pytest.mark.parametrize(("text", "content", "reasoning"), THINK_CASES)
@pytest.mark.parametrize("setup", [R1, QWEN3])
def test_think_blocks(setup: ParserSetup, text: str, content: str, reasoning: str) -> None:
    assert whole(setup, text) == (content, reasoning, [])


GRANITE_CASES = [
    (
        "Here is my thought process: think. Here is my response: answer",
        " answer",
        " think. ",
    ),
    ("Here's my thought process:x Here's my response:y", "y", "x "),
    ("plain answer", "plain answer", ""),
    ("Here is my thought process: never answered", "", " never answered"),
    ("Here is my", "Here is my", ""),
]


@pytest.mark.parametrize(("text", "content", "reasoning"), GRANITE_CASES)
def test_granite(text: str, content: str, reasoning: str) -> None:
    assert whole(GRANITE, text) == (content, reasoning, [])


def test_tool_calls_are_read_after_reasoning_only() -> None:
    text = (
        '<think>maybe <tool_call>{"name": "f", "arguments": {}}</tool_call></think>ok\n'
        '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
    )
    content, reasoning, calls = whole(BOTH, text)
    assert reasoning == 'maybe <tool_call>{"name": "f", "arguments": {}}</tool_call>'
    assert content == "ok\n"
    assert calls == [("call-0", "f", '{"x": 1}')]


@given(cuts=cut_lists)
def test_any_split_agrees(cuts: list[int]) -> None:
    for text, _, _ in THINK_CASES:
        check_any_split(R1, text, cuts)
    for text, _, _ in GRANITE_CASES:
        check_any_split(GRANITE, text, cuts)
    check_any_split(BOTH, '<think>a</think>b<tool_call>{"name": "f", "arguments": {}}', cuts)
