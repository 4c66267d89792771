"""llama3_json, mistral and pythonic tool calls (docs/tools-and-reasoning.md §2)."""

from __future__ import annotations

import pytest
from hypothesis import given

from smg_trio.core.plan import ParserSetup
from tests.core.parsers.splits import Call, check_any_split, cut_lists, whole

NAMES = frozenset({"f", "g"})
LLAMA = ParserSetup(tool_parser="llama3_json", tool_names=NAMES)
MISTRAL = ParserSetup(tool_parser="mistral", tool_names=NAMES)
PYTHONIC = ParserSetup(tool_parser="pythonic", tool_names=NAMES)

CASES: list[tuple[ParserSetup, str, str | None, list[Call]]] = [
    (
        LLAMA,
        '<|python_tag|>{"name": "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {}}',
        "",
        [("call-0", "f", '{"a": 1}'), ("call-1", "g", "{}")],
    ),
    (LLAMA, ' {"name": "f", "arguments": {"s": "}{"}}', "", [("call-0", "f", '{"s": "}{"}')]),
    (LLAMA, ' {"answer": 42} is JSON, not a call', ' {"answer": 42} is JSON, not a call', []),
    (LLAMA, 'Hello {"name": "f"}', 'Hello {"name": "f"}', []),  # calls must open the output
    (LLAMA, '{"name": "zzz", "parameters": {}}', '{"name": "zzz", "parameters": {}}', []),
    (LLAMA, '{"name": "f", "parameters": {"a": [1', "", [("call-0", "f", '{"a": [1')]),
    (
        MISTRAL,
        'Sure [TOOL_CALLS] [{"name": "f", "arguments": {"a": 1}}, '
        '{"name": "g", "arguments": {"b": "]"}}] trailing',
        "Sure ",
        [("call-0", "f", '{"a": 1}'), ("call-1", "g", '{"b": "]"}')],
    ),
    (MISTRAL, "[TOOL_CALLS] nope", "[TOOL_CALLS] nope", []),
    (MISTRAL, '[TOOL_CALLS][{"name": "zzz", "arguments": {}}]', None, []),
    (MISTRAL, "plain [TOOL_C", "plain [TOOL_C", []),
    # The v11+ form, `[TOOL_CALLS]NAME[ARGS]{…}` per call (vLLM's mistral parser reads both).
    (
        MISTRAL,
        'Sure.\n\n[TOOL_CALLS]f[ARGS]{"a": 1}[TOOL_CALLS]g[ARGS]{"b": "}{\\"]"} trailing',
        "Sure.",
        [("call-0", "f", '{"a": 1}'), ("call-1", "g", '{"b": "}{\\"]"}')],
    ),
    (MISTRAL, '[TOOL_CALLS] f {"a": [1, 2]}', "", [("call-0", "f", '{"a": [1, 2]}')]),
    (MISTRAL, "[TOOL_CALLS]zzz[ARGS]{}", None, []),
    (MISTRAL, "Hi [TOOL_CALLS]hello there", None, []),
    (MISTRAL, '[TOOL_CALLS]f[ARGS]{"a": "x', "", [("call-0", "f", '{"a": "x')]),
    (MISTRAL, "[TOOL_CALLS]f[ARGS]", "", [("call-0", "f", "{}")]),
    (MISTRAL, "Done. \n", None, []),
    (
        MISTRAL,
        '[TOOL_CALLS]f[ARGS]{"a": 1} [TOOL_CALLS]zzz[ARGS]{}',
        "",
        [("call-0", "f", '{"a": 1}')],
    ),
    (
        PYTHONIC,
        '[f(a=1, b="x]("), g()]',
        "",
        [("call-0", "f", '{"a": 1, "b": "x]("}'), ("call-1", "g", "{}")],
    ),
    (
        PYTHONIC,
        ' [f(a=True, b=None, c=[1, {"k": 2.5}])]',
        "",
        [("call-0", "f", '{"a": true, "b": null, "c": [1, {"k": 2.5}]}')],
    ),
    (PYTHONIC, "hi [f()]", "hi [f()]", []),
    (PYTHONIC, "[f(1)]", "[f(1)]", []),  # positional: no call
    (PYTHONIC, "[zz()]", "[zz()]", []),
    (PYTHONIC, "[f(a=1", "[f(a=1", []),  # unclosed
    (PYTHONIC, "[f(a=x)]", "[f(a=x)]", []),  # not a literal
]


@pytest.mark.parametrize(("setup", "text", "content", "calls"), CASES)
def test_calls_and_content(
    setup: ParserSetup, text: str, content: str | None, calls: list[Call]
) -> None:
    assert whole(setup, text) == (text if content is None else content, "", calls)


@pytest.mark.parametrize(("setup", "text"), [(c[0], c[1]) for c in CASES])
def test_every_one_character_split_agrees(setup: ParserSetup, text: str) -> None:
    check_any_split(setup, text, range(len(text) + 1))


@given(cuts=cut_lists)
def test_any_split_agrees(cuts: list[int]) -> None:
    for setup, text, _, _ in CASES:
        check_any_split(setup, text, cuts)


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    for setup, text in (
        (LLAMA, CASES[0][1]),
        (MISTRAL, CASES[6][1]),
        (MISTRAL, CASES[10][1]),
        (PYTHONIC, CASES[18][1]),
    ):
        single = ParserSetup(
            tool_parser=setup.tool_parser, tool_names=NAMES, parallel_tool_calls=False
        )
        assert len(whole(single, text)[2]) == 1


FORCED_REQUIRED = ParserSetup(tool_parser="tool_choice=required", tool_names=NAMES)
FORCED_NAMED = ParserSetup(tool_parser="tool_choice=function", forced_function="f")
FORCED = [
    (
        FORCED_REQUIRED,
        '[{"name": "f", "parameters": {"a": 1}}, {"name": "g", "parameters": {}}]',
        [("call-0", "f", '{"a": 1}'), ("call-1", "g", "{}")],
    ),
    (FORCED_NAMED, '{"a": [1, 2]}', [("call-0", "f", '{"a": [1, 2]}')]),
    (FORCED_NAMED, "", [("call-0", "f", "")]),
]


@pytest.mark.parametrize(("setup", "text", "calls"), FORCED)
def test_forced_calls_read_the_schema_made_json(
    setup: ParserSetup, text: str, calls: list[Call]
) -> None:
    """tool_choice "required" / named (docs/tools-and-reasoning.md §5): vLLM's shapes."""
    assert whole(setup, text) == ("", "", calls)
    check_any_split(setup, text, range(len(text) + 1))
