"""Pure. Calls written as bare JSON objects one after another: `llama3_json` (the output is
`{"name": …, "parameters": {…}}` objects separated by `;`, optionally after `<|python_tag|>`)
and `mistral` (`[TOOL_CALLS]` then a JSON array of calls; text before it is content).

Each object streams through `JsonCallBody` (json_calls.py). Llama's calls must open the
output, as vLLM's streaming parser requires: anything else is content. The first object that
is no call of the request's tools turns the whole markup into content; after a call, text
that does not continue the sequence is dropped (docs/tools-and-reasoning.md §2).
"""

from __future__ import annotations

import enum

from smg_trio.core.parsers.events import MarkupScanner, Parsed, partial_tail
from smg_trio.core.parsers.json_calls import CallIds, JsonCallBody, NotACall, PendingMarkup


class _State(enum.Enum):
    PROSE = enum.auto()  # before the trigger: content
    BETWEEN = enum.auto()  # after the trigger, between objects
    BODY = enum.auto()  # inside an object
    LITERAL = enum.auto()  # the markup was no call: everything is content
    DONE = enum.auto()  # the sequence ended: the rest is dropped


class JsonCallSequence(MarkupScanner):
    """`trigger` then JSON call objects separated by `separators`, until `closer` (if any).

    `leading`: the trigger (or the first object) must open the output, else it is all content.
    """

    __slots__ = (
        "_body",
        "_closer",
        "_ids",
        "_leading",
        "_markup",
        "_parallel",
        "_separators",
        "_started",
        "_state",
        "_tools",
        "_trigger",
    )

    def __init__(
        self,
        tools: frozenset[str],
        ids: CallIds,
        *,
        parallel: bool,
        trigger: str,
        separators: str,
        closer: str = "",
        leading: bool = False,
    ) -> None:
        super().__init__()
        self._tools, self._ids, self._parallel = tools, ids, parallel
        self._trigger, self._separators, self._closer = trigger, separators, closer
        self._leading = leading
        self._state = _State.PROSE
        self._markup = PendingMarkup(ids)
        self._started = False  # (leading) the output's first non-space text has been seen
        self._body = JsonCallBody()

    def _scan(self, text: str, out: Parsed) -> None:
        while text:
            match self._state:
                case _State.PROSE:
                    text = self._prose(text, out)
                case _State.BETWEEN:
                    text = self._between(text, out)
                case _State.BODY:
                    text = self._in_body(text, out)
                case _State.LITERAL:
                    out.content += text
                    text = ""
                case _State.DONE:
                    text = ""

    def _prose(self, text: str, out: Parsed) -> str:
        if self._leading:
            stripped = text.lstrip()
            if not stripped:
                self._held = text
                return ""
            if stripped.startswith(self._trigger) or stripped[0] == "{":
                self._markup.text = text[: len(text) - len(stripped)]
                self._state = _State.BETWEEN
                if stripped.startswith(self._trigger):
                    self._markup.text += self._trigger
                    return stripped[len(self._trigger) :]
                return stripped
            if self._trigger.startswith(stripped):
                self._held = text
                return ""
            self._state = _State.LITERAL
            return text
        at = text.find(self._trigger)
        if at < 0:
            hold = partial_tail(text, self._trigger)
            out.content += text[: len(text) - hold]
            self._held = text[len(text) - hold :]
            return ""
        out.content += text[:at]
        self._markup.text = self._trigger
        self._state = _State.BETWEEN
        return text[at + len(self._trigger) :]

    def _between(self, text: str, out: Parsed) -> str:
        skipped = len(text) - len(text.lstrip(self._separators + " \t\r\n"))
        self._markup.remember(text[:skipped])
        text = text[skipped:]
        if not text:
            return ""
        if text[0] == "{":
            self._body = JsonCallBody()
            self._state = _State.BODY
            return text
        if self._closer and text[0] == self._closer:
            self._state = _State.DONE
            return ""
        self._not_a_call(out)
        return text

    def _in_body(self, text: str, out: Parsed) -> str:
        body = self._body
        try:
            out.calls.extend(body.feed(text, self._tools.__contains__, self._ids))
            if not body.ended:
                return ""
            out.calls.extend(body.close(self._tools.__contains__, self._ids))
        except NotACall:
            self._markup.remember(body.text)
            self._not_a_call(out)
            return body.rest
        self._markup.text = ""
        self._state = _State.BETWEEN if self._parallel else _State.DONE
        return body.rest

    def _not_a_call(self, out: Parsed) -> None:
        self._state = _State.LITERAL if self._markup.give_up(out) else _State.DONE

    def _flush(self, held: str, out: Parsed) -> None:
        match self._state:
            case _State.PROSE | _State.LITERAL:
                out.content = held
            case _State.BODY:
                try:
                    out.calls.extend(self._body.close(self._tools.__contains__, self._ids))
                except NotACall:
                    self._markup.remember(self._body.text)
                    self._not_a_call(out)
            case _State.BETWEEN:
                out.content = self._markup.unfinished(held)
            case _State.DONE:
                pass
