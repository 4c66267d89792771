"""Feeding a parser a text in pieces, and comparing with the whole text parsed at once."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import strategies as st

from smg_trio.core.parsers.events import Parsed, ToolCallArguments, ToolCallStart
from smg_trio.core.parsers.registry import OutputParser, parse_whole
from smg_trio.core.plan import ParserSetup

Call = tuple[str, str, str]  # id, name, arguments


def pieces_of(text: str, cuts: Sequence[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


cut_lists = st.lists(st.integers(min_value=0, max_value=10_000), max_size=40)


def calls_of(parsed: Parsed) -> list[Call]:
    """The calls in `parsed`: each name once, its fragments concatenated."""
    calls: dict[int, list[str]] = {}
    for piece in parsed.calls:
        match piece:
            case ToolCallStart(index=index, id=call_id, name=name):
                assert index not in calls, "a call starts once"
                assert index == len(calls), "calls are numbered in order from 0"
                calls[index] = [call_id, name, ""]
            case ToolCallArguments(index=index, fragment=fragment):
                assert fragment, "no empty fragments"
                calls[index][2] += fragment
    return [(c[0], c[1], c[2]) for c in calls.values()]


def streamed(setup: ParserSetup, pieces: Sequence[str]) -> Parsed:
    parser = OutputParser(setup, "call-")
    out = Parsed()
    for piece in pieces:
        out.extend(parser.feed(piece))
    out.extend(parser.finish())
    return out


def whole(setup: ParserSetup, text: str) -> tuple[str, str, list[Call]]:
    parsed, called = parse_whole(setup, "call-", text)
    assert called == bool(parsed.calls)
    return parsed.content, parsed.reasoning, calls_of(parsed)


def check_any_split(setup: ParserSetup, text: str, cuts: Sequence[int]) -> None:
    """The pieces' parses add up to the whole text's parse, however the text is cut."""
    out = streamed(setup, pieces_of(text, cuts))
    assert (out.content, out.reasoning, calls_of(out)) == whole(setup, text)
