"""The Embed RPC of vLLM's and SGLang's gRPC services: golden bytes both ways (docs/wire.md §C.8).

Golden bytes are composed with the small protobuf encoder of test_grpc_messages.py from the
field numbers and types of docs/wire.md §C, never through the generated classes: a renumbered
field or a changed type changes the bytes and fails the test.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.errors import BackendProtocolError, ClientError, UnsupportedRuntime
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire._proto import vllm_engine_pb2 as vllm
from smg_trio.wire.grpc_embed import (
    EMBED_RUNTIMES,
    GrpcEmbedding,
    build_embed,
    parse_embed_response,
)
from tests.wire.test_grpc_messages import ld, num, packed, packed_f32, wire

FLOAT32 = st.floats(width=32, allow_nan=False)


def as_float32(values: list[float]) -> tuple[float, ...]:
    """What the values read back as after a float32 round trip."""
    return struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values))


def test_vllm_embed_request_golden_bytes() -> None:
    built = build_embed(Runtime.VLLM, "e1-0", (1, 300, 2))
    assert wire(built) == ld(1, "e1-0") + ld(2, packed(2, [1, 300, 2]))


def test_vllm_embed_request_carries_the_text_when_given() -> None:
    built = build_embed(Runtime.VLLM, "e1", (5,), prompt_text="hi")
    assert wire(built) == ld(1, "e1") + ld(2, ld(1, "hi") + packed(2, [5]))


def test_sglang_embed_request_golden_bytes() -> None:
    # The placeholder sampling_params (5) stays unset: its scheduler never samples for Embed.
    built = build_embed(Runtime.SGLANG, "e1-0", (1, 300, 2))
    assert wire(built) == ld(1, "e1-0") + ld(2, packed(2, [1, 300, 2]))
    assert isinstance(built, sglang.EmbedRequest)
    assert not built.HasField("sampling_params")


def test_an_id_a_uint32_cannot_hold_is_a_client_error() -> None:
    with pytest.raises(ClientError, match="token id"):
        build_embed(Runtime.VLLM, "e1", (1, 2**32))
    with pytest.raises(ClientError, match="token id"):
        build_embed(Runtime.SGLANG, "e1", (-1,))


@pytest.mark.parametrize("runtime", [Runtime.TOKENSPEED, Runtime.MLX, Runtime.TRTLLM])
def test_runtimes_without_an_embed_we_speak_are_refused(runtime: Runtime) -> None:
    assert runtime not in EMBED_RUNTIMES
    with pytest.raises(UnsupportedRuntime):
        build_embed(runtime, "e1", (1,))


def test_vllm_embed_response_from_golden_bytes() -> None:
    data = packed_f32(1, [0.5, -0.25, 1.0]) + num(2, 7) + num(3, 3)
    parsed = parse_embed_response(vllm.EmbedResponse.FromString(data))
    assert parsed == GrpcEmbedding(values=(0.5, -0.25, 1.0), prompt_tokens=7)


def test_sglang_embed_response_from_golden_bytes() -> None:
    data = num(4, 2) + packed_f32(5, [0.125, 0.75]) + num(6, 4)
    parsed = parse_embed_response(sglang.EmbedResponse.FromString(data))
    assert parsed == GrpcEmbedding(values=(0.125, 0.75), prompt_tokens=4)


def test_the_old_sglang_layout_is_not_read_as_a_vector() -> None:
    # Fields 1-3 are reserved (the old request_id / oneof layout): a vector is only field 5.
    data = ld(1, "old") + num(4, 1) + num(6, 1)
    with pytest.raises(BackendProtocolError, match="no vector"):
        parse_embed_response(sglang.EmbedResponse.FromString(data))


@pytest.mark.parametrize(
    "response",
    [
        vllm.EmbedResponse(embedding=[0.5, 0.5], prompt_tokens=1, embedding_dim=3),
        sglang.EmbedResponse(embedding=[0.5], prompt_tokens=1, embedding_dim=0),
    ],
)
def test_a_length_other_than_the_stated_dimension_is_a_protocol_error(
    response: vllm.EmbedResponse | sglang.EmbedResponse,
) -> None:
    with pytest.raises(BackendProtocolError, match="embedding_dim"):
        parse_embed_response(response)


def test_an_empty_vector_is_a_protocol_error() -> None:
    with pytest.raises(BackendProtocolError, match="no vector"):
        parse_embed_response(vllm.EmbedResponse(prompt_tokens=3))


@given(
    values=st.lists(FLOAT32, min_size=1, max_size=64),
    prompt_tokens=st.integers(0, 2**32 - 1),
    sglang_layout=st.booleans(),
)
def test_any_answer_round_trips_through_the_bytes(
    values: list[float], prompt_tokens: int, sglang_layout: bool
) -> None:
    if sglang_layout:
        data = num(4, len(values)) + packed_f32(5, values) + num(6, prompt_tokens)
        parsed = parse_embed_response(sglang.EmbedResponse.FromString(data))
    else:
        data = packed_f32(1, values) + num(2, prompt_tokens) + num(3, len(values))
        parsed = parse_embed_response(vllm.EmbedResponse.FromString(data))
    assert parsed.values == as_float32(values)
    assert parsed.prompt_tokens == prompt_tokens


@given(
    ids=st.lists(st.integers(0, 2**32 - 1), max_size=64),
    runtime=st.sampled_from(sorted(EMBED_RUNTIMES, key=lambda r: r.value)),
)
def test_any_ids_are_sent_as_one_packed_field(ids: list[int], runtime: Runtime) -> None:
    built = build_embed(runtime, "r", ids)
    tokenized = ld(2, packed(2, ids)) if ids else ld(2, b"")
    assert wire(built) == ld(1, "r") + tokenized
