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
    Parsed,
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


class PendingMarkup:
    """The markup read since the trigger, while it may still turn out to be content: until
    the choice's first call opens, markup that proves to be no call is given back as content;
    after one, it is dropped (docs/tools-and-reasoning.md §2)."""

    __slots__ = ("_ids", "text")

    def __init__(self, ids: CallIds) -> None:
        self._ids = ids
        self.text = ""

    def remember(self, text: str) -> None:
        if self._ids.count == 0:
            self.text += text

    def give_up(self, out: Parsed) -> bool:
        """The markup is no (further) call: True if it became content (nothing was called),
        False if it was dropped."""
        literal = self._ids.count == 0
        if literal:
            out.content += self.text
        self.text = ""
        return literal

    def unfinished(self, held: str) -> str:
        """The choice ended inside unopened markup: it and the held-back text are content if
        nothing was called, else nothing."""
        return self.text + held if self._ids.count == 0 else ""


class JsonCallBody:
    """One call's JSON object, fed in pieces: `feed` returns the call's pieces known so far and
    follows the object to its closing brace (`ended`; what came after it is `rest`)."""

    __slots__ = (
        "_args",
        "_args_end",
        "_body",
        "_depth",
        "_end",
        "_index",
        "_quoted",
        "_scanned",
        "_sent",
        "_skip",
    )

    def __init__(self) -> None:
        self._body = ""
        self._index = -1  # the call's index once open
        self._args = -1  # where the arguments object starts, once the call opened
        self._args_end = -1  # where it ended, once it has
        self._sent = 0  # where the unsent arguments text starts, once open
        self._end = -1  # where the whole object ended, once it has
        self._scanned = 0
        self._depth = 0
        self._quoted = False
        self._skip = -1  # the index of a character escaped by a backslash

    @property
    def opened(self) -> bool:
        return self._index >= 0

    @property
    def ended(self) -> bool:
        return self._end >= 0

    @property
    def text(self) -> str:
        """The object's text so far (up to its end once it ended)."""
        return self._body if self._end < 0 else self._body[: self._end]

    @property
    def rest(self) -> str:
        """What was fed after the object's closing brace."""
        return "" if self._end < 0 else self._body[self._end :]

    def feed(self, text: str, is_known: Callable[[str], bool], ids: CallIds) -> list[ToolCallPiece]:
        """More of the body. An unknown name raises `NotACall` (the markup becomes content)."""
        if self._end >= 0:
            self._body += text
            return []
        self._body += text
        pieces: list[ToolCallPiece] = []
        if self._index < 0 and len(self._body) <= _HEAD_LIMIT:
            head = _HEAD.match(self._body)
            if head is not None:
                try:
                    name = json.loads(head.group(1))
                except ValueError:  # an escape JSON does not have
                    raise NotACall from None
                if not is_known(name):
                    raise NotACall
                start = ids.next(name)
                self._index, self._sent = start.index, head.end()
                self._args = head.end()
                pieces.append(start)
        self._scan()
        if self._index >= 0:
            stop = self._args_end if self._args_end >= 0 else len(self._body)
            if self._end >= 0 and self._args_end < 0:
                stop = self._end  # never closed its arguments: up to the object's end
            if stop > self._sent:
                pieces.append(ToolCallArguments(self._index, self._body[self._sent : stop]))
                self._sent = stop
            if self._end < 0 and self._args_end < 0:
                self._forget_sent()
        return pieces

    def _forget_sent(self) -> None:
        """Drop the arguments text that went out: a long argument must not be copied again
        with every piece (positions shift; `_args` may go below 0, it is passed)."""
        cut = self._sent
        if cut:
            self._body = self._body[cut:]
            self._sent = 0
            self._scanned -= cut
            self._skip -= cut
            self._args -= cut

    def _scan(self) -> None:
        """Follow the object from where the last piece left off, to its end."""
        depth, quoted, skip, args = self._depth, self._quoted, self._skip, self._args
        for match in _STRUCTURE.finditer(self._body, self._scanned):
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
                if depth == 1 and self._index >= 0 and at > args and self._args_end < 0:
                    self._args_end = at + 1
                elif depth <= 0:
                    self._end = at + 1
                    break
        self._scanned = len(self._body) if self._end < 0 else self._end
        self._depth, self._quoted, self._skip = depth, quoted, skip

    def close(self, is_known: Callable[[str], bool], ids: CallIds) -> list[ToolCallPiece]:
        """The markup closed: the call as read whole if it never opened (`NotACall` if it is
        none). An opened call keeps what it streamed."""
        if self._index >= 0:
            return []
        try:
            call = json.loads(self._body)
        except (ValueError, RecursionError):  # not JSON, or nested past what json can read
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
