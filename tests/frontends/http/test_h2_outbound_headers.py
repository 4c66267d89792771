"""`outbound_headers` (frontends.http.h2_protocol): the one pass that stands in for h2's outbound header
normalisation and validation gives, for the response fields hypercorn and our app send, exactly
what h2's own pipeline gave, HPACK never-indexed marks included (docs/http.md §3)."""

from __future__ import annotations

from collections.abc import Sequence

import h2.utilities
from hpack.struct import HeaderTuple, HeaderWeaklyTyped, NeverIndexedHeaderTuple
from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.frontends.http.h2_protocol import outbound_headers

# What a response of ours carries: hypercorn's `:status`, `date` and `server`, our app's fields
# (any case), and the fields h2 drops or marks.
NAMES = (
    b":status",
    b"content-type",
    b"Content-Type",
    b"cache-control",
    b"x-accel-buffering",
    b"x-request-id",
    b"X-Request-Id",
    b"retry-after",
    b"www-authenticate",
    b"allow",
    b"date",
    b"server",
    b"connection",
    b"Connection",
    b"keep-alive",
    b"proxy-connection",
    b"transfer-encoding",
    b"upgrade",
    b"authorization",
    b"proxy-authorization",
)
VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=40).map(
    str.encode
)
FIELD = st.tuples(st.sampled_from(NAMES), VALUE)


def h2_pipeline(fields: list[tuple[bytes, bytes]]) -> list[HeaderWeaklyTyped]:
    """What h2 itself made of a response's fields before (normalise, then validate), with the
    request id marked never-indexed first, as our send_headers did."""
    flags = h2.utilities.HeaderValidationFlags(
        is_client=False, is_trailer=False, is_response_header=True, is_push_promise=False
    )
    marked = [
        NeverIndexedHeaderTuple(name, value) if name.lower() == b"x-request-id" else (name, value)
        for name, value in fields
    ]
    normalized = h2.utilities.normalize_outbound_headers(marked, flags, False)
    return list(h2.utilities.validate_outbound_headers(normalized, flags))


def kinds(fields: Sequence[HeaderWeaklyTyped]) -> list[tuple[bytes, bytes, bool]]:
    return [
        (
            as_bytes(field[0]),
            as_bytes(field[1]),
            isinstance(field, HeaderTuple) and not field.indexable,
        )
        for field in fields
    ]


def as_bytes(text: bytes | str) -> bytes:
    return text.encode() if isinstance(text, str) else text


@settings(max_examples=400, deadline=None)
@given(st.lists(FIELD, max_size=8))
def test_the_fields_our_responses_carry_come_out_as_h2_made_them(
    fields: list[tuple[bytes, bytes]],
) -> None:
    response = [(b":status", b"200"), *(f for f in fields if f[0] != b":status")]
    assert kinds(outbound_headers(response)) == kinds(h2_pipeline(response))


def test_str_fields_are_sent_as_bytes() -> None:
    assert outbound_headers([(":status", "200"), ("Content-Type", "text/plain")]) == [
        (b":status", b"200"),
        (b"content-type", b"text/plain"),
    ]
