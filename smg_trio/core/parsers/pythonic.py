"""Pure. `pythonic` tool calls (Llama 3.2/4 style): the output is a Python list of calls,
`[get_weather(city="Paris"), add(a=1, b=2)]`, keyword arguments with literal values.

A list is read whole when its closing bracket arrives (Python literals are not JSON, so its
arguments cannot be streamed as the model writes them) and each call's arguments go out as
one JSON fragment. Output that does not open with `[`, a list that does not parse, a
positional argument, a value that is not a literal or a name that is not one of the tools:
content, all of it. Text after the list is dropped (docs/tools-and-reasoning.md §2).
"""

from __future__ import annotations

import ast
import enum
import json
import re

from smg_trio.core.parsers.events import Parsed, ToolCallArguments, ToolCallPiece
from smg_trio.core.parsers.json_calls import CallIds

_STRUCTURE = re.compile(r"[\[\]()'\"\\]")


class _State(enum.Enum):
    OPENING = enum.auto()  # only whitespace so far
    LIST = enum.auto()  # inside the list
    CONTENT = enum.auto()
    DONE = enum.auto()


class PythonicCalls:
    """A Python list of calls opening the output."""

    __slots__ = (
        "_depth",
        "_ids",
        "_parallel",
        "_quote",
        "_scanned",
        "_skip",
        "_state",
        "_text",
        "_tools",
    )

    def __init__(self, tools: frozenset[str], ids: CallIds, *, parallel: bool) -> None:
        self._tools, self._ids, self._parallel = tools, ids, parallel
        self._state = _State.OPENING
        self._text = ""
        self._scanned = 0
        self._depth = 0
        self._quote = ""
        self._skip = -1

    def feed(self, text: str) -> Parsed:
        match self._state:
            case _State.CONTENT:
                return Parsed(content=text)
            case _State.DONE:
                return Parsed()
            case _State.OPENING:
                self._text += text
                stripped = self._text.lstrip()
                if not stripped:
                    return Parsed()
                if stripped[0] != "[":
                    self._state = _State.CONTENT
                    return Parsed(content=self._text)
                self._state = _State.LIST
            case _State.LIST:
                self._text += text
        end = self._scan()
        if end < 0:
            return Parsed()
        self._state = _State.DONE
        calls = self._calls(self._text[:end])
        if calls is None:
            self._state = _State.CONTENT
            return Parsed(content=self._text)
        return Parsed(calls=calls)

    def _scan(self) -> int:
        """Where the list's closing bracket ends, or -1 while it is open."""
        depth, quote, skip = self._depth, self._quote, self._skip
        for match in _STRUCTURE.finditer(self._text, self._scanned):
            at, char = match.start(), match.group()
            if at == skip:
                continue
            if quote:
                if char == "\\":
                    skip = at + 1
                elif char == quote:
                    quote = ""
            elif char in "'\"":
                quote = char
            elif char in "[(":
                depth += 1
            elif char in "])":
                depth -= 1
                if depth == 0:
                    return at + 1
        self._scanned = len(self._text)
        self._depth, self._quote, self._skip = depth, quote, skip
        return -1

    def _calls(self, source: str) -> list[ToolCallPiece] | None:
        try:
            tree = ast.parse(source.strip(), mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        if not isinstance(tree, ast.List) or not tree.elts:
            return None
        found: list[tuple[str, str]] = []
        for node in tree.elts:
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                return None
            if node.args or node.func.id not in self._tools:
                return None
            try:
                arguments = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
                encoded = json.dumps(arguments, ensure_ascii=False)
            except (ValueError, TypeError, SyntaxError, RecursionError):
                return None
            found.append((node.func.id, encoded))
        pieces: list[ToolCallPiece] = []
        for name, encoded in found if self._parallel else found[:1]:
            start = self._ids.next(name)
            pieces.extend((start, ToolCallArguments(start.index, encoded)))
        return pieces

    def finish(self) -> Parsed:
        if self._state in (_State.OPENING, _State.LIST):
            self._state = _State.DONE
            return Parsed(content=self._text)  # an unclosed list is no call
        return Parsed()
