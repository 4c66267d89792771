"""The transport both ZMQ engines share: golden bytes for HELLO, READY, INIT and ABORT (derived
from the plain map/array layouts of docs/wire.md §A.3/§A.8, shown beside them), identities,
request-type frames and the dead sentinel."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from smg_trio.errors import BackendProtocolError
from smg_trio.wire import zmq_transport as t

HELLO_LAYOUT = {"status": "HELLO", "local": False, "headless": True}
HELLO = bytes.fromhex("83a6737461747573a548454c4c4fa56c6f63616cc2a8686561646c657373c3")
READY_LAYOUT = {"status": "READY", "local": False, "headless": True}
READY = bytes.fromhex("83a6737461747573a55245414459a56c6f63616cc2a8686561646c657373c3")
INIT_LAYOUT: dict[str, Any] = {
    "addresses": {
        "inputs": ["ipc:///tmp/e-in.sock"],
        "outputs": ["ipc:///tmp/e-out.sock"],
        "coordinator_input": None,
        "coordinator_output": None,
        "frontend_stats_publish_address": None,
    },
    "parallel_config": {},
}
INIT = bytes.fromhex(
    "82a961646472657373657385a6696e7075747391b46970633a2f2f2f746d702f652d696e2e736f636ba76f75"
    "747075747391b56970633a2f2f2f746d702f652d6f75742e736f636bb1636f6f7264696e61746f725f696e70"
    "7574c0b2636f6f7264696e61746f725f6f7574707574c0be66726f6e74656e645f73746174735f7075626c69"
    "73685f61646472657373c0af706172616c6c656c5f636f6e66696780"
)
ABORT_LAYOUT = ["r1-0", "r1-1"]
ABORT = bytes.fromhex("92a472312d30a472312d31")


def test_layouts_are_what_the_golden_bytes_hold() -> None:
    for layout, golden in [
        (HELLO_LAYOUT, HELLO),
        (READY_LAYOUT, READY),
        (INIT_LAYOUT, INIT),
        (ABORT_LAYOUT, ABORT),
    ]:
        assert msgspec.msgpack.encode(layout) == golden


def test_hello_and_ready_golden_bytes() -> None:
    assert t.encode_handshake(t.HELLO, local=False, headless=True) == HELLO
    assert t.encode_handshake(t.READY, local=False, headless=True) == READY
    hello = t.decode_handshake(HELLO)
    assert (hello.status, hello.local, hello.headless) == ("HELLO", False, True)


def test_ready_with_dp_hash_and_unknown_keys_decodes() -> None:
    ready = msgspec.msgpack.encode(
        {
            "status": "READY",
            "local": False,
            "headless": True,
            "parallel_config_hash": "abc",
            "coord_store_port": 5,
            "num_redundant_experts": 0,
        }
    )
    assert t.decode_handshake(ready) == t.HandshakeMessage(
        status="READY", local=False, headless=True, parallel_config_hash="abc"
    )


@pytest.mark.parametrize(
    "payload",
    [b"", b"\xc1", msgspec.msgpack.encode({"local": True}), msgspec.msgpack.encode([1])],
)
def test_malformed_handshake_is_a_protocol_error(payload: bytes) -> None:
    with pytest.raises(BackendProtocolError):
        t.decode_handshake(payload)


def test_init_golden_bytes_and_engine_side_decode() -> None:
    assert t.encode_init(["ipc:///tmp/e-in.sock"], ["ipc:///tmp/e-out.sock"]) == INIT
    init = t.decode_init(INIT)
    assert init.addresses.inputs == ("ipc:///tmp/e-in.sock",)
    assert init.addresses.outputs == ("ipc:///tmp/e-out.sock",)
    assert init.parallel_config == {}


def test_init_without_addresses_is_refused() -> None:
    no_outputs = msgspec.msgpack.encode({"addresses": {"inputs": ["a"], "outputs": []}})
    with pytest.raises(BackendProtocolError, match="at least one"):
        t.decode_init(no_outputs)
    with pytest.raises(BackendProtocolError):
        t.decode_init(msgspec.msgpack.encode({"parallel_config": {}}))


def test_abort_golden_bytes() -> None:
    assert t.encode_abort(["r1-0", "r1-1"]) == ABORT
    assert t.decode_abort(ABORT) == ("r1-0", "r1-1")
    with pytest.raises(BackendProtocolError):
        t.decode_abort(msgspec.msgpack.encode([1]))


def test_engine_identity_is_two_bytes_little_endian() -> None:
    assert t.engine_identity(0) == b"\x00\x00"
    assert t.engine_identity(1) == b"\x01\x00"
    assert t.engine_identity(258) == b"\x02\x01"
    assert t.engine_index_of(b"\x02\x01") == 258
    with pytest.raises(ValueError, match="2-byte"):
        t.engine_identity(65536)
    with pytest.raises(BackendProtocolError):
        t.engine_index_of(b"\x01")


def test_request_type_frames() -> None:
    frames = {kind: kind.frame for kind in t.RequestType}
    assert frames[t.RequestType.ADD] == b"\x00"
    assert frames[t.RequestType.ABORT] == b"\x01"
    assert frames[t.RequestType.START_DP_WAVE] == b"\x02"
    assert frames[t.RequestType.UTILITY] == b"\x03"
    assert all(t.RequestType.of_frame(frame) is kind for kind, frame in frames.items())
    for bad in (b"", b"\x06", b"\x00\x00"):
        with pytest.raises(BackendProtocolError):
            t.RequestType.of_frame(bad)


def test_dead_sentinel_is_exactly_one_frame() -> None:
    assert t.ENGINE_CORE_DEAD == b"ENGINE_CORE_DEAD"
    assert t.is_engine_dead([b"ENGINE_CORE_DEAD"])
    assert not t.is_engine_dead([b"ENGINE_CORE_DEAD", b""])
    assert not t.is_engine_dead([b"ENGINE_CORE_DEAD!"])
    assert not t.is_engine_dead([])
