"""vLLM EngineCore's pooling wire (docs/wire.md §A.15, docs/pooling.md §2): golden bytes of a
pooling ADD and of a finishing output with its tensor in an aux frame, the tensor codec, and
the checks.

Each golden hex literal was derived by msgpack-encoding the layout as plain Python lists
(shown next to it as `*_LAYOUT`), never through our structs: a moved field or changed type
changes the bytes and fails the test.
"""

from __future__ import annotations

import struct
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.backends.zmq_codec import RequestStep, decode_output, encode_pooling_add
from smg_trio.errors import BackendProtocolError, ClientError, UnsupportedRuntime
from smg_trio.neutral.pooling import PoolingRequest, PoolingTask
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire import vllm_pooling as p
from smg_trio.wire import vllm_zmq as v
from smg_trio.wire.msgpack_arrays import inline_array
from smg_trio.wire.zmq_transport import RequestType

POOLING_ADD_LAYOUT: list[Any] = [
    "p1-0",
    [1, 2, 3],
    None,
    None,  # sampling_params
    [True, None, None, None, "embed", False, False, None, None, 2],  # pooling_params
    1.5,
    None,
    None,
    None,
    *[None, None, 0, 0, 0, None, False, "p1", None, None, False, None, None],
]
POOLING_ADD = bytes.fromhex(
    "dc0016a470312d3093010203c0c09ac3c0c0c0a5656d626564c2c2c0c002cb3ff8000000000000c0c0c0c0c000"
    "0000c0c2a27031c0c0c2c0c0"
)
# One finishing output: no tokens, `pooling_output` a float32 [2] tensor in aux frame 1,
# finish STOP.
POOLED_OUTPUT_LAYOUT: list[Any] = [0, [["p1-0", [], None, None, ["float32", [2], 1], 0]], None, 0.0]
POOLED_OUTPUT = bytes.fromhex(
    "94009196a470312d3090c0c093a7666c6f6174333291020100c0cb0000000000000000"
)


def embed(ids: tuple[int, ...] = (1, 2, 3), **extra: Any) -> PoolingRequest:
    return PoolingRequest(
        request_id="p1", input_index=0, prompt_ids=ids, task=PoolingTask.EMBED, **extra
    )


def test_the_golden_layouts_are_the_documented_ones() -> None:
    assert msgspec.msgpack.encode(POOLING_ADD_LAYOUT) == POOLING_ADD
    assert msgspec.msgpack.encode(POOLED_OUTPUT_LAYOUT) == POOLED_OUTPUT


def test_a_pooling_add_is_vllms_bytes() -> None:
    request = p.build_pooling_request(
        embed(), engine_request_id="p1-0", max_model_len=8, arrival_time=1.5
    )
    assert v.encode_request(request) == POOLING_ADD
    frames = encode_pooling_add(
        Runtime.VLLM, embed(), engine_request_id="p1-0", max_model_len=8, vocab_size=None,
        arrival_time=1.5,
    )  # fmt: skip
    assert frames == [RequestType.ADD.frame, POOLING_ADD]
    # The engine's side reads it back.
    decoded = v.decode_request(POOLING_ADD)
    assert decoded.sampling_params is None
    params = p.decode_pooling_params(decoded.pooling_params)
    assert (params.task, params.use_activation, params.dimensions) == ("embed", True, None)


def test_pooling_params_as_vllms_frontend_fills_them() -> None:
    assert p.pooling_params(embed(use_activation=False)).use_activation is False
    assert p.pooling_params(embed(dimensions=16)).dimensions == 16
    classify = PoolingRequest(
        request_id="c", input_index=0, prompt_ids=(1,), task=PoolingTask.CLASSIFY
    )
    assert p.pooling_params(classify).task == "classify"
    with pytest.raises(ClientError) as raised:
        p.pooling_params(msgspec.structs.replace(classify, dimensions=4))
    assert raised.value.param == "dimensions"


def test_the_output_tensor_is_read_from_its_aux_frame() -> None:
    tensor = struct.pack("<2f", 0.5, -0.25)
    (step,) = decode_output(Runtime.VLLM, [POOLED_OUTPUT, tensor]).steps
    assert isinstance(step, RequestStep)  # a finish: never the plain lane
    assert step.finish_reason == "stop"
    assert step.token_ids == ()
    assert step.pooled == ((0.5, -0.25), (2,))


def test_a_prompt_may_fill_the_context_but_no_more() -> None:
    p.build_pooling_request(embed((1,) * 8), engine_request_id="x", max_model_len=8, arrival_time=0)
    with pytest.raises(ClientError):
        p.build_pooling_request(
            embed((1,) * 9), engine_request_id="x", max_model_len=8, arrival_time=0
        )
    with pytest.raises(ClientError):
        p.build_pooling_request(
            embed((9,)), engine_request_id="x", max_model_len=8, arrival_time=0, vocab_size=9
        )


def test_tokenspeed_has_no_pooling_requests() -> None:
    with pytest.raises(UnsupportedRuntime):
        encode_pooling_add(
            Runtime.TOKENSPEED, embed(), engine_request_id="x", max_model_len=8,
            vocab_size=None, arrival_time=0,
        )  # fmt: skip


@pytest.mark.parametrize(
    "raw",
    [
        ["int64", [2], 1],  # not a float tensor
        ["float32", [3], 1],  # more values than the frame holds
        ["float32", [2], 2],  # a frame the message does not have
        ["float32", [2]],  # not a triple
        "float32",
    ],
)
def test_a_malformed_tensor_is_a_protocol_error(raw: Any) -> None:
    frames = [b"", struct.pack("<2f", 1.0, 2.0)]
    with pytest.raises(BackendProtocolError):
        p.pooled_tensor(raw, frames)


FLOAT32 = st.floats(width=32, allow_nan=False)


@given(st.lists(FLOAT32, max_size=64))
def test_float32_tensors_round_trip_inline_and_in_a_frame(values: list[float]) -> None:
    frame = p.float32_bytes(values)
    in_frame = msgspec.to_builtins(p.frame_tensor((len(values),), 1))
    assert p.pooled_tensor(in_frame, [b"", frame]) == (tuple(values), (len(values),))
    inline = msgspec.msgpack.decode(
        msgspec.msgpack.encode(inline_array("float32", (len(values),), values))
    )
    assert p.pooled_tensor(inline, [b""])[0] == tuple(values)
