"""Pure. Mistral's tool calls in both of its forms (docs/tools-and-reasoning.md §2), as vLLM's
`mistral` parser reads them:

- the older one: `[TOOL_CALLS]` then a JSON array of `{"name", "arguments"}` objects, read by
  `JsonCallSequence` (json_sequences.py);
- the v11+ tokenizers' one: `[TOOL_CALLS]NAME[ARGS]{…}` (or `NAME{…}`), once per call, the
  arguments object streamed as the model writes it.

The first character after the first `[TOOL_CALLS]` tells them apart: `[` or `{` is the older
form. Whitespace just before the marker is held back until then: the v11+ form drops it from
the content (vLLM's v11 path strips it), the older form keeps it (as vLLM's older path does).
A name that is not one of the request's tools makes the markup content; text after the last
call's arguments is dropped, as vLLM drops it.
"""

from __future__ import annotations

import enum
import re
from typing import Final

from smg_trio.core.parsers.events import (
    MarkupScanner,
    Parsed,
    TextParser,
    ToolCallArguments,
    partial_tail,
)
from smg_trio.core.parsers.json_calls import CallIds, PendingMarkup
from smg_trio.core.parsers.json_sequences import JsonCallSequence

TRIGGER: Final = "[TOOL_CALLS]"
ARGS: Final = "[ARGS]"
_STRUCTURE: Final = re.compile(r'[{}\[\]"\\]')


class _State(enum.Enum):
    PROSE = enum.auto()  # before the first marker: content
    FORM = enum.auto()  # just after the first marker: which form is it?
    NAME = enum.auto()  # a v11+ call's name, up to `[ARGS]` or `{`
    ARGS_OPEN = enum.auto()  # after `[ARGS]`, before the arguments' first character
    ARGS = enum.auto()  # inside the arguments
    AFTER = enum.auto()  # after a call: another `[TOOL_CALLS]`, or the end
    OLDER = enum.auto()  # the older form: a JsonCallSequence reads the rest
    LITERAL = enum.auto()  # the markup was no call: everything is content
    DONE = enum.auto()  # the calls ended: the rest is dropped


class ArgumentsFollower:
    """One JSON value fed in pieces, followed to its end through strings and escapes."""

    __slots__ = ("_depth", "_escaped", "_quoted", "object")

    def __init__(self, first: str) -> None:
        self.object = first in "{["  # else the rest of the output is the arguments as written
        self._depth, self._quoted, self._escaped = 0, False, False

    def feed(self, text: str) -> tuple[str, str, bool]:
        """(the value's text in this piece, what follows it, whether it ended)."""
        if not self.object:
            return text, "", False
        depth, quoted, skip = self._depth, self._quoted, 0 if self._escaped else -1
        self._escaped = False
        for match in _STRUCTURE.finditer(text):
            at = match.start()
            if at == skip:
                continue
            char = match.group()
            if quoted:
                if char == "\\":
                    skip = at + 1
                    self._escaped = skip == len(text)
                elif char == '"':
                    quoted = False
            elif char == '"':
                quoted = True
            elif char in "{[":
                depth += 1
            elif char in "}]":
                depth -= 1
                if depth <= 0:
                    self._depth, self._quoted = depth, quoted
                    return text[: at + 1], text[at + 1 :], True
        self._depth, self._quoted = depth, quoted
        return text, "", False


