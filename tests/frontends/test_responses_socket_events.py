"""The pure spelling of the Responses WebSocket mode (docs/client-apis.md §3.4): any text frame
reads as exactly one client event (never an exception), a create's body is the HTTP body less
the envelope and always streamed, a lane's events carry their number and lane, and steering
takes user text only, in front of the next input, bounded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.api_dialect import named_event
from smg_trio.errors import ClientError, GatewayError
from smg_trio.frontends.responses_socket_events import (
    Cancel,
    ClientEvent,
    Create,
    LaneDialect,
    Refused,
    Steer,
    create_body,
    error_event,
    protocol_error_event,
    read_event,
)
from smg_trio.frontends.responses_socket_steering import (
    MAX_PENDING_PARENTS,
    PendingSteers,
    steer_items,
    with_queued_input,
)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
EVENT_TYPES = st.sampled_from(
    ["response.create", "response.cancel", "response.steer", "response.other", ""]
)


@given(st.text(max_size=64))
def test_any_text_reads_as_one_event(text: str) -> None:
    assert isinstance(read_event(text), Create | Cancel | Steer | Refused)


@given(
    EVENT_TYPES,
    st.dictionaries(
        st.sampled_from(
            ["stream_id", "response_id", "input", "previous_response_id", "model", "stream"]
        ),
        JSON_VALUES,
        max_size=4,
    ),
)
def test_any_event_object_reads_as_one_event(kind: str, fields: dict[str, Any]) -> None:
    event: ClientEvent = read_event(json.dumps({"type": kind, **fields}))
    match event:
        case Create(stream_id=lane, body=body):
            assert kind == "response.create"
            assert lane is None or lane == fields["stream_id"]
            assert "type" not in body
            assert "stream_id" not in body
        case Cancel():
            assert kind == "response.cancel"
        case Steer(previous_response_id=previous):
            assert kind == "response.steer"
            assert previous == fields["previous_response_id"]
        case Refused(error=error):
            assert isinstance(error, ClientError)
            assert error.status == 400


@pytest.mark.parametrize(
    ("stream_id", "valid"),
    [
        ("a", True),
        ("lane-1.x_Y", True),
        ("x" * 256, True),
        ("", False),
        ("a b", False),
        ("x" * 257, False),
        (7, False),
        ("é", False),
    ],
)
def test_a_lane_name_is_what_the_sdk_accepts(stream_id: object, valid: bool) -> None:
    event = read_event(json.dumps({"type": "response.create", "stream_id": stream_id}))
    if valid:
        assert event == Create(str(stream_id), {})
    else:
        assert isinstance(event, Refused)
        assert (event.error.code, event.error.param) == ("invalid_stream_id", "stream_id")


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"stream": False}, "stream"),
        ({"stream": "yes"}, "stream"),
        ({"background": True}, "background"),
    ],
)
def test_a_socket_response_is_a_foreground_stream(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(ClientError) as refused:
        create_body({"input": "x", **fields})
    assert refused.value.param == param


def test_a_create_body_streams() -> None:
    assert json.loads(create_body({"input": "x", "background": False})) == {
        "input": "x",
        "stream": True,
    }


def test_errors_say_whether_they_end_a_create() -> None:
    error = ClientError("bad", code="invalid_value", param="input")
    on_lane = json.loads(error_event(error, "l1"))
    assert on_lane == {
        "type": "error",
        "status": 400,
        "error": {
            "type": "invalid_request_error",
            "code": "invalid_value",
            "message": "bad",
            "param": "input",
        },
        "stream_id": "l1",
    }
    assert "stream_id" not in json.loads(error_event(error, None))
    assert json.loads(protocol_error_event(error))["stream_id"] is None


def test_a_lanes_events_are_numbered_and_carry_the_lane() -> None:
    dialect = LaneDialect("l1")
    created = {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}
    delta = {"type": "response.output_text.delta", "delta": "hi"}
    payload = named_event(b"response.created", json.dumps(created).encode()) + named_event(
        b"response.output_text.delta", json.dumps(delta).encode()
    )
    frames = [json.loads(frame) for frame in dialect.websocket_frames(0, [payload])]
    assert frames == [
        {**created, "sequence_number": 0, "stream_id": "l1"},
        {**delta, "sequence_number": 1, "stream_id": "l1"},
    ]
    failed = [json.loads(f) for f in dialect.failure_frames(GatewayError("engine died"))]
    assert [f["type"] for f in failed] == ["error", "response.failed"]
    assert failed[0]["error"]["code"] == "internal_error"
    assert [f["sequence_number"] for f in failed] == [2, 3]
    assert failed[1]["response"]["status"] == "failed"
    (cancelled,) = [json.loads(f) for f in dialect.cancelled_frames() or []]
    assert cancelled["type"] == "response.incomplete"
    assert cancelled["response"]["status"] == "cancelled"
    assert cancelled["response"]["id"] == "resp_1"
    assert (cancelled["sequence_number"], cancelled["stream_id"]) == (4, "l1")
    # Nothing created yet: the caller sends the `cancelled` error event instead.
    assert LaneDialect(None).cancelled_frames() is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        [],
        [{"role": "assistant", "content": "x"}],
        [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}],
        [{"role": "user", "content": "x", "id": "extra"}],
        [{"type": "function_call_output", "call_id": "c", "output": "o"}],
        7,
    ],
)
def test_steering_takes_user_text_only(value: object) -> None:
    with pytest.raises(ClientError) as refused:
        steer_items(value)
    assert (refused.value.code, refused.value.param) == ("invalid_input", "input")


def test_steering_input_becomes_user_messages_in_front_of_the_next_input() -> None:
    items = steer_items("faster")
    parts = steer_items([{"role": "user", "content": [{"type": "input_text", "text": "t"}]}])
    assert items == [{"type": "message", "role": "user", "content": "faster"}]
    assert parts[0]["type"] == "message"
    body = with_queued_input({"input": "own", "model": "m"}, [*items, *parts])
    assert body["input"] == [*items, *parts, {"type": "message", "role": "user", "content": "own"}]
    assert with_queued_input({"input": 5}, items) == {"input": 5}  # left for the decoder


def test_pending_steering_is_bounded_and_taken_once() -> None:
    pending = PendingSteers()
    for n in range(MAX_PENDING_PARENTS + 1):
        pending.add("lane", f"resp_{n}", [{"n": n}])
    pending.add("lane", "resp_1", [{"n": "again"}])
    assert pending.take("lane", "resp_0") is None  # the oldest was dropped
    assert pending.take("other", "resp_1") is None  # another lane's continuation
    assert pending.take("lane", "resp_1") == [{"n": 1}, {"n": "again"}]
    assert pending.take("lane", "resp_1") is None
