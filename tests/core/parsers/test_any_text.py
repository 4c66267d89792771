"""Any model output, however malformed, through every parser: never an exception, and the
same result however it is split (docs/tools-and-reasoning.md §1-§2)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.core.parsers.registry import REASONING_PARSERS, TOOL_PARSERS
from smg_trio.core.plan import ParserSetup
from tests.core.parsers.splits import check_any_split, cut_lists

PIECES = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    '"',
    "\\",
    ",",
    ";",
    ":",
    "\n",
    " ",
    '"name"',
    '"arguments"',
    '"parameters"',
    '"f"',
    "f",
    "x",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    ">",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "function",
    "\n```json\n",
    "\n```<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
    "a=1",
    "1",
    "é",
    "Here is my thought process:",
    "Here is my response:",
    "\\u12",
    '\\"',
    "'",
    "[ARGS]",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|start|>",
    "analysis",
    "final",
    "commentary",
    " to=functions.f",
    "assistant",
]
texts = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)
SETUPS = [
    ParserSetup(tool_parser=name, tool_names=frozenset({"f"})) for name in sorted(TOOL_PARSERS)
] + [ParserSetup(reasoning_parser=name) for name in sorted(REASONING_PARSERS)]


@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: s.tool_parser or s.reasoning_parser)
@settings(max_examples=150)
@given(text=texts, cuts=cut_lists)
def test_never_raises_and_splits_agree(setup: ParserSetup, text: str, cuts: list[int]) -> None:
    check_any_split(setup, text, cuts)


def test_deep_nesting_is_content_not_an_error() -> None:
    deep = "[" * 100_000
    for name in ("hermes", "llama3_json", "pythonic"):
        setup = ParserSetup(tool_parser=name, tool_names=frozenset({"f"}))
        for text in (f'<tool_call>{{"name": "f", "a": {deep}', f'{{"x": {deep}', deep):
            check_any_split(setup, text, [7, 500])
