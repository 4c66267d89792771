"""core/run_output.py: a run's output so far, read from the events the Responses renderer
really makes (core/responses_items.py, numbered by the Responses dialect): at every point the
items hold exactly the text streamed so far; once every item is closed they equal the items
the renderer itself calls done; an item a run ended before it was done is `incomplete`."""

from __future__ import annotations

from typing import Any, Final

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.responses_dialect import ResponsesDialect
from smg_trio.core.responses_items import ResponseItems
from smg_trio.core.run_events import CANCELLED, ending
from smg_trio.core.run_output import OutputSoFar

CREATED: Final = b'{"id":"resp_1","object":"response","status":"in_progress","output":[]}'

Step = tuple[str, str]
steps = st.lists(
    st.tuples(st.sampled_from(["content", "reasoning", "call", "arguments"]), st.text(max_size=8)),
    max_size=25,
)


def fed(items: ResponseItems, step: Step) -> bytes:
    kind, text = step
    if kind == "content":
        return items.content(text)
    if kind == "reasoning":
        return items.reasoning(text)
    if kind == "call":
        return items.call(f"call_{len(items.done)}", text or "f")
    return items.arguments(text)


def take_all(output: OutputSoFar, dialect: ResponsesDialect, payload: bytes) -> None:
    for name, data in dialect.numbered([payload] if payload else []):
        output.take(name, data)


def texts(items: list[dict[str, Any]]) -> list[str]:
    """Each item's text: a message's or reasoning's part, a call's arguments."""
    out = []
    for item in items:
        if item["type"] == "function_call":
            out.append(item["arguments"])
        else:
            out.append("".join(part["text"] for part in item.get("content", ())))
    return out


def as_json(item: object) -> Any:
    return msgspec.json.decode(msgspec.json.encode(item))


def expected_texts(items: ResponseItems) -> list[str]:
    done = [as_json(item) for item in items.done]
    open_text = [] if items.open is None else [items.open.text()]
    return [*texts(done), *open_text]


@given(steps)
def test_the_output_so_far_is_what_streamed_and_closes_into_the_renderers_items(
    script: list[Step],
) -> None:
    items, dialect, output = ResponseItems("req"), ResponsesDialect(), OutputSoFar()
    for step in script:
        take_all(output, dialect, fed(items, step))
        assert texts(output.items(ended=False)) == expected_texts(items)
    take_all(output, dialect, items.close("completed"))
    assert output.items(ended=False) == [as_json(item) for item in items.done]


@given(steps.filter(lambda script: any(kind != "arguments" for kind, _ in script)))
def test_a_cancelled_object_keeps_the_output_and_cuts_the_open_item(script: list[Step]) -> None:
    items, dialect, output = ResponseItems("req"), ResponsesDialect(), OutputSoFar()
    for step in script:
        take_all(output, dialect, fed(items, step))
    _, _, cancelled = ending(output.onto(CREATED, ended=False), CANCELLED)
    obj = msgspec.json.decode(cancelled)
    assert obj["status"] == CANCELLED
    assert texts(obj["output"]) == expected_texts(items)
    statuses = [item["status"] for item in obj["output"]]
    assert statuses == ["completed"] * len(items.done) + ["incomplete"] * (items.open is not None)


def test_an_object_with_its_own_output_is_left_as_it_is() -> None:
    """The generation's last event carries the whole output: nothing is added to it."""
    items, dialect, output = ResponseItems("req"), ResponsesDialect(), OutputSoFar()
    take_all(output, dialect, items.content("hello"))
    completed = b'{"id":"resp_1","status":"completed","output":[{"type":"message"}]}'
    assert output.onto(completed, ended=True) is completed
    assert OutputSoFar().onto(CREATED, ended=False) is CREATED  # nothing streamed yet


def test_an_event_not_shaped_as_the_renderer_makes_it_is_ignored() -> None:
    output = OutputSoFar()
    output.take(b"response.output_text.delta", b'{"delta":"no index"}')
    output.take(b"response.output_item.added", b"not json")
    assert output.items(ended=False) == []
    assert output.changes == 0
