"""Pure. Calls wrapped in start/end tags around a JSON object: hermes / qwen
(`<tool_call>{"name": …, "arguments": {…}}</tool_call>`), one call per pair of tags.

Text before the first call is content; text between and after calls is dropped, as vLLM's
non-streaming hermes parser drops it. Markup that is no call of the request's tools
(unknown name, not JSON) is content, tags included. An unterminated call at the end of the
choice is a call if it opened or if its JSON is whole, else content
(docs/tools-and-reasoning.md §2).
"""

from __future__ import annotations

import enum

from smg_trio.core.parsers.events import MarkupScanner, Parsed, partial_tail
from smg_trio.core.parsers.json_calls import CallIds, JsonCallBody, NotACall


class _State(enum.Enum):
    OUTSIDE = enum.auto()
    BODY = enum.auto()  # inside the tags, reading a call
    LITERAL = enum.auto()  # inside the tags of markup that is content
    SKIP = enum.auto()  # inside the tags of a call dropped by parallel_tool_calls false


class TaggedJsonCalls(MarkupScanner):
    """`start` JSON `end`, any number of times (`parallel`), else only the first call."""

    __slots__ = ("_body", "_end", "_ids", "_parallel", "_start", "_state", "_tools")

    def __init__(
        self, tools: frozenset[str], ids: CallIds, *, parallel: bool, start: str, end: str
    ) -> None:
        super().__init__()
        self._tools, self._ids, self._parallel = tools, ids, parallel
        self._start, self._end = start, end
        self._state = _State.OUTSIDE
        self._body = JsonCallBody()

    def _scan(self, text: str, out: Parsed) -> None:
        while text:
            marker = self._start if self._state == _State.OUTSIDE else self._end
            at = text.find(marker)
            if at < 0:
                hold = partial_tail(text, marker)
                piece, self._held = (text[:-hold], text[-hold:]) if hold else (text, "")
                self._take(piece, out)
                break
            self._take(text[:at], out)
            text = text[at + len(marker) :]
            if self._state == _State.OUTSIDE:
                self._open()
            else:
                self._close(out)

    def _open(self) -> None:
        done = self._ids.count > 0
        self._state = _State.SKIP if done and not self._parallel else _State.BODY
        self._body = JsonCallBody()

    def _take(self, piece: str, out: Parsed) -> None:
        """Text that is not a marker, in the current state."""
        if not piece:
            return
        match self._state:
            case _State.OUTSIDE:
                if self._ids.count == 0:
                    out.content += piece
            case _State.BODY:
                try:
                    out.calls.extend(self._body.feed(piece, self._tools.__contains__, self._ids))
                except NotACall:
                    self._state = _State.LITERAL
                    out.content += self._start + self._body.text
            case _State.LITERAL:
                out.content += piece

    def _close(self, out: Parsed) -> None:
        if self._state == _State.BODY:
            try:
                out.calls.extend(self._body.close(self._tools.__contains__, self._ids))
            except NotACall:
                out.content += self._start + self._body.text + self._end
        elif self._state == _State.LITERAL:
            out.content += self._end
        self._state = _State.OUTSIDE

    def _flush(self, held: str, out: Parsed) -> None:
        match self._state:
            case _State.OUTSIDE:
                if self._ids.count == 0:
                    out.content = held
            case _State.BODY:  # a partial end tag is not part of the JSON
                try:
                    out.calls.extend(self._body.close(self._tools.__contains__, self._ids))
                except NotACall:
                    out.content = self._start + self._body.text + held
            case _State.LITERAL:
                out.content = held
        self._state = _State.OUTSIDE
