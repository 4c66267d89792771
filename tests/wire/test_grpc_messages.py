"""gRPC Generate requests and stream messages: golden bytes per engine, per-runtime rules, parsing.

Every golden byte string is composed with the small protobuf encoder below from the field
numbers and types of docs/wire.md §C, never through the generated classes: a renumbered field, a
changed type or a missing explicit default changes the bytes and fails the test. Response
bytes are composed the same way and parsed through the generated classes.
"""

from __future__ import annotations

import struct
from typing import Any

import grpclib.const
import pytest
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.errors import BackendProtocolError, ClientError, UnsupportedRuntime
from smg_trio.neutral.events import TokenLogprob, TopLogprob
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import EngineRequest, SamplingParams
from smg_trio.wire._proto import mlx_engine_pb2 as mlx
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire._proto import tokenspeed_scheduler_pb2 as tokenspeed
from smg_trio.wire._proto import trtllm_service_pb2 as trtllm
from smg_trio.wire._proto import vllm_engine_pb2 as vllm
from smg_trio.wire.grpc_messages import (
    build_abort,
    build_generate,
    build_mlx_generate,
    build_sglang_generate,
    build_tokenspeed_generate,
    build_trtllm_generate,
    build_vllm_generate,
)
from smg_trio.wire.grpc_responses import (
    GrpcChunk,
    GrpcComplete,
    GrpcStatus,
    http_status_for_grpc,
    parse_generate_response,
)

# ---- a minimal protobuf encoder (wire types 0, 2, 5) ----------------------------------------


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int32/int64 are 10-byte two's complement varints
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def num(field: int, value: int) -> bytes:
    return varint(field << 3) + varint(value)


def f32(field: int, value: float) -> bytes:
    return varint(field << 3 | 5) + struct.pack("<f", value)


