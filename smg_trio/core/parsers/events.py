"""Pure. What the output parsers emit, and the helpers every markup scanner shares.

A parser consumes a choice's generated text in pieces (after detokenize and the stop scanner,
docs/tools-and-reasoning.md §1) and returns `Parsed` values: the content and reasoning text of
that piece, and tool-call fragments. Splitting the text differently never changes what the
pieces add up to (a hypothesis test pins it for every family).
"""

from __future__ import annotations

import abc
from typing import Protocol

import msgspec


class ToolCallStart(msgspec.Struct, frozen=True):
    """A call whose function name is known: `index` counts calls in the choice from 0."""

    index: int
    id: str
    name: str


class ToolCallArguments(msgspec.Struct, frozen=True):
    """A piece of a call's arguments JSON; a call's pieces concatenated are its arguments."""

    index: int
    fragment: str


ToolCallPiece = ToolCallStart | ToolCallArguments


class Parsed(msgspec.Struct, kw_only=True):
    """What one piece of generated text became. Empty strings mean "none"."""

    content: str = ""
    reasoning: str = ""
    calls: list[ToolCallPiece] = msgspec.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.calls)

    def extend(self, other: Parsed) -> None:
        self.content += other.content
        self.reasoning += other.reasoning
        self.calls.extend(other.calls)


class TextParser(Protocol):
    """One choice's incremental parser (reasoning or tool calls)."""

    def feed(self, text: str) -> Parsed:
        """The next piece of generated text; returns what can be said about it now."""
        ...

    def finish(self) -> Parsed:
        """The choice ended: flush what was held back (unfinished markup becomes content)."""
        ...


def partial_tail(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`: the part of
    the text that must be held back because the next piece might complete the marker."""
    first = marker[0]
    start = max(0, len(text) - len(marker) + 1)
    while True:
        at = text.find(first, start)
        if at < 0:
            return 0
        if marker.startswith(text[at:]):
            return len(text) - at
        start = at + 1


def partial_tail_any(text: str, markers: tuple[str, ...]) -> int:
    """`partial_tail` for whichever of `markers` needs the longest hold-back."""
    return max(partial_tail(text, marker) for marker in markers)


class MarkupScanner(abc.ABC):
    """The `TextParser` frame every markup scanner shares: the text that may begin a marker is
    held back (`_held`) and put in front of the next piece; `_scan` reads a piece, `_flush`
    says what the held text and unfinished markup are when the choice ends."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> Parsed:
        out = Parsed()
        text, self._held = self._held + text, ""
        self._scan(text, out)
        return out

    def finish(self) -> Parsed:
        out = Parsed()
        held, self._held = self._held, ""
        self._flush(held, out)
        return out

    @abc.abstractmethod
    def _scan(self, text: str, out: Parsed) -> None:
        """Read one piece (the held text in front), adding to `out`; hold back a partial marker."""

    @abc.abstractmethod
    def _flush(self, held: str, out: Parsed) -> None:
        """The choice ended: what the held text and any unfinished markup come to."""
