"""Pure. One response's output items as they stream: which item is open, the events that open,
feed and close it, and the items already done (docs/client-apis.md §3.2).

At most one item is open. Text of another kind (reasoning after content, a new call) closes
it first, so items follow the order the model produced them in. A delta is the open item's
pre-encoded event prefix, the JSON-encoded text and a constant tail: nothing else per token.
Item ids name the request and the item's place (`msg_<rid>_0`, `rs_<rid>_1`, `fc_<rid>_2`).
"""

from __future__ import annotations

from typing import Final, Literal

from smg_trio.wire.openai_responses import JSON_ENCODER
from smg_trio.wire.responses_objects import (
    FunctionCallOutput,
    OutputItem,
    OutputMessage,
    OutputTextPart,
    ReasoningOutput,
    ReasoningTextPart,
    event,
    event_prefix,
)

Kind = Literal["message", "reasoning", "function_call"]
_ID_PREFIX: Final[dict[Kind, str]] = {"message": "msg", "reasoning": "rs", "function_call": "fc"}
_TEXT_TAIL: Final = b',"logprobs":[]}\n\n'
_TAIL: Final = b"}\n\n"
_encode = JSON_ENCODER.encode


class OpenItem:
    """The item being streamed: its kind, id, place, text so far and delta prefix."""

    __slots__ = ("call_id", "id", "kind", "name", "output_index", "parts", "prefix", "tail")

    def __init__(self, kind: Kind, item_id: str, output_index: int) -> None:
        self.kind = kind
        self.id = item_id
        self.output_index = output_index
        self.parts: list[str] = []
        self.call_id = ""
        self.name = ""
        self.prefix = b""
        self.tail = _TAIL

    def text(self) -> str:
        return "".join(self.parts)


class ResponseItems:
    """The output items of one response, streamed or built whole."""

    __slots__ = ("_request_id", "done", "open")

    def __init__(self, request_id: str) -> None:
        self._request_id = request_id
        self.done: list[OutputItem] = []
        self.open: OpenItem | None = None

    def content(self, text: str) -> bytes:
        item, out = self._ensure("message")
        return out + self._delta(item, text)

    def reasoning(self, text: str) -> bytes:
        item, out = self._ensure("reasoning")
        return out + self._delta(item, text)

    def call(self, call_id: str, name: str) -> bytes:
        out = self.close("completed")
        item = self._start("function_call")
        item.call_id, item.name = call_id, name
        added = FunctionCallOutput(
            id=item.id, call_id=call_id, name=name, arguments="", status="in_progress"
        )
        item.prefix = event_prefix(
            "response.function_call_arguments.delta",
            item_id=item.id,
            output_index=item.output_index,
        )
        return out + event("response.output_item.added", output_index=item.output_index, item=added)

    def arguments(self, fragment: str) -> bytes:
        item = self.open
        if item is None or item.kind != "function_call":  # the parser always starts a call first
            return b""
        return self._delta(item, fragment)

    def close(self, status: str) -> bytes:
        """The events that end the open item (b"" when none is open); it joins `done`."""
        item = self.open
        if item is None:
            return b""
        self.open = None
        text = item.text()
        where = {"item_id": item.id, "output_index": item.output_index}
        finished: OutputItem
        if item.kind == "function_call":
            finished = FunctionCallOutput(
                id=item.id, call_id=item.call_id, name=item.name, arguments=text, status=status
            )
            out = event(
                "response.function_call_arguments.done", **where, name=item.name, arguments=text
            )
        elif item.kind == "reasoning":
            part = ReasoningTextPart(text=text)
            finished = ReasoningOutput(id=item.id, summary=(), content=(part,), status=status)
            out = event("response.reasoning_text.done", **where, content_index=0, text=text)
            out += event("response.content_part.done", **where, content_index=0, part=part)
        else:
            text_part = OutputTextPart(text=text)
            finished = OutputMessage(id=item.id, status=status, content=(text_part,))
            out = event(
                "response.output_text.done", **where, content_index=0, text=text, logprobs=[]
            )
            out += event("response.content_part.done", **where, content_index=0, part=text_part)
        self.done.append(finished)
        return out + event(
            "response.output_item.done", output_index=item.output_index, item=finished
        )

    def _ensure(self, kind: Kind) -> tuple[OpenItem, bytes]:
        item = self.open
        if item is not None and item.kind == kind:
            return item, b""
        out = self.close("completed")
        item = self._start(kind)
        where = {"item_id": item.id, "output_index": item.output_index, "content_index": 0}
        if kind == "message":
            added: OutputItem = OutputMessage(id=item.id, status="in_progress", content=())
            part: OutputTextPart | ReasoningTextPart = OutputTextPart(text="")
            item.prefix = event_prefix("response.output_text.delta", **where)
            item.tail = _TEXT_TAIL
        else:
            added = ReasoningOutput(id=item.id, summary=(), content=(), status="in_progress")
            part = ReasoningTextPart(text="")
            item.prefix = event_prefix("response.reasoning_text.delta", **where)
        out += event("response.output_item.added", output_index=item.output_index, item=added)
        out += event("response.content_part.added", **where, part=part)
        return item, out

    def _start(self, kind: Kind) -> OpenItem:
        index = len(self.done)
        item = OpenItem(kind, f"{_ID_PREFIX[kind]}_{self._request_id}_{index}", index)
        self.open = item
        return item

    @staticmethod
    def _delta(item: OpenItem, text: str) -> bytes:
        item.parts.append(text)
        if not text:
            return b""
        return item.prefix + b'"delta":' + _encode(text) + item.tail
