"""Pure. Tool calls written as JSON objects `{"name": …, "arguments": {…}}`, and the hermes /
qwen family that wraps each in `<tool_call>…</tool_call>`.

`JsonCallBody` reads one call's JSON as it streams: once `"name"` and the start of
`"arguments"` (or `"parameters"`) have gone by, the call opens and the arguments object is
passed on as the model writes it, character for character, until its closing brace. The
fragments therefore concatenate to exactly the final arguments, whatever the split
(docs/tools-and-reasoning.md §2). A call written in another key order is read whole when it
closes. A name that is not one of the request's tools, or a body that is not a call, makes the
whole markup content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from smg_trio.core.parsers.events import (
    ToolCallArguments,
    ToolCallPiece,
    ToolCallStart,
)

_HEAD = re.compile(
    r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)'
)
_STRUCTURE = re.compile(r'[{}\[\]"\\]')
_HEAD_LIMIT = 4096  # characters of a body searched for its head before waiting for the close


class CallIds:
    """Numbers a choice's calls and names them: `prefix` + the call's index."""

    __slots__ = ("count", "prefix")

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.count = 0

    def next(self, name: str) -> ToolCallStart:
        start = ToolCallStart(self.count, f"{self.prefix}{self.count}", name)
        self.count += 1
        return start


class JsonCallBody:
    """One call's JSON text, fed in pieces; `feed` returns the call's pieces known so far."""

    __slots__ = ("_body", "_depth", "_done", "_end", "_index", "_quoted", "_sent", "_skip")

    def __init__(self) -> None:
        self._body = ""
        self._index = -1  # the call's index once open
        self._sent = 0  # where the unsent arguments text starts, once open
        self._end = -1  # where the arguments object ended, once it has
        self._depth = 0
        self._quoted = False
        self._skip = -1  # the index of a character escaped by a backslash
        self._done = False

    @property
    def opened(self) -> bool:
        return self._index >= 0

    @property
    def text(self) -> str:
        return self._body

    def feed(self, text: str, is_known: Callable[[str], bool], ids: CallIds) -> list[ToolCallPiece]:
        """More of the body. An unknown name raises `NotACall` (the markup becomes content)."""
        self._body += text
        pieces: list[ToolCallPiece] = []
        if self._index < 0:
            if len(self._body) > _HEAD_LIMIT:
                return pieces
            head = _HEAD.match(self._body)
            if head is None:
                return pieces
            name = json.loads(head.group(1))
            if not is_known(name):
                raise NotACall
            start = ids.next(name)
            self._index, self._sent = start.index, head.end()
            pieces.append(start)
        if not self._done:
            self._scan()
            stop = self._end if self._done else len(self._body)
            if stop > self._sent:
                pieces.append(ToolCallArguments(self._index, self._body[self._sent : stop]))
                self._sent = stop
        return pieces

    def _scan(self) -> None:
        """Follow the arguments object from where the last piece left off, to its end."""
        depth, quoted, skip = self._depth, self._quoted, self._skip
        for match in _STRUCTURE.finditer(self._body, self._sent):
            at = match.start()
            if at == skip:  # the character after a backslash
                continue
            char = match.group()
            if quoted:
                if char == "\\":
                    skip = at + 1
                elif char == '"':
                    quoted = False
            elif char == '"':
                quoted = True
            elif char in "{[":
                depth += 1
            elif char in "}]":
                depth -= 1
                if depth == 0:
                    self._done, self._end = True, match.end()
                    break
        self._depth, self._quoted, self._skip = depth, quoted, skip

    def close(self, is_known: Callable[[str], bool], ids: CallIds) -> list[ToolCallPiece]:
        """The markup closed: the call as read whole if it never opened (`NotACall` if it is
        none). An opened call keeps what it streamed."""
        if self._index >= 0:
            return []
        try:
            call = json.loads(self._body)
        except ValueError:
            raise NotACall from None
        if not isinstance(call, dict):
            raise NotACall
        name = call.get("name")
        arguments = call.get("arguments", call.get("parameters"))
        if not isinstance(name, str) or not is_known(name) or arguments is None:
            raise NotACall
        start = ids.next(name)
        self._index = start.index
        return [start, ToolCallArguments(start.index, json.dumps(arguments, ensure_ascii=False))]


class NotACall(Exception):
    """The markup is not a call of one of the request's tools: it is content."""
