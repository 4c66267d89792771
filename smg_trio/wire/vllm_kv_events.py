"""Pure. vLLM's KV-cache event wire (vLLM 0.32, `vllm/distributed/kv_events.py`; docs/routing.md
§9): what an engine's `ZmqEventPublisher` sends when launched with `--kv-events-config`.

- Live, on its PUB socket: multipart `[topic, seq, payload]`; `seq` is an 8-byte big-endian
  counter starting at 0 when the publisher starts; `payload` is one msgpack `EventBatch`.
- Replay, on its ROUTER socket: a DEALER sends `[b"", start_seq]` (8 bytes, big-endian) and
  gets `[b"", topic, seq, payload]` for every buffered batch with `seq >= start_seq`, then the
  end marker `[b"", b"", seq=-1 (signed), b""]`.
- `EventBatch` is a positional array `[ts, events, data_parallel_rank]`; each event a map
  tagged by its class name in `"type"`: `BlockStored` (`block_hashes`, `parent_block_hash`,
  `token_ids` of all its blocks, `block_size`, `lora_id`, `medium`, `lora_name`, then
  optional `extra_keys`, `group_idx`, ...), `BlockRemoved` (`block_hashes`, `medium`, ...) and
  `AllBlocksCleared`. Fields with defaults are left out when at their default.
- A block hash is an unsigned 64-bit int (vLLM's default `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`:
  the low 8 bytes of the engine's hash) or the hash bytes; `block_hash_int` maps both to the
  int, as vLLM itself does.

Decoders ignore unknown map keys and extra trailing array elements (engines drift); the encoder
(the reference engines' side) writes the layout above.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from smg_trio.errors import BackendProtocolError

END_SEQ: Final = -1  # the replay's end marker, signed
SEQ_BYTES: Final = 8
HASH_MASK: Final = (1 << 64) - 1
MEDIUM_GPU: Final = "GPU"

ExternalBlockHash = int | bytes


class BlockStored(msgspec.Struct, tag=True, omit_defaults=True, frozen=True, kw_only=True):
    """Full blocks newly cached (or reused) by the engine, in prefix order."""

    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None

    # `omit_defaults` would drop the four required-but-nullable fields vLLM always writes; the
    # encoder writes them explicitly (see `encode_batch`).


class BlockRemoved(msgspec.Struct, tag=True, omit_defaults=True, frozen=True, kw_only=True):
    """Blocks evicted from the engine's prefix cache."""

    block_hashes: list[ExternalBlockHash]
    medium: str | None = None
    group_idx: int | None = None


class AllBlocksCleared(msgspec.Struct, tag=True, omit_defaults=True, frozen=True):
    """The engine dropped its whole prefix cache (e.g. `reset_prefix_cache`)."""


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, frozen=True):
    ts: float
    events: list[KvEvent]
    data_parallel_rank: int | None = None


class Published(msgspec.Struct, frozen=True):
    """One batch with its publisher sequence number."""

    seq: int
    batch: EventBatch


class ReplayEnd(msgspec.Struct, frozen=True):
    """The replay socket sent every buffered batch it had."""


_DECODER: Final = msgspec.msgpack.Decoder(EventBatch)
_ENCODER: Final = msgspec.msgpack.Encoder()


def block_hash_int(value: ExternalBlockHash) -> int:
    """The engine's block hash as vLLM's int form (bytes: their low 64 bits, big-endian)."""
    if isinstance(value, bytes):
        return int.from_bytes(value, "big") & HASH_MASK
    return value & HASH_MASK


def decode_batch(payload: bytes) -> EventBatch:
    try:
        return _DECODER.decode(payload)
    except msgspec.DecodeError as exc:
        raise BackendProtocolError(f"undecodable KV event batch: {exc}") from exc


def _seq(raw: bytes) -> int:
    if len(raw) != SEQ_BYTES:
        raise BackendProtocolError(f"KV event sequence number of {len(raw)} bytes, expected 8")
    return int.from_bytes(raw, "big", signed=True)


def decode_published(frames: list[bytes]) -> Published:
    """A live PUB message `[topic, seq, payload]`."""
    if len(frames) != 3:
        raise BackendProtocolError(f"KV event message of {len(frames)} frames, expected 3")
    return Published(_seq(frames[1]), decode_batch(frames[2]))


def decode_replay_reply(frames: list[bytes]) -> Published | ReplayEnd:
    """One replay reply as a DEALER receives it: `[b"", topic, seq, payload]` (vLLM 0.32), or
    `[b"", seq, payload]` (later vLLM, which dropped the topic); the end marker has seq -1."""
    if frames and frames[0] == b"":
        frames = frames[1:]
    if len(frames) == 3:
        frames = frames[1:]
    if len(frames) != 2:
        raise BackendProtocolError(f"KV replay reply of {len(frames)} frames, expected 2 or 3")
    seq = _seq(frames[0])
    if seq == END_SEQ:
        return ReplayEnd()
    return Published(seq, decode_batch(frames[1]))


def encode_replay_request(start_seq: int) -> list[bytes]:
    """What a DEALER sends to ask for every buffered batch from `start_seq` on."""
    return [b"", start_seq.to_bytes(SEQ_BYTES, "big")]


def _event_value(event: KvEvent) -> dict[str, Any]:
    match event:
        case BlockStored():
            value: dict[str, Any] = {
                "type": "BlockStored",
                "block_hashes": event.block_hashes,
                "parent_block_hash": event.parent_block_hash,
                "token_ids": event.token_ids,
                "block_size": event.block_size,
                "lora_id": event.lora_id,
                "medium": event.medium,
                "lora_name": event.lora_name,
            }
            if event.extra_keys is not None:
                value["extra_keys"] = event.extra_keys
            if event.group_idx is not None:
                value["group_idx"] = event.group_idx
            return value
        case BlockRemoved():
            value = {"type": "BlockRemoved", "block_hashes": event.block_hashes}
            value["medium"] = event.medium
            if event.group_idx is not None:
                value["group_idx"] = event.group_idx
            return value
        case AllBlocksCleared():
            return {"type": "AllBlocksCleared"}


def encode_batch(batch: EventBatch) -> bytes:
    """The payload exactly as vLLM 0.32's publisher writes it (required fields always present)."""
    fields: list[Any] = [batch.ts, [_event_value(event) for event in batch.events]]
    if batch.data_parallel_rank is not None:
        fields.append(batch.data_parallel_rank)
    return _ENCODER.encode(fields)


def encode_published(seq: int, batch_payload: bytes, topic: bytes = b"") -> list[bytes]:
    return [topic, seq.to_bytes(SEQ_BYTES, "big"), batch_payload]


def encode_replay_reply(seq: int, batch_payload: bytes, topic: bytes = b"") -> list[bytes]:
    """A replay reply after the ROUTER's identity frame (vLLM 0.32 layout)."""
    return [b"", topic, seq.to_bytes(SEQ_BYTES, "big"), batch_payload]


def encode_replay_end() -> list[bytes]:
    return [b"", b"", END_SEQ.to_bytes(SEQ_BYTES, "big", signed=True), b""]
