"""Pure. DeepSeek V3's tool calls, written in its special tokens:

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    ARGUMENTS
    ```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>

Text before the calls block is content. Each call opens when its name line is complete and its
arguments stream as the model writes them up to the closing fence (vLLM passes them on as
written, too). A name that is not one of the tools makes the markup content; text after the
block is dropped (docs/tools-and-reasoning.md §2). The markers are special tokens: the router
keeps them in the text for this parser (registry.KEEPS_SPECIAL_TOKENS).
"""

from __future__ import annotations

import enum
from typing import Final

from smg_trio.core.parsers.events import MarkupScanner, Parsed, ToolCallArguments, partial_tail
from smg_trio.core.parsers.json_calls import CallIds, PendingMarkup

CALLS_BEGIN: Final = "<｜tool▁calls▁begin｜>"
CALLS_END: Final = "<｜tool▁calls▁end｜>"
CALL_BEGIN: Final = "<｜tool▁call▁begin｜>"
SEPARATOR: Final = "<｜tool▁sep｜>"
ARGUMENTS_BEGIN: Final = "\n```json\n"
ARGUMENTS_END: Final = "\n```<｜tool▁call▁end｜>"


class _State(enum.Enum):
    PROSE = enum.auto()
    BETWEEN = enum.auto()  # inside the block, between calls
    HEAD = enum.auto()  # a call's type, separator and name
    ARGUMENTS = enum.auto()
    LITERAL = enum.auto()  # the markup was no call: content from here on
    DONE = enum.auto()


class DeepSeekV3Calls(MarkupScanner):
    __slots__ = ("_head", "_ids", "_index", "_markup", "_parallel", "_state", "_tools")

    def __init__(self, tools: frozenset[str], ids: CallIds, *, parallel: bool) -> None:
        super().__init__()
        self._tools, self._ids, self._parallel = tools, ids, parallel
        self._state = _State.PROSE
        self._head = ""
        self._markup = PendingMarkup(ids)
        self._index = -1

    def _scan(self, text: str, out: Parsed) -> None:
        while text:
            state = self._state
            if state is _State.LITERAL:
                out.content += text
                break
            if state is _State.DONE:
                break
            marker = {
                _State.PROSE: CALLS_BEGIN,
                _State.BETWEEN: CALL_BEGIN,
                _State.HEAD: ARGUMENTS_BEGIN,
                _State.ARGUMENTS: ARGUMENTS_END,
            }[state]
            at = text.find(marker)
            if at < 0:
                hold = partial_tail(text, marker)
                if state is _State.BETWEEN:
                    hold = max(hold, partial_tail(text, CALLS_END))
                self._take(text[: len(text) - hold], out)
                self._held = text[len(text) - hold :]
                break
            self._take(text[:at], out)
            self._advance(marker, out)
            text = text[at + len(marker) :]

    def _take(self, piece: str, out: Parsed) -> None:
        match self._state:
            case _State.PROSE:
                out.content += piece
            case _State.BETWEEN:
                if CALLS_END in piece:
                    self._state = _State.DONE
                self._markup.remember(piece)
            case _State.HEAD:
                self._head += piece
                self._markup.remember(piece)
            case _State.ARGUMENTS:
                if piece:
                    out.calls.append(ToolCallArguments(self._index, piece))
            case _:
                pass

    def _advance(self, marker: str, out: Parsed) -> None:
        """`marker` was found in the current state."""
        self._markup.remember(marker)
        match self._state:
            case _State.PROSE:
                self._state = _State.BETWEEN
            case _State.BETWEEN:
                done = self._ids.count > 0 and not self._parallel
                self._state = _State.DONE if done else _State.HEAD
                self._head = ""
            case _State.HEAD:
                _, sep, name = self._head.partition(SEPARATOR)
                if not sep or name not in self._tools:
                    self._not_a_call(out)
                    return
                start = self._ids.next(name)
                self._index = start.index
                out.calls.append(start)
                self._markup.text = ""
                self._state = _State.ARGUMENTS
            case _State.ARGUMENTS:
                self._state = _State.BETWEEN
            case _:
                pass

    def _not_a_call(self, out: Parsed) -> None:
        self._state = _State.LITERAL if self._markup.give_up(out) else _State.DONE

    def _flush(self, held: str, out: Parsed) -> None:
        match self._state:
            case _State.PROSE | _State.LITERAL:
                out.content = held
            case _State.BETWEEN | _State.HEAD:
                out.content = self._markup.unfinished(held)
            case _State.ARGUMENTS:
                pass  # an opened call keeps what it streamed
            case _State.DONE:
                pass
