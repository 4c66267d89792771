"""vLLM's KV-event wire (docs/routing.md §9.1): golden bytes written by vLLM 0.32's own
`KVEventBatch` encoder, the PUB and replay frames, and decoding that tolerates drift."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.errors import BackendProtocolError
from smg_trio.wire.vllm_kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    Published,
    ReplayEnd,
    block_hash_int,
    decode_batch,
    decode_published,
    decode_replay_reply,
    encode_batch,
    encode_published,
    encode_replay_end,
    encode_replay_reply,
    encode_replay_request,
)

# msgspec.msgpack.encode(KVEventBatch(ts=1.5, events=[BlockStored(block_hashes=[1, 2**64-1],
# parent_block_hash=None, token_ids=[1..6], block_size=3, lora_id=None, medium="GPU",
# lora_name=None, extra_keys=[None, None], group_idx=0), BlockRemoved(block_hashes=[7],
# medium="GPU", group_idx=0), AllBlocksCleared()], data_parallel_rank=0)) under vLLM 0.32.
GOLDEN_INT = bytes.fromhex(
    "93cb3ff8000000000000938aa474797065ab426c6f636b53746f726564ac626c6f636b5f686173686573"
    "9201cfffffffffffffffffb1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f6964739601"
    "0203040506aa626c6f636b5f73697a6503a76c6f72615f6964c0a66d656469756da3475055a96c6f7261"
    "5f6e616d65c0aa65787472615f6b65797392c0c0a967726f75705f6964780084a474797065ac426c6f63"
    "6b52656d6f766564ac626c6f636b5f6861736865739107a66d656469756da3475055a967726f75705f69"
    "64780081a474797065b0416c6c426c6f636b73436c656172656400"
)
GOLDEN_INT_BATCH = EventBatch(
    1.5,
    [
        BlockStored(
            block_hashes=[1, 2**64 - 1],
            parent_block_hash=None,
            token_ids=[1, 2, 3, 4, 5, 6],
            block_size=3,
            medium="GPU",
            extra_keys=[None, None],
            group_idx=0,
        ),
        BlockRemoved(block_hashes=[7], medium="GPU", group_idx=0),
        AllBlocksCleared(),
    ],
    0,
)
# The same engine with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: 32-byte hashes, and no rank.
GOLDEN_BYTES = bytes.fromhex(
    "93cb40000000000000009188a474797065ab426c6f636b53746f726564ac626c6f636b5f686173686573"
    "91c420" + "01" * 32 + "b1706172656e745f626c6f636b5f68617368c420" + "02" * 32 + "a974"
    "6f6b656e5f696473920908aa626c6f636b5f73697a6502a76c6f72615f6964c0a66d656469756da34750"
    "55a96c6f72615f6e616d65c0c0"
)


def test_vllms_own_batch_decodes_and_encodes_byte_for_byte() -> None:
    assert decode_batch(GOLDEN_INT) == GOLDEN_INT_BATCH
    assert encode_batch(GOLDEN_INT_BATCH) == GOLDEN_INT


def test_byte_hashes_decode_to_vllms_int_form() -> None:
    batch = decode_batch(GOLDEN_BYTES)
    assert batch.data_parallel_rank is None
    stored = batch.events[0]
    assert isinstance(stored, BlockStored)
    assert stored.block_hashes == [b"\x01" * 32]
    # vLLM's maybe_convert_block_hash: the low 64 bits, big-endian.
    assert block_hash_int(stored.block_hashes[0]) == int.from_bytes(b"\x01" * 8, "big")
    assert block_hash_int(2**64 + 5) == 5


def test_unknown_keys_and_trailing_elements_are_ignored() -> None:
    later = msgspec.msgpack.encode(
        [
            3.0,
            [
                {"type": "BlockRemoved", "block_hashes": [4], "medium": None, "locality": "LOCAL"},
                {"type": "AllBlocksCleared"},
            ],
            1,
            "a field of a later version",
        ]
    )
    batch = decode_batch(later)
    assert batch.events == [BlockRemoved(block_hashes=[4]), AllBlocksCleared()]
    assert batch.data_parallel_rank == 1


def test_the_publisher_frames() -> None:
    payload = encode_batch(GOLDEN_INT_BATCH)
    frames = encode_published(258, payload)
    assert frames == [b"", b"\x00\x00\x00\x00\x00\x00\x01\x02", payload]
    assert decode_published(frames) == Published(258, GOLDEN_INT_BATCH)
    assert encode_replay_request(5) == [b"", b"\x00" * 7 + b"\x05"]
    # As the DEALER sees them: the ROUTER's identity frame is gone.
    assert decode_replay_reply(encode_replay_reply(5, payload)) == Published(5, GOLDEN_INT_BATCH)
    assert decode_replay_reply(encode_replay_end()) == ReplayEnd()
    assert encode_replay_end()[2] == b"\xff" * 8
    # Later vLLM dropped the topic frame from replies.
    assert decode_replay_reply([b"", (5).to_bytes(8, "big"), payload]) == Published(
        5, GOLDEN_INT_BATCH
    )


@pytest.mark.parametrize(
    "frames",
    [
        [b"", b"\x00" * 8],
        [b"", b"\x00" * 7, b"\x90"],
        [b"", b"\x00" * 8, b"\xc1"],
        [b"", b"\x00" * 8, msgspec.msgpack.encode([1.0, [{"type": "Nope"}]])],
    ],
)
def test_malformed_messages_are_protocol_errors(frames: list[bytes]) -> None:
    with pytest.raises(BackendProtocolError):
        decode_published(frames)


hashes = st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=4)
events = st.one_of(
    st.builds(
        lambda h, parent, size: BlockStored(
            block_hashes=h,
            parent_block_hash=parent,
            token_ids=list(range(size * len(h))),
            block_size=size,
            medium="GPU",
        ),
        hashes,
        st.none() | st.integers(0, 2**64 - 1),
        st.integers(1, 32),
    ),
    st.builds(lambda h: BlockRemoved(block_hashes=h, medium="GPU"), hashes),
    st.just(AllBlocksCleared()),
)


@given(st.lists(events, max_size=8), st.integers(0, 2**63 - 1))
def test_encode_then_decode_is_identity(batch_events: list[object], seq: int) -> None:
    batch = EventBatch(1.0, batch_events, 0)  # type: ignore[arg-type]
    assert decode_published(encode_published(seq, encode_batch(batch))) == Published(seq, batch)
