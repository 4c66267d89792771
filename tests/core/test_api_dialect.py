"""The API dialects: OpenAI's framing is what every OpenAI endpoint always sent; named events go
out as made, split into one WebSocket frame per event, and end without `[DONE]`."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.api_dialect import (
    OPENAI,
    NamedEventDialect,
    named_event,
    split_named_events,
)
from smg_trio.core.render import SSE_DONE, sse, websocket_chunk
from smg_trio.errors import ClientError, EngineRejected
from smg_trio.frontends.api_paths import dialect_for_path
from smg_trio.frontends.websocket_frames import error_frame
from smg_trio.wire.openai_responses import JSON_ENCODER, error_body


def test_openai_frames_each_payload_as_a_data_event_and_ends_with_done() -> None:
    payloads = [b'{"a":1}', b'{"b":2}']
    assert OPENAI.frame(payloads) == sse(b'{"a":1}') + sse(b'{"b":2}')
    assert OPENAI.end(payloads) == sse(b'{"a":1}') + sse(b'{"b":2}') + SSE_DONE
    assert OPENAI.end(()) == SSE_DONE
    err = EngineRejected("no")
    assert OPENAI.stream_error(err) == sse(error_body(err)) + SSE_DONE
    assert OPENAI.error_body(err) == error_body(err)
    assert OPENAI.error_status(ClientError("bad", status=413)) == 413
    assert OPENAI.websocket_frames("s", payloads) == [
        websocket_chunk("s", b'{"a":1}'),
        websocket_chunk("s", b'{"b":2}'),
    ]


def test_every_path_not_registered_speaks_openai() -> None:
    for path in ("/v1/chat/completions", "/v1/completions", "/generate", "/nope"):
        assert dialect_for_path(path) is OPENAI


def test_websocket_error_frame_carries_the_dialects_error_object() -> None:
    err = ClientError("bad temperature", param="temperature")
    frame = json.loads(error_frame("x", err, "rid"))
    assert frame == {
        "type": "error",
        "id": "x",
        "request_id": "rid",
        "error": json.loads(error_body(err))["error"],
    }


_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz._", min_size=1, max_size=30)
_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(st.lists(st.tuples(_names, _data), max_size=6))
def test_named_events_split_back_into_their_names_and_data(
    events: list[tuple[str, object]],
) -> None:
    encoded = [(name.encode(), JSON_ENCODER.encode(data)) for name, data in events]
    payload = b"".join(named_event(name, data) for name, data in encoded)
    assert list(split_named_events(payload)) == encoded
    dialect = NamedEventDialect()
    assert dialect.frame([payload]) == payload
    assert dialect.end([payload]) == payload  # no [DONE]
    frames = [json.loads(f) for f in dialect.websocket_frames(7, [payload])]
    assert frames == [
        {"type": "chunk", "id": 7, "event": name, "data": data} for name, data in events
    ]


def test_a_named_stream_ends_with_an_error_event() -> None:
    err = EngineRejected("engine said no")
    event = NamedEventDialect().stream_error(err)
    assert event == b"event: error\ndata: " + error_body(err) + b"\n\n"
