"""Pure. The ZMQ transport both engine wires share (vLLM EngineCore and TokenSpeed, docs/wire.md §A.1-A.4,
§A.8, §A.10, §B.1-B.2): engine identities, request-type frames, the HELLO/INIT/READY handshake
maps, ABORT payloads and the engine-dead sentinel.

Frames, as the gateway's sockets see them:
- handshake ROUTER: `[identity, HELLO|READY map]` in, `[identity, INIT map]` out;
- input ROUTER: `[identity, registration map]` in, `[identity, type byte, payload, aux...]` out;
- output PULL: `[payload, aux...]` in, or the single frame `ENGINE_CORE_DEAD`.
What differs per engine (request and output layouts, the registration map) lives in
`vllm_zmq` and `tokenspeed_zmq`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Final, TypeVar

import msgspec

from smg_trio.errors import BackendProtocolError

ENGINE_CORE_DEAD: Final = b"ENGINE_CORE_DEAD"
HELLO: Final = "HELLO"
READY: Final = "READY"

_MAX_ENGINE_INDEX: Final = 0xFFFF

T = TypeVar("T")


def is_engine_dead(frames: Sequence[bytes]) -> bool:
    """True for the engine-dead sentinel: exactly one frame holding `ENGINE_CORE_DEAD`."""
    return len(frames) == 1 and bytes(frames[0]) == ENGINE_CORE_DEAD


def engine_identity(engine_index: int) -> bytes:
    """The ZMQ identity an engine dials with: its index as 2 bytes, little-endian."""
    if not 0 <= engine_index <= _MAX_ENGINE_INDEX:
        raise ValueError(f"engine index {engine_index} does not fit the 2-byte identity")
    return engine_index.to_bytes(2, "little")


def engine_index_of(identity: bytes) -> int:
    """The engine index an identity frame names. Route by this, never by ready-map fields."""
    if len(identity) != 2:
        raise BackendProtocolError(
            f"an engine identity is 2 bytes, got {len(identity)}: {bytes(identity)!r}"
        )
    return int.from_bytes(identity, "little")


class RequestType(enum.IntEnum):
    """The raw one-byte frame ahead of a request payload. TokenSpeed knows only ADD and ABORT."""

    ADD = 0x00
    ABORT = 0x01
    START_DP_WAVE = 0x02
    UTILITY = 0x03
    EXECUTOR_FAILED = 0x04  # engine-internal; never sent
    WAKEUP = 0x05  # engine-internal; never sent

    @property
    def frame(self) -> bytes:
        return bytes((self.value,))

    @classmethod
    def of_frame(cls, frame: bytes) -> RequestType:
        if len(frame) != 1 or frame[0] not in cls._value2member_map_:
            raise BackendProtocolError(f"unknown request-type frame {bytes(frame)!r}")
        return cls(frame[0])


class HandshakeMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    """HELLO or READY from an engine's handshake DEALER (a msgpack map).

    vLLM sends `{status, local, headless}` (+ `parallel_config_hash` when DP > 1, + elastic-EP
    keys we ignore); TokenSpeed always sends all four keys. Encoding this struct gives vLLM's
    shape; `tokenspeed_zmq` has the four-key one.
    """

    status: str
    local: bool | None = None
    headless: bool | None = None
    parallel_config_hash: str | None = None


class EngineAddresses(msgspec.Struct, frozen=True):
    """INIT's `addresses` (all five keys always sent): where the engine dials in and out."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    coordinator_input: str | None = None
    coordinator_output: str | None = None
    frontend_stats_publish_address: str | None = None


class InitMessage(msgspec.Struct, frozen=True):
    """INIT, the frontend's answer to HELLO. `parallel_config` is required, even when empty."""

    addresses: EngineAddresses
    parallel_config: dict[str, Any] = {}


_ENCODER: Final = msgspec.msgpack.Encoder()
_HANDSHAKE_DECODER: Final = msgspec.msgpack.Decoder(HandshakeMessage)
_INIT_DECODER: Final = msgspec.msgpack.Decoder(InitMessage)
_ABORT_DECODER: Final = msgspec.msgpack.Decoder(tuple[str, ...])


def encode_handshake(status: str, *, local: bool, headless: bool) -> bytes:
    """A vLLM-shaped HELLO/READY map (engine side). A headless engine: local=False, headless=True."""
    return _ENCODER.encode(HandshakeMessage(status=status, local=local, headless=headless))


def decode_handshake(payload: bytes) -> HandshakeMessage:
    """Decode HELLO/READY from either engine; unknown keys are ignored."""
    return decode_message(_HANDSHAKE_DECODER, payload, "handshake message")


def encode_init(inputs: Sequence[str], outputs: Sequence[str]) -> bytes:
    """INIT for one engine: its input/output addresses, no coordinator, `parallel_config={}`."""
    addresses = EngineAddresses(inputs=tuple(inputs), outputs=tuple(outputs))
    return _ENCODER.encode(InitMessage(addresses=addresses))


def decode_init(payload: bytes) -> InitMessage:
    """Engine side: decode INIT; an engine cannot run without one input and one output."""
    init = decode_message(_INIT_DECODER, payload, "INIT message")
    if not init.addresses.inputs or not init.addresses.outputs:
        raise BackendProtocolError("INIT must name at least one input and one output address")
    return init


def encode_abort(request_ids: Sequence[str]) -> bytes:
    """ABORT payload (after the 0x01 frame): a msgpack array of engine request ids."""
    return _ENCODER.encode(tuple(request_ids))


def decode_abort(payload: bytes) -> tuple[str, ...]:
    return decode_message(_ABORT_DECODER, payload, "ABORT payload")


def decode_message(decoder: msgspec.msgpack.Decoder[T], payload: bytes, what: str) -> T:
    """Decode with `decoder`; anything malformed from a peer becomes BackendProtocolError."""
    try:
        return decoder.decode(payload)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise BackendProtocolError(f"malformed {what}: {exc}") from exc