class MistralCalls(MarkupScanner):
    __slots__ = (
        "_args",
        "_gap",
        "_ids",
        "_index",
        "_markup",
        "_name",
        "_older",
        "_parallel",
        "_sent",
        "_state",
        "_tools",
    )

    def __init__(self, tools: frozenset[str], ids: CallIds, *, parallel: bool) -> None:
        super().__init__()
        self._tools, self._ids, self._parallel = tools, ids, parallel
        self._state = _State.PROSE
        self._markup = PendingMarkup(ids)
        self._gap = ""  # whitespace just before the first marker, until the form is known
        self._name = ""
        self._index = -1
        self._sent = False  # the open call has sent some arguments
        self._args = ArgumentsFollower("{")
        self._older: TextParser | None = None

    def _scan(self, text: str, out: Parsed) -> None:
        while text:
            match self._state:
                case _State.PROSE:
                    text = self._prose(text, out)
                case _State.FORM:
                    text = self._form(text, out)
                case _State.NAME:
                    text = self._read_name(text, out)
                case _State.ARGS_OPEN:
                    text = text.lstrip()
                    if text:
                        self._args = ArgumentsFollower(text[0])
                        self._state = _State.ARGS
                case _State.ARGS:
                    text = self._in_args(text, out)
                case _State.AFTER:
                    text = self._after(text)
                case _State.OLDER:
                    assert self._older is not None
                    out.extend(self._older.feed(text))
                    text = ""
                case _State.LITERAL:
                    out.content += text
                    text = ""
                case _State.DONE:
                    text = ""

    def _prose(self, text: str, out: Parsed) -> str:
        at = text.find(TRIGGER)
        if at < 0:
            hold = partial_tail(text, TRIGGER)
            body = text[: len(text) - hold]
            said = body.rstrip()
            out.content += said
            self._held = text[len(said) :]
            return ""
        before = text[:at]
        said = before.rstrip()
        out.content += said
        self._gap = before[len(said) :]
        self._markup.text = self._gap + TRIGGER
        self._state = _State.FORM
        return text[at + len(TRIGGER) :]

    def _form(self, text: str, out: Parsed) -> str:
        stripped = text.lstrip()
        if not stripped:
            self._markup.remember(text)
            return ""
        if stripped[0] in "[{":
            out.content += self._gap
            self._older = JsonCallSequence(
                self._tools, self._ids, parallel=self._parallel, trigger=TRIGGER,
                separators="[,", closer="]",
            )  # fmt: skip
            self._state = _State.OLDER
            return TRIGGER + self._markup.text[len(self._gap) + len(TRIGGER) :] + text
        self._state = _State.NAME
        return text

    def _read_name(self, text: str, out: Parsed) -> str:
        name = self._name + text
        ends = [at for at in (name.find(ARGS), name.find("{")) if at >= 0]
        if ends:
            at = min(ends)
            called = name[:at].strip()
            if called not in self._tools:
                return self._not_a_call(name[:at], out) + name[at:]
            start = self._ids.next(called)
            out.calls.append(start)
            self._index, self._sent, self._name = start.index, False, ""
            self._markup.text = ""
            self._state = _State.ARGS_OPEN
            return name[at + len(ARGS) :] if name.startswith(ARGS, at) else name[at:]
        hold = partial_tail(name, ARGS)
        so_far = name[: len(name) - hold].lstrip()
        core = so_far.rstrip()
        possible = (
            core in self._tools
            if core != so_far
            else any(tool.startswith(core) for tool in self._tools)
        )
        if not possible:
            return self._not_a_call(name, out)
        self._name = name
        return ""

    def _not_a_call(self, markup: str, out: Parsed) -> str:
        self._markup.remember(markup)
        self._name = ""
        self._state = _State.LITERAL if self._markup.give_up(out) else _State.DONE
        return ""

    def _in_args(self, text: str, out: Parsed) -> str:
        taken, rest, ended = self._args.feed(text)
        if taken:
            out.calls.append(ToolCallArguments(self._index, taken))
            self._sent = True
        if ended:
            self._state = _State.AFTER if self._parallel else _State.DONE
        return rest

    def _after(self, text: str) -> str:
        stripped = text.lstrip()
        if stripped.startswith(TRIGGER):
            self._state = _State.NAME
            return stripped[len(TRIGGER) :]
        if stripped and TRIGGER.startswith(stripped):
            self._held = text
        elif stripped:
            self._state = _State.DONE
        return ""

    def _flush(self, held: str, out: Parsed) -> None:
        match self._state:
            case _State.PROSE | _State.LITERAL:
                out.content = held
            case _State.FORM | _State.NAME:
                out.content = self._markup.unfinished(self._name + held)
            case _State.ARGS_OPEN | _State.ARGS:
                if not self._sent:  # `[ARGS]` and nothing after it: vLLM's empty arguments
                    out.calls.append(ToolCallArguments(self._index, "{}"))
            case _State.OLDER:
                assert self._older is not None
                out.extend(self._older.finish())
            case _State.AFTER | _State.DONE:
                pass
