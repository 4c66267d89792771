"""gpt-oss's Harmony channels (docs/tools-and-reasoning.md §10): analysis → reasoning,
`to=functions.NAME` → a call, final → content; the same for every split of the text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.plan import ParserSetup
from tests.core.parsers.splits import Call, check_any_split, cut_lists, whole

NAMES = frozenset({"get_weather", "add"})
TOOLS = ParserSetup(tool_parser="openai", tool_names=NAMES, reasoning_parser="openai_gptoss")
REASONING_ONLY = ParserSetup(reasoning_parser="openai_gptoss")
ALIAS = ParserSetup(tool_parser="harmony", tool_names=NAMES, reasoning_parser="harmony")

ANALYSIS = "<|channel|>analysis<|message|>The user wants weather. Use <tools>.<|end|>"
CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris", "s": "<|x"}'
)
FINAL = "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris."
REASONING = "The user wants weather. Use <tools>."

CASES: list[tuple[ParserSetup, str, str, str, list[Call]]] = [
    (TOOLS, ANALYSIS + FINAL, "It is sunny in Paris.", REASONING, []),
    (
        TOOLS,
        ANALYSIS + CALL,
        "",
        REASONING,
        [("call-0", "get_weather", '{"city": "Paris", "s": "<|x"}')],
    ),
    (
        ALIAS,
        ANALYSIS + CALL,
        "",
        REASONING,
        [("call-0", "get_weather", '{"city": "Paris", "s": "<|x"}')],
    ),
    # Recipient before the channel, content type without <|constrain|>.
    (
        TOOLS,
        '<|start|>assistant to=functions.add<|channel|>commentary json<|message|>{"a": 1}<|call|>',
        "",
        "",
        [("call-0", "add", '{"a": 1}')],
    ),
    # A function that is not among the tools: its body is content.
    (TOOLS, '<|channel|>commentary to=functions.rm<|message|>{"x": 1}<|end|>', '{"x": 1}', "", []),
    # Without a tool parser, calls stay content; a preamble on commentary is content.
    (REASONING_ONLY, ANALYSIS + CALL, '{"city": "Paris", "s": "<|x"}', REASONING, []),
    (
        TOOLS,
        "<|channel|>commentary<|message|>Checking.<|end|>" + FINAL,
        "Checking.It is sunny in Paris.",
        "",
        [],
    ),
    # A built-in tool's call on analysis is reasoning, as vLLM treats it.
    (
        TOOLS,
        "<|channel|>analysis to=browser.search<|message|>q<|end|>" + FINAL,
        "It is sunny in Paris.",
        "q",
        [],
    ),
    # A built-in tool's call on commentary, a channel Harmony lacks: dropped, as vLLM drops them.
    (
        TOOLS,
        "<|channel|>commentary to=browser.open<|message|>u<|end|>" + FINAL,
        "It is sunny in Paris.",
        "",
        [],
    ),
    (TOOLS, "<|channel|>other<|message|>u<|end|>" + FINAL, "It is sunny in Paris.", "", []),
    # JSON a grammar forced from the first token (response_format): content.
    (TOOLS, '{"a": 1}', '{"a": 1}', "", []),
    # Not Harmony at all: plain content, however it is cut.
    (TOOLS, "Hello <|end|> there", "Hello <|end|> there", "", []),
    (TOOLS, "<|chan", "<|chan", "", []),
    # Stopped inside the reasoning: what was said.
    (TOOLS, "<|channel|>analysis<|message|>half a thou", "", "half a thou", []),
    (TOOLS, "<|channel|>analysis<|message|>x<|end|><|start|>assi", "", "x", []),
]


@pytest.mark.parametrize(("setup", "text", "content", "reasoning", "calls"), CASES)
def test_channels(
    setup: ParserSetup, text: str, content: str, reasoning: str, calls: list[Call]
) -> None:
    assert whole(setup, text) == (content, reasoning, calls)


@pytest.mark.parametrize(("setup", "text"), [(c[0], c[1]) for c in CASES])
def test_every_one_character_split_agrees(setup: ParserSetup, text: str) -> None:
    check_any_split(setup, text, range(len(text) + 1))


@given(cuts=cut_lists)
def test_any_split_agrees(cuts: list[int]) -> None:
    for setup, text, _, _, _ in CASES:
        check_any_split(setup, text, cuts)


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    two = ANALYSIS + CALL + "<|end|>" + CALL.replace("get_weather", "add")
    single = ParserSetup(tool_parser="openai", tool_names=NAMES, parallel_tool_calls=False)
    assert [c[1] for c in whole(single, two)[2]] == ["get_weather"]
    assert [c[1] for c in whole(TOOLS, two)[2]] == ["get_weather", "add"]


MARKERS = [
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|start|>",
    "analysis",
    "final",
    "commentary",
    " to=functions.add",
    " to=functions.zz",
    "assistant",
    "{",
    "a",
    " ",
]


@given(parts=st.lists(st.sampled_from(MARKERS), max_size=24), cuts=cut_lists)
def test_any_markup_soup_splits_alike(parts: list[str], cuts: list[int]) -> None:
    """Whatever the model writes, streamed and whole agree and nothing raises."""
    check_any_split(TOOLS, "".join(parts), cuts)
