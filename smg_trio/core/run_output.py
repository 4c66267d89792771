"""Pure. A response run's output so far, read from its logged events (docs/client-apis.md
§3.5): what `GET /v1/responses/{id}` shows of a run that is still generating, and what a
cancelled or cut-off run's stored object keeps, as OpenAI's background responses do.

The lifecycle events carry the whole response object, but its `output` is filled in only by
the generation's own last event (`response.completed` / `response.incomplete`); until then the
output lives in the events between them. `OutputSoFar.take` reads those: an item opened
(`response.output_item.added`), a content part opened (`response.content_part.added`), a
piece of text or arguments (`response.output_text.delta`, `response.reasoning_text.delta`,
`response.function_call_arguments.delta`), an item closed whole (`response.output_item.done`).
Per delta the work is one small typed decode and a list append; the items are joined only
when the object is asked for (`onto`).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from smg_trio.wire.openai_responses import JSON_ENCODER

ITEM_ADDED: Final = b"response.output_item.added"
PART_ADDED: Final = b"response.content_part.added"
TEXT_DELTAS: Final = frozenset({b"response.output_text.delta", b"response.reasoning_text.delta"})
ARGUMENTS_DELTA: Final = b"response.function_call_arguments.delta"
ITEM_DONE: Final = b"response.output_item.done"
_ARGUMENTS: Final = -1
"""Where a function call's argument pieces are kept (its parts are numbered from 0)."""
IN_PROGRESS_ITEM: Final = "in_progress"
CUT_ITEM: Final = "incomplete"
"""The status of an item the run ended before it was done (OpenAI's item statuses)."""


class _Item(msgspec.Struct):
    output_index: int
    item: dict[str, Any]


class _Part(msgspec.Struct):
    output_index: int
    content_index: int
    part: dict[str, Any]


class _Delta(msgspec.Struct):
    output_index: int
    delta: str
    content_index: int = _ARGUMENTS


_decode_item = msgspec.json.Decoder(_Item).decode
_decode_part = msgspec.json.Decoder(_Part).decode
_decode_delta = msgspec.json.Decoder(_Delta).decode
_decode = msgspec.json.decode


class OutputSoFar:
    """One run's output items as its events built them (module doc)."""

    __slots__ = ("_items", "_pieces", "changes")

    def __init__(self) -> None:
        self._items: dict[int, dict[str, Any]] = {}
        """Each item as it was opened (or closed, whole), by its `output_index`."""
        self._pieces: dict[int, dict[int, list[str]]] = {}
        """An open item's text pieces by content index (`_ARGUMENTS`: a call's arguments)."""
        self.changes = 0
        """How many pieces of output were taken: a changed count means a changed output."""

    def take(self, name: bytes, data: bytes) -> None:
        """One logged event (`name`, its JSON `data`); any but the output's is ignored, and so
        is one not shaped as the renderer makes it (the run goes on; its output lacks it)."""
        try:
            self._take(name, data)
        except msgspec.DecodeError:
            return

    def _take(self, name: bytes, data: bytes) -> None:
        if name in TEXT_DELTAS or name == ARGUMENTS_DELTA:
            delta = _decode_delta(data)
            parts = self._pieces.setdefault(delta.output_index, {})
            parts.setdefault(delta.content_index, []).append(delta.delta)
        elif name == ITEM_ADDED:
            added = _decode_item(data)
            self._items[added.output_index] = added.item
        elif name == PART_ADDED:
            opened = _decode_part(data)
            item = self._items.get(opened.output_index)
            if item is None:
                return
            content = item.get("content")
            item["content"] = [*(content if isinstance(content, list) else ()), opened.part]
        elif name == ITEM_DONE:
            done = _decode_item(data)
            self._items[done.output_index] = done.item
            self._pieces.pop(done.output_index, None)
        else:
            return
        self.changes += 1

    def items(self, *, ended: bool) -> list[dict[str, Any]]:
        """The output items so far, in order; `ended`: an item not done is `incomplete`."""
        out: list[dict[str, Any]] = []
        for index in sorted(self._items):
            item, pieces = self._items[index], self._pieces.get(index)
            if pieces is None and not (ended and item.get("status") == IN_PROGRESS_ITEM):
                out.append(item)  # done whole (or opened and not fed yet)
                continue
            item = dict(item)
            if pieces is not None:
                _fill(item, pieces)
            if ended and item.get("status") == IN_PROGRESS_ITEM:
                item["status"] = CUT_ITEM
            out.append(item)
        return out

    def onto(self, response: bytes, *, ended: bool) -> bytes:
        """`response` (a lifecycle event's object) with the output so far when it carries
        none itself (every object but the generation's own last one)."""
        if not self._items:
            return response
        obj: dict[str, Any] = _decode(response)
        if obj.get("output"):
            return response
        obj["output"] = self.items(ended=ended)
        return JSON_ENCODER.encode(obj)


def _fill(item: dict[str, Any], pieces: dict[int, list[str]]) -> None:
    """An open item (a copy) with its pieces joined onto its text or arguments."""
    arguments = pieces.get(_ARGUMENTS)
    if arguments is not None:
        item["arguments"] = str(item.get("arguments") or "") + "".join(arguments)
    content = item.get("content")
    if not isinstance(content, list):
        return
    filled: list[Any] = []
    for index, part in enumerate(content):
        texts = pieces.get(index)
        if texts is not None and isinstance(part, dict):
            part = {**part, "text": str(part.get("text") or "") + "".join(texts)}
        filled.append(part)
    item["content"] = filled


def cut_items(output: Any) -> None:
    """The items of an ended object's `output` that were not done: `incomplete` (in place)."""
    if not isinstance(output, list):
        return
    for item in output:
        if isinstance(item, dict) and item.get("status") == IN_PROGRESS_ITEM:
            item["status"] = CUT_ITEM
