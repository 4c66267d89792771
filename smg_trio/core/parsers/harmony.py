"""Pure. gpt-oss's Harmony output (docs/tools-and-reasoning.md §10): messages, each a header
then `<|message|>` then a body, ended by `<|end|>` (or the stop tokens `<|call|>` /
`<|return|>`, which the engine stops on and the text never shows); the next one opens with
`<|start|>`. The prompt ends with `<|start|>assistant`, so the output opens with the first
header: `<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…`.

A message's header says where its body goes:

- a recipient `to=functions.NAME` (on any channel) naming one of the request's tools, when
  calls are on: a tool call, the body its arguments as the model writes them;
- the `analysis` channel: reasoning (also for a built-in tool's recipient, as vLLM does);
- `final`, `commentary` without a recipient, a function that is not among the tools, and
  (calls off) any other message: content;
- with calls on, a built-in tool's message on `commentary` or a channel Harmony does not have:
  dropped, as vLLM drops them.

Output that does not open like a Harmony header is all content. One parser reads every
channel, so the reasoning and tool-call names (`openai_gptoss`, `openai`, `harmony`) all pick
it (registry.py).
"""

from __future__ import annotations

import enum
import re
from typing import Final

from smg_trio.core.parsers.events import (
    MarkupScanner,
    Parsed,
    ToolCallArguments,
    partial_tail_any,
)
from smg_trio.core.parsers.json_calls import CallIds

START: Final = "<|start|>"
MESSAGE: Final = "<|message|>"
BODY_ENDS: Final = ("<|end|>", "<|call|>", "<|return|>", START)
# What a header may open with: the prompt's `<|start|>assistant` is already said, so the
# first header is `<|channel|>…`; later ones repeat `<|start|>assistant`.
_OPENINGS: Final = (START, "<|channel|>", "assistant", " to=", "to=")
_CHANNEL: Final = re.compile(r"<\|channel\|>\s*([\w.-]+)")
_RECIPIENT: Final = re.compile(r"to=([^\s<]+)")
_HEADER_LIMIT: Final = 1024  # characters of a header before it is taken for plain text
FUNCTIONS: Final = "functions."


class _State(enum.Enum):
    HEADER = enum.auto()
    BODY = enum.auto()
    LITERAL = enum.auto()  # not Harmony: everything is content
    DROPPED = enum.auto()  # a broken header after real messages: the rest is dropped


class _Route(enum.Enum):
    CONTENT = enum.auto()
    REASONING = enum.auto()
    CALL = enum.auto()
    DROP = enum.auto()  # a call dropped by parallel_tool_calls false, or a message vLLM drops


class HarmonyChannels(MarkupScanner):
    """`calls`: tool calls are read (a tool parser was asked for); else their bodies are
    content, as with any other text the client did not ask to be parsed."""

    __slots__ = (
        "_calls",
        "_header",
        "_ids",
        "_index",
        "_parallel",
        "_route",
        "_said",
        "_state",
        "_tools",
    )

    def __init__(
        self, tools: frozenset[str], ids: CallIds, *, parallel: bool, calls: bool = True
    ) -> None:
        super().__init__()
        self._tools, self._ids, self._parallel, self._calls = tools, ids, parallel, calls
        self._state = _State.HEADER
        self._header = ""
        self._route = _Route.CONTENT
        self._index = -1
        self._said = False  # a message has opened: unfinished markup is no longer content

    def _scan(self, text: str, out: Parsed) -> None:
        while text:
            match self._state:
                case _State.HEADER:
                    text = self._read_header(text, out)
                case _State.BODY:
                    text = self._read_body(text, out)
                case _State.LITERAL:
                    out.content += text
                    text = ""
                case _State.DROPPED:
                    text = ""

    def _read_header(self, text: str, out: Parsed) -> str:
        header = self._header + text
        at = header.find(MESSAGE)
        if at < 0:
            if self._plain(header, complete=False):
                return self._not_harmony(header)
            self._header = header
            return ""
        if self._plain(header[:at], complete=True):
            return self._not_harmony(header)
        self._header = ""
        self._said = True
        self._route = self._route_of(header[:at], out)
        self._state = _State.BODY
        return header[at + len(MESSAGE) :]

    def _plain(self, header: str, *, complete: bool) -> bool:
        """The header is no Harmony header. Decided alike for a header seen whole and one
        still growing: a growing one may end in all but the last character of `<|message|>`."""
        if len(header) > _HEADER_LIMIT + (0 if complete else len(MESSAGE) - 1):
            return True
        if self._said:
            return False
        return not any(
            header.startswith(o) or (not complete and o.startswith(header)) for o in _OPENINGS
        )

    def _not_harmony(self, text: str) -> str:
        """Plain text opening the output is content; a broken header after real messages
        ends the parse (the rest is dropped)."""
        self._header = ""
        self._state = _State.DROPPED if self._said else _State.LITERAL
        return "" if self._said else text

    def _route_of(self, header: str, out: Parsed) -> _Route:
        channel = _CHANNEL.search(header)
        recipient = _RECIPIENT.search(header)
        name = recipient.group(1) if recipient is not None else ""
        if self._calls and name.startswith(FUNCTIONS) and name[len(FUNCTIONS) :] in self._tools:
            if self._ids.count and not self._parallel:
                return _Route.DROP
            start = self._ids.next(name[len(FUNCTIONS) :])
            self._index = start.index
            out.calls.append(start)
            return _Route.CALL
        said_on = None if channel is None else channel.group(1)
        if said_on == "analysis":
            return _Route.REASONING
        if said_on == "final" or (said_on == "commentary" and not name) or not self._calls:
            return _Route.CONTENT
        if name.startswith(FUNCTIONS):  # a function that is not among the tools
            return _Route.CONTENT
        return _Route.DROP  # a built-in tool's call, another channel: vLLM drops it too

    def _read_body(self, text: str, out: Parsed) -> str:
        at = text.find("<|")
        while at >= 0:
            for end in BODY_ENDS:
                if text.startswith(end, at):
                    self._say(text[:at], out)
                    self._state = _State.HEADER
                    return text[at:] if end == START else text[at + len(end) :]
            at = text.find("<|", at + 2)
        hold = partial_tail_any(text, BODY_ENDS) if "<" in text[-10:] else 0
        self._say(text[: len(text) - hold], out)
        self._held = text[len(text) - hold :]
        return ""

    def _say(self, body: str, out: Parsed) -> None:
        if not body:
            return
        match self._route:
            case _Route.CONTENT:
                out.content += body
            case _Route.REASONING:
                out.reasoning += body
            case _Route.CALL:
                out.calls.append(ToolCallArguments(self._index, body))
            case _Route.DROP:
                pass

    def _flush(self, held: str, out: Parsed) -> None:
        match self._state:
            case _State.BODY:
                self._say(held, out)
            case _State.HEADER:
                if not self._said:
                    out.content = self._header + held
                self._header = ""
            case _State.LITERAL:
                out.content = held
            case _State.DROPPED:
                pass
