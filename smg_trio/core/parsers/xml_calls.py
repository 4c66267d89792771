"""Pure. `qwen3_coder` tool calls (Qwen3-Coder's XML-ish markup):

    <tool_call>
    <function=NAME>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Text before the first call is content, without the newline the template puts before
`<tool_call>` (as vLLM 0.32 reads it). The arguments are the JSON object of the parameters,
each value a string with one wrapping newline trimmed (vLLM 0.32's qwen3 parser converts no
types either), and stream as they arrive: `{"city": "` when a parameter opens, its value's
characters JSON-escaped as the model writes them, `"` when it closes, `}` with the function,
so the fragments concatenate to `json.dumps` of the parameters. An unknown function name makes
the markup content; text between and after calls is dropped (docs/tools-and-reasoning.md §2).
"""

from __future__ import annotations

import enum
import json
from typing import Final

from smg_trio.core.parsers.events import MarkupScanner, Parsed, ToolCallArguments, partial_tail
from smg_trio.core.parsers.json_calls import CallIds

CALL_START: Final = "<tool_call>"
CALL_END: Final = "</tool_call>"
FUNCTION_START: Final = "<function="
FUNCTION_END: Final = "</function>"
PARAMETER_START: Final = "<parameter="
PARAMETER_END: Final = "</parameter>"


class _State(enum.Enum):
    OUTSIDE = enum.auto()
    PREAMBLE = enum.auto()  # after <tool_call>, before <function=
    NAME = enum.auto()  # the function name, up to ">"
    BODY = enum.auto()  # between parameters
    PARAMETER_NAME = enum.auto()
    VALUE = enum.auto()
    LITERAL = enum.auto()  # an unknown function: content up to </tool_call>
    SKIP = enum.auto()  # a call dropped by parallel_tool_calls false


_MARKERS: Final = {
    _State.OUTSIDE: (CALL_START,),
    _State.PREAMBLE: (FUNCTION_START, CALL_END),
    _State.NAME: (">",),
    _State.BODY: (PARAMETER_START, FUNCTION_END),
    _State.PARAMETER_NAME: (">",),
    _State.VALUE: (PARAMETER_END,),
    _State.LITERAL: (CALL_END,),
    _State.SKIP: (CALL_END,),
}


# States whose text's last newline before the next marker is markup, not text (vLLM's rule).
_FRAMED: Final = frozenset({_State.VALUE, _State.OUTSIDE})


def _escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


class XmlCalls(MarkupScanner):
    """Qwen3-Coder's calls, any number (`parallel`), else only the first."""

    __slots__ = (
        "_ids",
        "_index",
        "_name",
        "_parallel",
        "_params",
        "_raw",
        "_state",
        "_tools",
        "_value_sent",
    )

    def __init__(self, tools: frozenset[str], ids: CallIds, *, parallel: bool) -> None:
        super().__init__()
        self._tools, self._ids, self._parallel = tools, ids, parallel
        self._state = _State.OUTSIDE
        self._name = ""  # the function or parameter name being read
        self._raw = ""  # the call's markup so far, until it opens
        self._index = -1
        self._params = 0  # parameters opened in the current call
        self._value_sent = False  # the current value sent a character (its first "\n" dropped)

    def _scan(self, text: str, out: Parsed) -> None:
        while text:
            markers = _MARKERS[self._state]
            found = [(text.find(m), m) for m in markers]
            hits = [(at, m) for at, m in found if at >= 0]
            if not hits:
                hold = max(partial_tail(text, m) for m in markers)
                cut = len(text) - hold
                if self._state in _FRAMED and cut and text[cut - 1] == "\n":
                    hold += 1  # it may be a framing newline: wait for what follows
                self._take(text[: len(text) - hold], out)
                self._held = text[len(text) - hold :]
                break
            at, marker = min(hits)
            piece = text[:at]
            if self._state in _FRAMED and piece.endswith("\n"):
                piece = piece[:-1]  # the newline before </parameter> or <tool_call> is framing
            self._take(piece, out)
            text = text[at + len(marker) :]
            self._advance(marker, out)

    def _dropped(self) -> bool:
        return self._ids.count > 0

    def _take(self, piece: str, out: Parsed) -> None:
        if not piece:
            return
        match self._state:
            case _State.OUTSIDE:
                if not self._dropped():
                    out.content += piece
            case _State.PREAMBLE | _State.NAME:
                self._raw += piece
                if self._state is _State.NAME:
                    self._name += piece
            case _State.PARAMETER_NAME:
                self._name += piece
            case _State.VALUE:
                if not self._value_sent and piece.startswith("\n"):
                    piece = piece[1:]
                self._value_sent = True
                if piece:
                    out.calls.append(ToolCallArguments(self._index, _escaped(piece)))
            case _State.LITERAL:
                out.content += piece
            case _State.BODY:
                pass

    def _advance(self, marker: str, out: Parsed) -> None:
        """`marker` was found in the current state."""
        match self._state:
            case _State.OUTSIDE:
                skip = self._dropped() and not self._parallel
                self._state = _State.SKIP if skip else _State.PREAMBLE
                self._raw = marker
            case _State.PREAMBLE if marker == CALL_END:
                self._state = _State.OUTSIDE
            case _State.PREAMBLE:
                self._raw += marker
                self._state, self._name = _State.NAME, ""
            case _State.NAME:
                name = self._name.strip()
                if name not in self._tools:
                    out.content += self._raw + marker
                    self._state = _State.LITERAL
                    return
                start = self._ids.next(name)
                self._index, self._params = start.index, 0
                out.calls.extend((start, ToolCallArguments(start.index, "{")))
                self._state = _State.BODY
            case _State.BODY if marker == FUNCTION_END:
                out.calls.append(ToolCallArguments(self._index, "}"))
                self._state = _State.OUTSIDE
            case _State.BODY:
                self._state, self._name = _State.PARAMETER_NAME, ""
            case _State.PARAMETER_NAME:
                lead = ", " if self._params else ""
                key = json.dumps(self._name.strip(), ensure_ascii=False)
                out.calls.append(ToolCallArguments(self._index, f'{lead}{key}: "'))
                self._params += 1
                self._state, self._value_sent = _State.VALUE, False
            case _State.VALUE:
                out.calls.append(ToolCallArguments(self._index, '"'))
                self._state = _State.BODY
            case _State.LITERAL:
                out.content += marker
                self._state = _State.OUTSIDE
            case _State.SKIP:
                self._state = _State.OUTSIDE

    def _flush(self, held: str, out: Parsed) -> None:
        """An unfinished call keeps what it streamed; unopened markup is content."""
        match self._state:
            case _State.OUTSIDE:
                if not self._dropped():
                    out.content = held
            case _State.PREAMBLE | _State.NAME:
                if not self._dropped():
                    out.content = self._raw + held
            case _State.LITERAL:
                out.content = held
            case _:
                pass
