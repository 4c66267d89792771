"""Pure. The HPACK encoder of our HTTP/2 responses: the static table only, no dynamic table
(docs/http.md §3).

hpack's `Encoder` keeps a dynamic table, searches it linearly for every field, and Huffman-codes
every literal in Python: 30 µs of a response head's CPU on a warm loop, several times that cold,
on the path of every first token. A response head of ours is a handful of fields, most of them
the same every time (`:status`, `content-type`, `cache-control`, ...), and its bytes matter
little next to the stream they open. So `StaticTableEncoder` (RFC 7541):

- never inserts into the dynamic table: the first header block starts with a dynamic table size
  update to 0, as does the first block after the peer changes SETTINGS_HEADER_TABLE_SIZE (h2
  sets `header_table_size` then; 0 is within any limit), so the peer's decoder table stays
  empty and no block depends on another;
- encodes a field as the static table's index when the whole field is there (`:status: 200`),
  else as a literal without indexing (never indexed for `NeverIndexedHeaderTuple`, as hpack
  did for request ids and credentials) with the static table's index for the name when it has
  one, strings as raw octets (no Huffman);
- keeps each encoded field for reuse, because without a dynamic table a field's bytes no longer
  depend on what came before, or on the connection: one memo serves every connection of the
  process (one per connection would hold up to its bound on each of thousands of long-lived
  connections), and after the first response a head is a few dict lookups and a join.
  Never-indexed fields (request ids: unique) are not kept, and the memo is emptied when full,
  so it stays bounded (`date` adds one field a second).

h2 calls `encode(headers)` with byte strings (it encodes str fields to UTF-8 first); str is
accepted too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from hpack.struct import HeaderTuple, HeaderWeaklyTyped
from hpack.table import HeaderTable

STATIC_TABLE: Final[tuple[tuple[bytes, bytes], ...]] = HeaderTable.STATIC_TABLE
FIELD_INDEX: Final[dict[tuple[bytes, bytes], int]] = {}
NAME_INDEX: Final[dict[bytes, int]] = {}
for _index, (_name, _value) in enumerate(STATIC_TABLE, 1):
    FIELD_INDEX.setdefault((_name, _value), _index)
    NAME_INDEX.setdefault(_name, _index)

TABLE_SIZE_ZERO: Final = b"\x20"
"""A dynamic table size update to 0 (RFC 7541 §6.3: 001, then 0 on a 5-bit prefix)."""
WITHOUT_INDEXING: Final = 0x00  # RFC 7541 §6.2.2: 0000, then the name's index on 4 bits
NEVER_INDEXED: Final = 0x10  # RFC 7541 §6.2.3: 0001, then the name's index on 4 bits
MEMO_MAX: Final = 1024
ENCODED_FIELDS: Final[dict[tuple[bytes, bytes], bytes]] = {}
"""The process's memo of encoded indexable fields (see the module doc)."""


def encode_integer(value: int, prefix_bits: int, first_byte: int) -> bytes:
    """RFC 7541 §5.1: `value` on a `prefix_bits` prefix, the rest of the first byte given."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first_byte | value,))
    out = bytearray((first_byte | limit,))
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_string(octets: bytes) -> bytes:
    """RFC 7541 §5.2: a string literal, raw (H = 0)."""
    return encode_integer(len(octets), 7, 0x00) + octets


def encode_field(name: bytes, value: bytes, *, never_indexed: bool) -> bytes:
    """One field, as the module doc says."""
    if not never_indexed:
        index = FIELD_INDEX.get((name, value))
        if index is not None:
            return encode_integer(index, 7, 0x80)  # RFC 7541 §6.1: indexed field
    kind = NEVER_INDEXED if never_indexed else WITHOUT_INDEXING
    name_index = NAME_INDEX.get(name)
    if name_index is not None:
        return encode_integer(name_index, 4, kind) + encode_string(value)
    return bytes((kind,)) + encode_string(name) + encode_string(value)


def encoded_field(name: bytes, value: bytes) -> bytes:
    """`encode_field` of an indexable field, through the process's memo."""
    encoded = ENCODED_FIELDS.get((name, value))
    if encoded is None:
        encoded = encode_field(name, value, never_indexed=False)
        if len(ENCODED_FIELDS) >= MEMO_MAX:
            ENCODED_FIELDS.clear()
        ENCODED_FIELDS[(name, value)] = encoded
    return encoded


def _octets(text: bytes | str) -> bytes:
    return text.encode("utf-8") if isinstance(text, str) else bytes(text)


class StaticTableEncoder:
    """An `hpack.Encoder` stand-in for h2 (see the module doc)."""

    __slots__ = ("_announce",)

    def __init__(self) -> None:
        self._announce = True  # the next block starts with a table size update to 0

    @property
    def header_table_size(self) -> int:
        """The dynamic table's size: always 0."""
        return 0

    @header_table_size.setter
    def header_table_size(self, _limit: int) -> None:
        # The peer's limit changed (its SETTINGS): say again that ours is 0, as RFC 7541 §4.2
        # asks of the first block after a change.
        self._announce = True

    def encode(self, headers: Iterable[HeaderWeaklyTyped], huffman: bool = True) -> bytes:
        """The header block of `headers` (`huffman` is ignored: literals go raw)."""
        parts: list[bytes] = []
        if self._announce:
            self._announce = False
            parts.append(TABLE_SIZE_ZERO)
        for field in headers:
            name, value = _octets(field[0]), _octets(field[1])
            if isinstance(field, HeaderTuple) and not field.indexable:
                parts.append(encode_field(name, value, never_indexed=True))
            else:
                parts.append(encoded_field(name, value))
        return b"".join(parts)
