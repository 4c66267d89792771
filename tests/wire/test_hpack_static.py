"""`StaticTableEncoder` (wire/hpack_static.py): what it encodes, hpack's own decoder reads back
field for field, never-indexed marks included, with the decoder's dynamic table left empty;
integers follow RFC 7541's examples; a table size update opens the first block and the first
block after the peer's SETTINGS change (docs/http.md §3)."""

from __future__ import annotations

from hpack import Decoder
from hpack.struct import HeaderTuple, NeverIndexedHeaderTuple
from hypothesis import given, settings
from hypothesis import strategies as st

from smg_trio.wire.hpack_static import (
    ENCODED_FIELDS,
    MEMO_MAX,
    STATIC_TABLE,
    StaticTableEncoder,
    encode_integer,
)

NAME = st.one_of(
    st.sampled_from([name for name, _ in STATIC_TABLE]),
    st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=300).map(str.encode),
)
VALUE = st.one_of(
    st.sampled_from([value for _, value in STATIC_TABLE]),
    st.binary(max_size=300),
)
FIELD = st.tuples(NAME, VALUE, st.booleans())


def fields_of(drawn: list[tuple[bytes, bytes, bool]]) -> list[HeaderTuple]:
    return [
        NeverIndexedHeaderTuple(name, value) if never else HeaderTuple(name, value)
        for name, value, never in drawn
    ]


def read_back(decoder: Decoder, block: bytes) -> list[tuple[bytes, bytes, bool]]:
    return [
        (bytes(name), bytes(value), not field.indexable)
        for field in decoder.decode(block, raw=True)
        for name, value in (field,)
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(FIELD, max_size=10), min_size=1, max_size=4))
def test_every_block_reads_back_as_sent_and_the_peer_table_stays_empty(
    blocks: list[list[tuple[bytes, bytes, bool]]],
) -> None:
    encoder, decoder = StaticTableEncoder(), Decoder()
    for drawn in blocks:
        block = encoder.encode(fields_of(drawn))
        assert read_back(decoder, block) == [(n, v, never) for n, v, never in drawn]
        assert len(decoder.header_table.dynamic_entries) == 0


def test_integers_are_encoded_as_rfc_7541_appendix_c1_shows() -> None:
    assert encode_integer(10, 5, 0x00) == b"\x0a"
    assert encode_integer(1337, 5, 0x00) == b"\x1f\x9a\x0a"
    assert encode_integer(42, 8, 0x00) == b"\x2a"
    assert encode_integer(31, 5, 0x00) == b"\x1f\x00"  # exactly the prefix: a zero follows


def test_a_whole_static_field_is_its_index_and_a_static_name_is_reused() -> None:
    encoder = StaticTableEncoder()
    block = encoder.encode([(b":status", b"200"), (b"content-type", b"text/event-stream")])
    # table size update to 0; :status 200 is static entry 8; content-type is entry 31
    assert block == b"\x20\x88" + b"\x0f\x10" + bytes((17,)) + b"text/event-stream"


def test_the_table_size_update_opens_the_first_block_and_the_first_after_a_settings_change() -> (
    None
):
    encoder = StaticTableEncoder()
    assert encoder.encode([(b":status", b"200")]) == b"\x20\x88"
    assert encoder.encode([(b":status", b"200")]) == b"\x88"
    encoder.header_table_size = 0  # what h2 does when the peer's SETTINGS changes it
    assert encoder.header_table_size == 0
    assert encoder.encode([(b":status", b"200")]) == b"\x20\x88"


def test_str_fields_are_sent_as_utf8_and_never_indexed_ones_are_not_kept() -> None:
    ENCODED_FIELDS.clear()
    encoder, decoder = StaticTableEncoder(), Decoder()
    block = encoder.encode([("x-note", "café"), NeverIndexedHeaderTuple(b"x-request-id", b"r1")])
    assert read_back(decoder, block) == [
        (b"x-note", "café".encode(), False),
        (b"x-request-id", b"r1", True),
    ]
    assert list(ENCODED_FIELDS) == [(b"x-note", "café".encode())]


def test_one_memo_serves_every_connection_and_stays_bounded() -> None:
    ENCODED_FIELDS.clear()
    first, second, decoder = StaticTableEncoder(), StaticTableEncoder(), Decoder()
    first.encode([(b"x-n", b"shared")])
    assert list(ENCODED_FIELDS) == [(b"x-n", b"shared")]
    second.encode([(b"x-n", b"shared")])  # another connection reuses the bytes
    assert len(ENCODED_FIELDS) == 1
    for index in range(MEMO_MAX * 3):
        block = first.encode([(b"x-n", b"%d" % index)])
        assert read_back(decoder, block)[-1] == (b"x-n", b"%d" % index, False)
        assert len(ENCODED_FIELDS) <= MEMO_MAX