def ld(field: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return varint(field << 3 | 2) + varint(len(data)) + data


def packed(field: int, values: list[int]) -> bytes:
    return ld(field, b"".join(varint(v) for v in values))


def packed_f32(field: int, values: list[float]) -> bytes:
    return ld(field, b"".join(struct.pack("<f", v) for v in values))


def request(
    runtime: Runtime, endpoint: Endpoint, prompt: tuple[int, ...] = (1, 2, 3), **sampling: Any
) -> EngineRequest:
    """What the gateway hands `runtime`'s builder: the client's sampling, finalized."""
    plan = GeneratePlan(
        request_id="r1",
        endpoint=endpoint,
        model="m",
        prompt_ids=prompt,
        sampling=SamplingParams(**sampling),
    )
    (finalized,) = finalize(plan, WorkerTarget(runtime=runtime, wire=Wire.GRPC), None).requests
    return finalized


GRPC_RUNTIMES = [Runtime.SGLANG, Runtime.VLLM, Runtime.TOKENSPEED, Runtime.MLX, Runtime.TRTLLM]


def wire(message: Message) -> bytes:
    return message.SerializeToString(deterministic=True)


# ---- request golden bytes -------------------------------------------------------------------


def test_vllm_chat_request_golden_bytes() -> None:
    # Chat forces skip_special_tokens on; no_stop_trim only matters for completions.
    built = build_vllm_generate(
        request(
            Runtime.VLLM,
            Endpoint.CHAT,
            temperature=0.5,
            top_p=0.9,
            max_tokens=16,
            stop=("END",),
            stop_token_ids=(7,),
            skip_special_tokens=False,
            no_stop_trim=True,
            seed=42,
        ),
        "r1",
    )
    sampling = b"".join(
        [
            f32(1, 0.5),  # temperature (optional: sent because set)
            f32(2, 0.9),  # top_p
            f32(7, 1.0),  # repetition_penalty: neutral, sent explicitly
            num(8, 16),  # max_tokens
            ld(10, "END"),  # stop
            packed(11, [7]),  # stop_token_ids
            num(12, 1),  # skip_special_tokens
            num(13, 1),  # spaces_between_special_tokens
            num(15, 1),  # n
            num(24, 42),  # seed
        ]
    )
    assert wire(built) == ld(1, "r1") + ld(2, packed(2, [1, 2, 3])) + ld(4, sampling) + num(5, 1)


def test_vllm_completion_maps_no_stop_trim_and_keeps_skip_special_tokens() -> None:
    built = build_vllm_generate(
        request(Runtime.VLLM, Endpoint.COMPLETION, skip_special_tokens=False, no_stop_trim=True),
        "r1",
    )
    assert not built.sampling_params.skip_special_tokens
    assert built.sampling_params.include_stop_str_in_output
    assert not built.sampling_params.HasField("temperature")  # unset: the engine's 1.0
    assert not built.sampling_params.HasField("max_tokens")


def test_sglang_generate_request_golden_bytes() -> None:
    built = build_sglang_generate(
        request(
            Runtime.SGLANG,
            Endpoint.GENERATE,
            max_tokens=8,
            min_tokens=2,
            stop_token_ids=(13,),
            skip_special_tokens=False,
            no_stop_trim=True,
            logprobs=2,
            seed=5,  # SGLang's service has no seed field: not sent
        ),
        "r1",
    )
    sampling = b"".join(
        [
            f32(1, 1.0),  # temperature: unset would be 0.0 = greedy
            f32(2, 1.0),  # top_p
            num(3, -1),  # top_k: all tokens
            f32(7, 1.0),  # repetition_penalty
            num(8, 8),  # max_new_tokens
            packed(10, [13]),  # stop_token_ids
            num(12, 1),  # spaces_between_special_tokens
            num(17, 1),  # n
            num(18, 2),  # min_new_tokens
            num(20, 1),  # no_stop_trim
        ]
    )
    assert wire(built) == b"".join(
        [
            ld(1, "r1"),
            ld(2, packed(2, [1, 2, 3])),
            ld(4, sampling),
            num(5, 1),  # return_logprob
            num(7, 2),  # top_logprobs_num
            num(17, 1),  # stream
        ]
    )


def test_sglang_chat_forces_skip_special_tokens_and_never_gets_stop_strings() -> None:
    built = build_sglang_generate(
        request(Runtime.SGLANG, Endpoint.CHAT, skip_special_tokens=False), "r1"
    )
    assert built.sampling_params.skip_special_tokens
    stripped = build_sglang_generate(request(Runtime.SGLANG, Endpoint.CHAT, stop=("x",)), "r1")
    assert not stripped.sampling_params.stop
    unresolved = EngineRequest(
        request_id="r1", choice_index=0, prompt_ids=(1,), sampling=SamplingParams(stop=("x",))
    )
    with pytest.raises(AssertionError, match="finalize"):
        build_sglang_generate(unresolved, "r1")


def test_tokenspeed_completion_request_golden_bytes() -> None:
    base = request(
        Runtime.TOKENSPEED,
        Endpoint.COMPLETION,
        prompt=(4,),
        temperature=0.0,
        top_k=5,
        stop=("\n",),
        seed=9,
        no_stop_trim=True,
    )
    built = build_tokenspeed_generate(base, "t1", stream=False, prompt_text="hi")
    sampling = b"".join(
        [
            f32(1, 0.0),  # temperature: optional, so an explicit 0 is on the wire
            num(3, 5),  # top_k
            ld(10, "\n"),  # stop
            num(13, 1),  # skip_special_tokens
            num(14, 1),  # spaces_between_special_tokens
            num(15, 1),  # n
            num(22, 1),  # no_stop_trim
            num(23, 9),  # sampling_seed
        ]
    )
    # TokenizedInput numbers input_ids 1 and original_text 2; stream=false is omitted.
    assert wire(built) == ld(1, "t1") + ld(2, packed(1, [4]) + ld(2, "hi")) + ld(3, sampling)


def test_mlx_chat_request_golden_bytes() -> None:
    built = build_mlx_generate(
        request(Runtime.MLX, Endpoint.CHAT, top_k=-1, stop_token_ids=(2,), logprobs=1), "r1"
    )
    sampling = b"".join(
        [
            f32(2, 1.0),  # top_p
            f32(5, 1.0),  # repetition_penalty is number 5 on MLX
            packed(10, [2]),  # stop_token_ids
            num(12, 1),  # logprobs
        ]
    )
    assert wire(built) == ld(1, "r1") + ld(2, packed(2, [1, 2, 3])) + ld(4, sampling) + num(5, 1)


def test_mlx_refuses_string_stops() -> None:
    with pytest.raises(ClientError) as caught:  # finalize's refusal, before any builder
        request(Runtime.MLX, Endpoint.CHAT, stop=("x",))
    assert caught.value.status == 400
    assert caught.value.code == "invalid_request_parameters"
    assert caught.value.param == "stop"


def test_trtllm_chat_request_golden_bytes() -> None:
    built = build_trtllm_generate(
        request(
            Runtime.TRTLLM,
            Endpoint.CHAT,
            temperature=0.75,
            top_k=0,
            stop=("END",),
            stop_token_ids=(5,),
            no_stop_trim=True,
        ),
        "r1",
    )
    assert wire(built) == b"".join(
        [
            ld(1, "r1"),
            ld(2, packed(2, [1, 2, 3])),  # input_token_ids
            ld(3, num(1, 1) + num(2, 1) + f32(9, 0.75)),  # beam 1, 1 sequence, temperature
            ld(4, b""),  # output_config, empty
            num(5, 2048),  # max_tokens: required, chat default
            num(6, 1),  # streaming
            ld(21, "END"),  # stop words; stop_token_ids stay empty for chat
        ]
    )


def test_trtllm_completion_keeps_ids_and_maps_no_stop_trim() -> None:
    built = build_trtllm_generate(
        request(
            Runtime.TRTLLM,
            Endpoint.COMPLETION,
            stop_token_ids=(5,),
            no_stop_trim=True,
            min_tokens=3,
        ),
        "r1",
    )
    assert list(built.stop_token_ids) == [5]
    assert built.include_stop_token_in_output
    assert built.max_tokens == 16
    assert built.sampling_config.min_tokens == 3


def test_build_generate_dispatches_to_each_engine() -> None:
    req = request(Runtime.VLLM, Endpoint.GENERATE, max_tokens=4)
    assert isinstance(build_generate(Runtime.VLLM, req, "r1"), vllm.GenerateRequest)
    assert isinstance(build_generate(Runtime.SGLANG, req, "r1"), sglang.GenerateRequest)
    assert isinstance(build_generate(Runtime.TOKENSPEED, req, "r1"), tokenspeed.GenerateRequest)
    assert isinstance(build_generate(Runtime.MLX, req, "r1"), mlx.GenerateRequest)
    assert isinstance(build_generate(Runtime.TRTLLM, req, "r1"), trtllm.GenerateRequest)
    with pytest.raises(UnsupportedRuntime):
        build_generate(Runtime.UNSPECIFIED, req, "r1")


def test_abort_requests() -> None:
    assert [wire(m) for m in build_abort(Runtime.VLLM, ["a", "b"])] == [ld(1, "a") + ld(1, "b")]
    assert [wire(m) for m in build_abort(Runtime.MLX, ["a"])] == [ld(1, "a")]
    for engine in (Runtime.SGLANG, Runtime.TOKENSPEED, Runtime.TRTLLM):
        assert [wire(m) for m in build_abort(engine, ["a", "b"])] == [ld(1, "a"), ld(1, "b")]


@pytest.mark.parametrize(
    ("engine", "field", "value"),
    [
        (Runtime.VLLM, "seed", 2**31),
        (Runtime.MLX, "seed", -(2**31) - 1),
        (Runtime.TOKENSPEED, "seed", -1),
        (Runtime.TRTLLM, "seed", -1),
        (Runtime.VLLM, "top_k", -2),
        (Runtime.SGLANG, "max_tokens", 0),
        (Runtime.TRTLLM, "max_tokens", 2**32),
        (Runtime.VLLM, "stop_token_ids", (-1,)),
    ],
)
def test_values_a_field_cannot_hold_are_client_errors(
    engine: Runtime, field: str, value: Any
) -> None:
    with pytest.raises(ClientError) as caught:
        build_generate(engine, request(engine, Endpoint.COMPLETION, **{field: value}), "r1")
    assert caught.value.param == field


@given(
    engine=st.sampled_from(GRPC_RUNTIMES),
    seed=st.none() | st.integers(),
    top_k=st.none() | st.integers(),
    max_tokens=st.none() | st.integers(),
    min_tokens=st.integers(),
    logprobs=st.none() | st.integers(),
)
def test_any_integer_builds_or_is_a_client_error(
    engine: Runtime,
    seed: int | None,
    top_k: int | None,
    max_tokens: int | None,
    min_tokens: int,
    logprobs: int | None,
) -> None:
    """protobuf raises ValueError for out-of-range ints: finalize and the builders must never
    let it out (finalize refuses min_tokens on MLX, whose wire has no such field)."""
    try:
        req = request(
            engine,
            Endpoint.COMPLETION,
            seed=seed,
            top_k=top_k,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            logprobs=logprobs,
        )
        built = build_generate(engine, req, "r1")
    except ClientError:
        return
    assert type(built).FromString(wire(built)) == built


# ---- stream messages ------------------------------------------------------------------------


def test_vllm_chunk_with_logprobs() -> None:
    top = ld(3, packed_f32(1, [-0.5, -2.0]) + packed(2, [7, 9])) + ld(
        3, packed_f32(1, [-1.0]) + packed(2, [8])
    )
    logprobs = packed_f32(1, [-0.5, -1.0]) + packed(2, [7, 8]) + top
    data = ld(1, packed(1, [7, 8]) + num(2, 3) + num(3, 2) + ld(5, logprobs) + num(7, 1))
    assert parse_generate_response(vllm.GenerateResponse.FromString(data)) == GrpcChunk(
        index=1,
        token_ids=(7, 8),
        prompt_tokens=3,
        completion_tokens=2,
        cached_tokens=0,
        logprobs=(
            TokenLogprob(7, -0.5, top=(TopLogprob(7, -0.5), TopLogprob(9, -2.0))),
            TokenLogprob(8, -1.0, top=(TopLogprob(8, -1.0),)),
        ),
    )


def test_vllm_complete_with_matched_stop_string() -> None:
    data = ld(2, packed(1, [9]) + ld(2, "stop") + num(3, 3) + num(4, 1) + num(5, 2) + ld(11, "END"))
    assert parse_generate_response(vllm.GenerateResponse.FromString(data)) == GrpcComplete(
        index=0,
        token_ids=(9,),
        finish_reason="stop",
        stop_reason="END",
        prompt_tokens=3,
        completion_tokens=1,
        cached_tokens=2,
    )


def test_sglang_chunk_and_complete_with_matched_token() -> None:
    chunk = ld(1, "s1") + ld(2, packed(1, [5]) + num(2, 2) + num(3, 1) + num(8, 0))
    assert parse_generate_response(sglang.GenerateResponse.FromString(chunk)) == GrpcChunk(
        index=0, token_ids=(5,), prompt_tokens=2, completion_tokens=1, cached_tokens=0
    )
    complete = ld(1, "s1") + ld(3, packed(1, [5, 13]) + ld(2, "stop") + num(4, 2) + num(8, 13))
    parsed = parse_generate_response(sglang.GenerateResponse.FromString(complete))
    assert parsed == GrpcComplete(
        index=0,
        token_ids=(5, 13),
        finish_reason="stop",
        stop_reason=13,
        prompt_tokens=0,
        completion_tokens=2,
        cached_tokens=0,
    )


def test_tokenspeed_complete_without_matched_stop() -> None:
    data = ld(1, "t1") + ld(3, packed(1, [6, 7]) + ld(2, "length") + num(3, 2) + num(9, 1))
    parsed = parse_generate_response(tokenspeed.GenerateResponse.FromString(data))
    assert parsed == GrpcComplete(
        index=1,
        token_ids=(6, 7),
        finish_reason="length",
        stop_reason=None,
        prompt_tokens=2,
        completion_tokens=0,
        cached_tokens=0,
    )


def test_mlx_complete_with_matched_stop_token_id() -> None:
    data = ld(2, packed(1, [8, 2]) + ld(2, "stop") + num(8, 2))
    parsed = parse_generate_response(mlx.GenerateResponse.FromString(data))
    assert isinstance(parsed, GrpcComplete)
    assert (parsed.token_ids, parsed.stop_reason) == ((8, 2), 2)
    zero = parse_generate_response(
        mlx.GenerateResponse.FromString(ld(2, ld(2, "stop") + num(8, 0)))
    )
    assert isinstance(zero, GrpcComplete)
    assert zero.stop_reason == 0  # optional field: token id 0 is a real match, not "none"


def test_trtllm_chunk_and_stop_word_complete() -> None:
    row = num(1, 4) + f32(2, -0.5) + ld(3, num(1, 4) + f32(2, -0.5))
    chunk = ld(1, "g1") + ld(2, packed(1, [4]) + num(2, 1) + num(3, 3) + num(4, 1) + ld(6, row))
    assert parse_generate_response(trtllm.GenerateResponse.FromString(chunk)) == GrpcChunk(
        index=1,
        token_ids=(4,),
        prompt_tokens=3,
        completion_tokens=1,
        cached_tokens=0,
        logprobs=(TokenLogprob(4, -0.5, top=(TopLogprob(4, -0.5),)),),
    )
    complete = ld(1, "g1") + ld(3, packed(1, [4, 5]) + ld(3, "stop_word") + ld(4, "</s>"))
    parsed = parse_generate_response(trtllm.GenerateResponse.FromString(complete))
    assert isinstance(parsed, GrpcComplete)
    assert (parsed.finish_reason, parsed.stop_reason) == ("stop", "</s>")


def test_malformed_stream_messages_are_protocol_errors() -> None:
    with pytest.raises(BackendProtocolError, match="neither chunk nor complete"):
        parse_generate_response(vllm.GenerateResponse())
    with pytest.raises(BackendProtocolError, match="finish reason"):
        parse_generate_response(sglang.GenerateResponse.FromString(ld(3, packed(1, [1]))))
    uneven = ld(5, packed_f32(1, [-0.5]) + packed(2, [7, 8]))
    with pytest.raises(BackendProtocolError, match="different lengths"):
        parse_generate_response(vllm.GenerateResponse.FromString(ld(1, uneven)))


# ---- gRPC status → HTTP ---------------------------------------------------------------------

HTTP_FOR_GRPC = {
    GrpcStatus.OK: 500,
    GrpcStatus.CANCELLED: 400,
    GrpcStatus.UNKNOWN: 500,
    GrpcStatus.INVALID_ARGUMENT: 400,
    GrpcStatus.DEADLINE_EXCEEDED: 504,
    GrpcStatus.NOT_FOUND: 404,
    GrpcStatus.ALREADY_EXISTS: 409,
    GrpcStatus.PERMISSION_DENIED: 403,
    GrpcStatus.RESOURCE_EXHAUSTED: 429,
    GrpcStatus.FAILED_PRECONDITION: 400,
    GrpcStatus.ABORTED: 409,
    GrpcStatus.OUT_OF_RANGE: 400,
    GrpcStatus.UNIMPLEMENTED: 501,
    GrpcStatus.INTERNAL: 500,
    GrpcStatus.UNAVAILABLE: 503,
    GrpcStatus.DATA_LOSS: 500,
    GrpcStatus.UNAUTHENTICATED: 401,
}


def test_http_status_for_every_grpc_status() -> None:
    assert {code: http_status_for_grpc(code) for code in GrpcStatus} == HTTP_FOR_GRPC
    assert http_status_for_grpc(99) == 500


def test_status_numbers_agree_with_grpclib() -> None:
    assert {s.name: s.value for s in grpclib.const.Status} == {s.name: s.value for s in GrpcStatus}
    assert http_status_for_grpc(grpclib.const.Status.UNAVAILABLE) == 503
