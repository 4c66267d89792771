"""vLLM EngineCore wire: golden bytes for every message, decode tolerance, validation, spec cases.

Each golden hex literal was derived by msgpack-encoding the layout of docs/wire.md §A as plain Python
lists and dicts (shown next to it as `*_LAYOUT`), never through our structs: a moved field,
renamed key or changed type changes the bytes and fails the test.
"""

from __future__ import annotations

import struct
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.errors import BackendProtocolError, ClientError
from smg_trio.neutral.events import TokenLogprob, TopLogprob
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import (
    ConstraintKind,
    EosIds,
    SamplingParams,
    StructuredConstraint,
)
from smg_trio.wire import vllm_zmq as v
from smg_trio.wire import vllm_zmq_outputs as o
from smg_trio.wire.msgpack_arrays import WireArray

Ext = msgspec.msgpack.Ext

VLLM_ADD_LAYOUT: list[Any] = [
    "r1",
    [1, 2, 3],
    None,
    {
        "temperature": 0.5,
        "stop_token_ids": [7, 9],
        "max_tokens": 97,
        "_eos_token_id": 5,
        "_all_stop_token_ids": [5, 7, 9],
    },
    None,
    1.5,
    None,
    None,
    None,
    *[None, None, 0, 0, 0, None, False, None, None, None, False, None, None],
]
# msgspec writes the header of a struct map with more than 15 fields (and omitted defaults)
# as map16 (`de 00 05`), exactly as vLLM's own SamplingParams map is written; a plain dict
# would get a fixmap (`85`). Both are valid msgpack; the golden pins what we send.
VLLM_ADD = bytes.fromhex(
    "dc0016a2723193010203c0de0005ab74656d7065726174757265cb3fe0000000000000ae73746f705f746f6b"
    "656e5f696473920709aa6d61785f746f6b656e7361ad5f656f735f746f6b656e5f696405b35f616c6c5f7374"
    "6f705f746f6b656e5f69647393050709c0cb3ff8000000000000c0c0c0c0c0000000c0c2c0c0c0c2c0c0"
)
UTILITY_LAYOUT: list[Any] = [0, 42, "is_sleeping", []]
UTILITY = bytes.fromhex("94002aab69735f736c656570696e6790")

VLLM_REGISTRATION = bytes.fromhex(
    "de0019ad6d61785f6d6f64656c5f6c656ecd0800ae6e756d5f6770755f626c6f636b73cd0200aa626c6f636b"
    "5f73697a6510b064705f73746174735f61646472657373c0a56474797065a7666c6f61743332ac766c6c6d5f"
    "76657273696f6ea6302e33322e30aa776f726c645f73697a6501b2646174615f706172616c6c656c5f73697a"
    "6501b474656e736f725f706172616c6c656c5f73697a6501b6706970656c696e655f706172616c6c656c5f73"
    "697a6501bc6465636f64655f636f6e746578745f706172616c6c656c5f73697a6501b2646174615f70617261"
    "6c6c656c5f72616e6b00ac6d61785f6e756d5f73657173cd0100b66d61785f6e756d5f626174636865645f74"
    "6f6b656e73cd0800ab696e7374616e63655f6964a474696e79ad737570706f7274735f6c6f7261c2a96d6178"
    "5f6c6f72617300b06d616d62615f626c6f636b5f73697a65c0b46b765f63616368655f73697a655f746f6b65"
    "6e73cd2000b86b765f63616368655f6d61785f636f6e63757272656e6379cb4010000000000000b06b765f65"
    "76656e74735f636f6e666967c0b77765696768745f7472616e736665725f6261636b656e64c0b1656e61626c"
    "655f736c6565705f6d6f6465c2bd737570706f7274735f64726166745f7765696768745f75706461746573c2"
    "be6566666563746976655f617474656e74696f6e5f626c6f636b5f73697a65c0"
)
REGISTRATION_LAYOUT: dict[str, Any] = {
    "max_model_len": 2048,
    "num_gpu_blocks": 512,
    "block_size": 16,
    "dp_stats_address": None,
    "dtype": "float32",
    "vllm_version": "0.32.0",
    "world_size": 1,
    "data_parallel_size": 1,
    "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "decode_context_parallel_size": 1,
    "data_parallel_rank": 0,
    "max_num_seqs": 256,
    "max_num_batched_tokens": 2048,
    "instance_id": "tiny",
    "supports_lora": False,
    "max_loras": 0,
    "mamba_block_size": None,
    "kv_cache_size_tokens": 8192,
    "kv_cache_max_concurrency": 4.0,
    "kv_events_config": None,
    "weight_transfer_backend": None,
    "enable_sleep_mode": False,
    "supports_draft_weight_updates": False,
    "effective_attention_block_size": None,
}


def _output_layout(rid: str, tokens: list[int], logprobs: Any, finish: Any, stop: Any) -> list[Any]:
    tail = [None, None, None, None, None, None, 0, None, None, None, None, None]
    return [rid, tokens, logprobs, None, None, finish, stop, *tail]


OUTPUTS_RUNNING_LAYOUT: list[Any] = [
    0,
    [_output_layout("r1", [10], None, None, None)],
    *[None, 2.5, None, None, None, None, None],
]
OUTPUTS_RUNNING = bytes.fromhex(
    "990091dc0013a27231910ac0c0c0c0c0c0c0c0c0c0c000c0c0c0c0c0c0cb4004000000000000c0c0c0c0c0"
)
LOGPROBS_LAYOUT: list[Any] = [
    ["<i4", [1, 3], Ext(3, struct.pack("<3i", 11, 11, 4))],
    ["<f4", [1, 3], Ext(3, struct.pack("<3f", -0.5, -0.5, -1.25))],
    ["<i8", [1], Ext(3, struct.pack("<q", 1))],
    None,
]
OUTPUTS_FINISHED_LAYOUT: list[Any] = [
    1,
    [
        _output_layout("r1", [11], LOGPROBS_LAYOUT, 1, None),
        _output_layout("r2", [], None, 0, 9),
    ],
    *[None, 3.0, None, None, None, None, None],
]
OUTPUTS_FINISHED = bytes.fromhex(
    "990192dc0013a27231910b9493a33c6934920103c70c030b0000000b0000000400000093a33c6634920103c7"
    "0c03000000bf000000bf0000a0bf93a33c69389101d7030100000000000000c0c0c001c0c0c0c0c0c0c000c0"
    "c0c0c0c0dc0013a2723290c0c0c00009c0c0c0c0c0c000c0c0c0c0c0c0cb4008000000000000c0c0c0c0c0"
)
UTILITY_REPLY_LAYOUT: list[Any] = [
    0,
    [],
    None,
    4.0,
    [42, None, [None, True]],
    None,
    None,
    None,
    None,
]
UTILITY_REPLY = bytes.fromhex("990090c0cb4010000000000000932ac092c0c3c0c0c0c0")


DEFAULT_SAMPLING = SamplingParams()
MODEL_EOS = EosIds(5, (7,))


def _request(
    sampling: SamplingParams = DEFAULT_SAMPLING,
    *,
    eos: EosIds = MODEL_EOS,
    prompt: tuple[int, ...] = (1, 2, 3),
    max_model_len: int = 100,
    vocab_size: int | None = None,
    request_id: str = "r1",
) -> v.EngineCoreRequest:
    """The ADD for `sampling` as the gateway sends it: finalized (EOS folded), then built."""
    plan = GeneratePlan(
        request_id=request_id,
        endpoint=Endpoint.COMPLETION,
        model="m",
        prompt_ids=prompt,
        sampling=sampling,
    )
    target = WorkerTarget(runtime=Runtime.VLLM, wire=Wire.ZMQ, eos_ids=eos)
    (request,) = finalize(plan, target, None).requests
    return v.build_request(
        request,
        engine_request_id=request_id,
        max_model_len=max_model_len,
        arrival_time=1.5,
        vocab_size=vocab_size,
    )


def _wire_sampling(request: v.EngineCoreRequest) -> dict[str, Any]:
    layout = msgspec.msgpack.decode(v.encode_request(request))
    assert isinstance(layout, list)
    sampling = layout[3]
    assert isinstance(sampling, dict)
    return sampling


def test_layouts_are_what_the_golden_bytes_hold() -> None:
    sampling_fixmap = b"\x85\xabtemperature"
    assert (
        msgspec.msgpack.encode(VLLM_ADD_LAYOUT).replace(
            sampling_fixmap, b"\xde\x00\x05" + sampling_fixmap[1:]
        )
        == VLLM_ADD
    )
    for layout, golden in [
        (UTILITY_LAYOUT, UTILITY),
        (REGISTRATION_LAYOUT, VLLM_REGISTRATION),
        (OUTPUTS_RUNNING_LAYOUT, OUTPUTS_RUNNING),
        (OUTPUTS_FINISHED_LAYOUT, OUTPUTS_FINISHED),
        (UTILITY_REPLY_LAYOUT, UTILITY_REPLY),
    ]:
        assert msgspec.msgpack.encode(layout) == golden


def test_add_golden_bytes_and_round_trip() -> None:
    request = _request(SamplingParams(temperature=0.5, stop_token_ids=(7, 9)))
    assert v.encode_request(request) == VLLM_ADD
    assert v.decode_request(VLLM_ADD) == request


GATED_ADD_LAYOUT: list[Any] = [
    "r1",
    [1, 2, 3],
    None,
    {
        "temperature": 0.5,
        "stop_token_ids": [7],
        "max_tokens": 97,
        "structured_outputs": {"regex": "a+", "_backend": "xgrammar", "_backend_was_auto": True},
        "_eos_token_id": 5,
        "_all_stop_token_ids": [5, 7],
    },
    None,
    1.5,
    None,
    None,
    None,
    *[None, None, 0, 0, 0, None, False, None],
    False,  # 17: reasoning_ended: the grammar waits for the reasoning's end (§A.5)
    *[None, False, None, None],
]
GATED_ADD = bytes.fromhex(
    "dc0016a2723193010203c0de0006ab74656d7065726174757265cb3fe0000000000000ae73746f705f746f6b"
    "656e5f6964739107aa6d61785f746f6b656e7361b2737472756374757265645f6f75747075747383a5726567"
    "6578a2612ba85f6261636b656e64a8786772616d6d6172b15f6261636b656e645f7761735f6175746fc3ad5f"
    "656f735f746f6b656e5f696405b35f616c6c5f73746f705f746f6b656e5f696473920507c0cb3ff800000000"
    "0000c0c0c0c0c0000000c0c2c0c2c0c2c0c0"
)


@pytest.mark.parametrize(("after_reasoning", "sent"), [(True, False), (False, True), (None, None)])
def test_reasoning_ended_golden_bytes(after_reasoning: bool | None, sent: bool | None) -> None:
    """A constraint after the reasoning is `reasoning_ended: false`; reasoning off for the
    request, true; a model without a reasoning parser, nil (docs/wire.md §A.5)."""
    sampling_fixmap = b"\x86\xabtemperature"
    layout = [*GATED_ADD_LAYOUT[:17], sent, *GATED_ADD_LAYOUT[18:]]
    golden = msgspec.msgpack.encode(layout).replace(
        sampling_fixmap, b"\xde\x00\x06" + sampling_fixmap[1:]
    )
    if after_reasoning is True:
        assert golden == GATED_ADD
    constraint = StructuredConstraint(
        kind=ConstraintKind.REGEX, param="guided_regex", text="a+", after_reasoning=after_reasoning
    )
    request = _request(SamplingParams(temperature=0.5, constraint=constraint))
    assert v.encode_request(request) == golden
    assert v.decode_request(golden).reasoning_ended is sent


def test_utility_call_golden_bytes() -> None:
    call = v.UtilityCall(client_index=0, call_id=42, method="is_sleeping")
    assert v.encode_utility_call(call) == UTILITY
    assert v.decode_utility_call(UTILITY) == call


def test_registration_golden_bytes_send_every_key() -> None:
    response = v.ReadyResponse(
        max_model_len=2048,
        num_gpu_blocks=512,
        block_size=16,
        dtype="float32",
        vllm_version="0.32.0",
        max_num_seqs=256,
        max_num_batched_tokens=2048,
        instance_id="tiny",
        kv_cache_size_tokens=8192,
        kv_cache_max_concurrency=4.0,
    )
    assert v.encode_ready_response(response) == VLLM_REGISTRATION
    assert v.decode_ready_response(VLLM_REGISTRATION) == response


def test_registration_decodes_loosely() -> None:
    sparse = msgspec.msgpack.encode(
        {"max_model_len": 4096, "coord_store_port": 1, "supports_lora": True, "new_key": [1]}
    )
    response = v.decode_ready_response(sparse)
    assert (response.max_model_len, response.supports_lora, response.block_size) == (4096, True, 16)
    with pytest.raises(BackendProtocolError):
        v.decode_ready_response(msgspec.msgpack.encode({"num_gpu_blocks": 1}))
    with pytest.raises(BackendProtocolError):
        v.decode_ready_response(b"")
    with pytest.raises(BackendProtocolError):
        v.decode_ready_response(msgspec.msgpack.encode({"max_model_len": 0}))


def test_outputs_golden_bytes_running() -> None:
    outputs = o.EngineCoreOutputs(
        outputs=(o.EngineCoreOutput(request_id="r1", new_token_ids=(10,)),), timestamp=2.5
    )
    assert o.encode_outputs(outputs) == OUTPUTS_RUNNING
    assert o.decode_outputs([OUTPUTS_RUNNING]) == outputs


def test_outputs_golden_bytes_finished_with_logprobs() -> None:
    position = TokenLogprob(
        token_id=11,
        logprob=-0.5,
        rank=1,
        top=(TopLogprob(token_id=11, logprob=-0.5), TopLogprob(token_id=4, logprob=-1.25)),
    )
    outputs = o.EngineCoreOutputs(
        engine_index=1,
        outputs=(
            o.EngineCoreOutput(
                request_id="r1",
                new_token_ids=(11,),
                new_logprobs=o.encode_logprobs([position]),
                finish_reason=o.FinishReason.LENGTH,
            ),
            o.EngineCoreOutput(
                request_id="r2", new_token_ids=(), finish_reason=o.FinishReason.STOP, stop_reason=9
            ),
        ),
        timestamp=3.0,
    )
    assert o.encode_outputs(outputs) == OUTPUTS_FINISHED
    decoded = o.decode_outputs([OUTPUTS_FINISHED])
    assert decoded == outputs
    first, second = decoded.outputs
    assert first.new_logprobs is not None
    assert o.decode_logprobs(first.new_logprobs, [OUTPUTS_FINISHED]) == (position,)
    assert (o.finish_reason_text(first.finish_reason), first.stop_reason) == ("length", None)
    assert (o.finish_reason_text(second.finish_reason), second.stop_reason) == ("stop", 9)


def test_utility_reply_golden_bytes() -> None:
    reply = o.EngineCoreOutputs(
        utility_output=o.UtilityOutput(call_id=42, result=(None, True)), timestamp=4.0
    )
    assert o.encode_outputs(reply) == UTILITY_REPLY
    utility = o.decode_outputs([UTILITY_REPLY]).utility_output
    assert utility == o.UtilityOutput(call_id=42, failure_message=None, result=(None, True))


def test_output_decoders_fill_missing_trailing_fields() -> None:
    # vLLM 0.26-era arrays: 14-element outputs, 8-element batch; minimal: required prefix only.
    short = msgspec.msgpack.encode(
        [2, [["r1", [5], None, None, None, 0, 5, None, None, None, None, None, None, 0]], None, 1.0]
    )
    outputs = o.decode_outputs([short])
    assert outputs.engine_index == 2
    assert outputs.outputs[0].stop_reason == 5
    assert outputs.outputs[0].error is None
    assert outputs.weight_version is None
    minimal = o.decode_outputs([msgspec.msgpack.encode([0, [["r1", []]]])])
    assert minimal.outputs == (o.EngineCoreOutput(request_id="r1", new_token_ids=()),)
    assert o.decode_outputs([msgspec.msgpack.encode([])]) == o.EngineCoreOutputs()


def test_output_decoders_ignore_extra_trailing_fields() -> None:
    future_output = _output_layout("r1", [1], None, 3, None)
    future_output[18] = {"code": "engine_paused", "message": "paused", "retryable": True}
    future_output += ["a future field", {"x": 1}]
    future = msgspec.msgpack.encode([0, [future_output], None, 1.0, *[None] * 5, "future", 7])
    output = o.decode_outputs([future]).outputs[0]
    assert output.error == o.RequestError(code="engine_paused", message="paused", retryable=True)
    assert o.finish_reason_text(output.finish_reason) == "error"


def test_request_decoder_tolerates_short_and_long_arrays() -> None:
    sampling = {"max_tokens": 4}
    required_only = ["r1", [1], None, sampling, None, 1.0, None, None, None]
    decoded = v.decode_request(msgspec.msgpack.encode(required_only))
    assert decoded.client_index == 0
    assert decoded.sampling_params == v.VllmSamplingParams(max_tokens=4)
    longer = [*VLLM_ADD_LAYOUT, "a future field", 1]
    assert v.decode_request(msgspec.msgpack.encode(longer)) == v.decode_request(VLLM_ADD)
    with pytest.raises(BackendProtocolError):
        v.decode_request(msgspec.msgpack.encode(required_only[:8]))


def test_sampling_map_ignores_unknown_keys_from_other_senders() -> None:
    sampling = {"max_tokens": 4, "extra_args": {"k": "v"}, "logits_processors": None, "n": 1}
    layout: list[Any] = ["r1", [1], None, sampling, None, 1.0, None, None, None]
    decoded = v.decode_request(msgspec.msgpack.encode(layout))
    assert decoded.sampling_params == v.VllmSamplingParams(max_tokens=4)


def test_logprobs_resolve_aux_frames_and_refuse_pickles() -> None:
    ids = WireArray("<i8", (1, 2), 1)
    values = WireArray("<f8", (1, 2), 2)
    ranks = WireArray("<i4", (1,), Ext(3, struct.pack("<i", 2)))
    lists = o.LogprobsLists(ids, values, ranks)
    frames = [b"payload", struct.pack("<2q", 8, 3), struct.pack("<2d", -1.0, -0.25)]
    assert o.decode_logprobs(lists, frames) == (TokenLogprob(8, -1.0, 2, (TopLogprob(3, -0.25),)),)
    with pytest.raises(BackendProtocolError, match="aux frame 2"):
        o.decode_logprobs(lists, frames[:2])
    pickled = o.LogprobsLists(ids, values, WireArray("<i4", (1,), Ext(1, b"\x80\x04")))
    with pytest.raises(BackendProtocolError, match="ext type 1"):
        o.decode_logprobs(pickled, frames)
    short = o.LogprobsLists(ids, values, WireArray("<i4", (1,), Ext(3, b"\x01")))
    with pytest.raises(BackendProtocolError, match="needs 4 bytes"):
        o.decode_logprobs(short, frames)
    with pytest.raises(BackendProtocolError, match="dtype"):
        o.decode_logprobs(o.LogprobsLists(ids, values, WireArray("<c8", (1,), 1)), frames)


# Spec cases (docs/stops-and-finalize.md §5).


def test_case_13_eos_ids_merge_at_translate_time() -> None:
    wire = _wire_sampling(_request(SamplingParams(stop_token_ids=(7, 9))))
    assert wire["stop_token_ids"] == [7, 9]
    assert wire["_eos_token_id"] == 5
    assert wire["_all_stop_token_ids"] == [5, 7, 9]
    ignoring = _wire_sampling(_request(SamplingParams(stop_token_ids=(9,), ignore_eos=True)))
    assert ignoring["stop_token_ids"] == [9]
    assert "_eos_token_id" not in ignoring
    assert ignoring["_all_stop_token_ids"] == [5, 7, 9]
    assert ignoring["ignore_eos"] is True


def test_case_15_folded_ids_then_translate() -> None:
    wire = _wire_sampling(_request(SamplingParams(stop_token_ids=(9, 5, 7)), eos=EosIds(5, (7, 9))))
    assert wire["stop_token_ids"] == [9, 5, 7]
    assert wire["_eos_token_id"] == 5
    assert wire["_all_stop_token_ids"] == [5, 7, 9]


def test_eos_extra_ids_become_stop_ids_and_no_eos_means_no_keys() -> None:
    wire = _wire_sampling(_request(SamplingParams(), eos=EosIds(2, (7,))))
    assert (wire["stop_token_ids"], wire["_eos_token_id"]) == ([7], 2)
    bare = _wire_sampling(_request(SamplingParams(), eos=EosIds()))
    assert bare == {"max_tokens": 97}


def test_case_16_max_tokens_defaults_to_the_rest_of_the_context() -> None:
    assert _wire_sampling(_request())["max_tokens"] == 97
    assert _wire_sampling(_request(SamplingParams(max_tokens=8)))["max_tokens"] == 8
    # 16 is vLLM's default for an absent key: it must still be sent.
    assert _wire_sampling(_request(SamplingParams(max_tokens=16)))["max_tokens"] == 16


def test_sampling_map_is_sparse_and_never_sends_n() -> None:
    defaults = SamplingParams(
        temperature=1.0, top_p=1.0, top_k=-1, min_p=0.0, repetition_penalty=1.0, min_tokens=0
    )
    assert _wire_sampling(_request(defaults, eos=EosIds())) == {"max_tokens": 97}
    full = SamplingParams(
        temperature=0,
        top_p=0.5,
        top_k=3,
        min_p=0.1,
        presence_penalty=1,
        frequency_penalty=-1.5,
        repetition_penalty=1.2,
        seed=0,
        max_tokens=10,
        min_tokens=2,
        logprobs=0,
    )
    wire = _wire_sampling(_request(full, eos=EosIds()))
    assert wire == {
        "presence_penalty": 1.0,
        "frequency_penalty": -1.5,
        "repetition_penalty": 1.2,
        "temperature": 0.0,
        "top_p": 0.5,
        "top_k": 3,
        "min_p": 0.1,
        "seed": 0,
        "max_tokens": 10,
        "min_tokens": 2,
        "logprobs": 0,
    }
    assert all(isinstance(wire[key], float) for key in ("temperature", "presence_penalty"))


def test_case_58_fanned_out_requests_carry_their_own_seed_and_no_n() -> None:
    requests = [
        _request(SamplingParams(seed=7 + i, stop_token_ids=(9,)), request_id=f"r1-{i}")
        for i in range(2)
    ]
    wires = [_wire_sampling(request) for request in requests]
    assert [request.request_id for request in requests] == ["r1-0", "r1-1"]
    assert [wire["seed"] for wire in wires] == [7, 8]
    assert all("n" not in wire and wire["stop_token_ids"] == [9, 7] for wire in wires)


def test_case_56_a_finishing_tick_carries_its_tokens() -> None:
    ticks = [
        o.EngineCoreOutputs(outputs=(o.EngineCoreOutput("r1", (10,)),), timestamp=1.0),
        o.EngineCoreOutputs(
            outputs=(o.EngineCoreOutput("r1", (11,), finish_reason=o.FinishReason.LENGTH),),
            timestamp=2.0,
        ),
    ]
    decoded = [o.decode_outputs([o.encode_outputs(tick)]).outputs[0] for tick in ticks]
    assert [(out.new_token_ids, o.finish_reason_text(out.finish_reason)) for out in decoded] == [
        ((10,), None),
        ((11,), "length"),
    ]


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (o.FinishReason.STOP, "stop"),
        (o.FinishReason.LENGTH, "length"),
        (o.FinishReason.ABORT, "abort"),
        (o.FinishReason.ERROR, "error"),
        (o.FinishReason.REPETITION, "stop"),
        (9, "stop"),
        (None, None),
    ],
)
def test_case_57_finish_reasons(code: int | None, text: str | None) -> None:
    assert o.finish_reason_text(code) == text


# Validation: every rejection is a 400 naming its parameter. The ranges of the knobs are
# neutral.validation's (tests/neutral); here: bytes, the engine's context and vocabulary.


@pytest.mark.parametrize(
    ("sampling", "param"),
    [
        (SamplingParams(top_k=1.5), "top_k"),  # type: ignore[arg-type]
        (SamplingParams(max_tokens=0), "max_tokens"),
        (SamplingParams(max_tokens=16.0), "max_tokens"),  # type: ignore[arg-type]
        (SamplingParams(max_tokens=True), "max_tokens"),
        (SamplingParams(min_tokens=-1), "min_tokens"),
        (SamplingParams(max_tokens=4, min_tokens=5), "min_tokens"),
        (SamplingParams(seed=2**64), "seed"),
        (SamplingParams(stop_token_ids=(-1,)), "stop_token_ids"),
        (SamplingParams(stop_token_ids=(1000,)), "stop_token_ids"),
    ],
)
def test_invalid_sampling_is_rejected_naming_the_parameter(
    sampling: SamplingParams, param: str
) -> None:
    with pytest.raises(ClientError) as caught:
        _request(sampling, vocab_size=1000)
    assert (caught.value.status, caught.value.param) == (400, param)
    assert param in caught.value.message


@pytest.mark.parametrize(
    ("prompt", "max_model_len", "request_id", "param", "words"),
    [
        ((), 100, "r1", "prompt", "at least one token"),
        ((1, 1000), 100, "r1", "prompt", "[0, 1000)"),
        ((1, -1), 100, "r1", "prompt", "-1"),
        ((1, 2, 3), 3, "r1", "prompt", "max_tokens"),
        ((1, 2, 3), 2, "r1", "prompt", "context length is 2"),
        ((1,), 100, "", "request_id", "request id"),
    ],
)
def test_invalid_request_is_rejected_naming_the_parameter(
    prompt: tuple[int, ...], max_model_len: int, request_id: str, param: str, words: str
) -> None:
    with pytest.raises(ClientError) as caught:
        _request(prompt=prompt, max_model_len=max_model_len, vocab_size=1000, request_id=request_id)
    assert caught.value.param == param
    assert words in caught.value.message


def test_validation_accepts_the_edges() -> None:
    edges = SamplingParams(
        temperature=2.0,
        top_p=1.0,
        min_p=1.0,
        presence_penalty=-2.0,
        frequency_penalty=2.0,
        repetition_penalty=1e6,
        max_tokens=1,
        min_tokens=1,
        logprobs=20,
        seed=-(2**63),
        stop_token_ids=(999,),
    )
    request = _request(edges, prompt=(0, 999), max_model_len=3, vocab_size=1000)
    assert v.decode_request(v.encode_request(request)) == request


# Round trips.

f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
positions = st.integers(min_value=0, max_value=4).flatmap(
    lambda k: st.lists(
        st.builds(
            TokenLogprob,
            token_id=st.integers(0, 2**31 - 1),
            logprob=f32,
            rank=st.integers(1, 2**40),
            top=st.lists(
                st.builds(TopLogprob, token_id=st.integers(0, 2**31 - 1), logprob=f32),
                min_size=k,
                max_size=k,
            ).map(tuple),
        ),
        max_size=5,
    )
)
outputs_strategy = st.builds(
    o.EngineCoreOutput,
    request_id=st.text(max_size=12),
    new_token_ids=st.lists(st.integers(0, 2**32 - 1), max_size=6).map(tuple),
    new_logprobs=st.none() | positions.map(o.encode_logprobs),
    finish_reason=st.none() | st.sampled_from(list(o.FinishReason)).map(int),
    stop_reason=st.none() | st.integers(0, 2**32 - 1) | st.text(max_size=8),
    prefill_stats=st.none() | st.builds(o.PrefillStats, num_cached_tokens=st.integers(0, 999)),
    num_nans_in_logits=st.integers(0, 3),
)


@given(
    outputs=st.lists(outputs_strategy, max_size=4).map(tuple),
    engine_index=st.integers(0, 2**16 - 1),
    timestamp=st.floats(allow_nan=False),
    finished=st.none() | st.lists(st.text(max_size=5), max_size=3).map(tuple),
)
def test_outputs_round_trip(
    outputs: tuple[o.EngineCoreOutput, ...],
    engine_index: int,
    timestamp: float,
    finished: tuple[str, ...] | None,
) -> None:
    message = o.EngineCoreOutputs(
        engine_index=engine_index,
        outputs=outputs,
        timestamp=timestamp,
        finished_requests=finished,
    )
    frames = [o.encode_outputs(message)]
    decoded = o.decode_outputs(frames)
    assert decoded == message
    for output in decoded.outputs:
        if output.new_logprobs is not None:
            again = o.encode_logprobs(o.decode_logprobs(output.new_logprobs, frames))
            assert again == output.new_logprobs


@given(positions)
def test_logprobs_round_trip(values: list[TokenLogprob]) -> None:
    lists = o.encode_logprobs(values)
    assert o.decode_logprobs(lists, [b""]) == tuple(values)


def test_decoded_add_without_max_tokens_means_vllms_default_of_16() -> None:
    # vLLM's own frontend omits max_tokens when it equals 16; our engine must accept that ADD.
    params = msgspec.msgpack.decode(
        msgspec.msgpack.encode({"temperature": 0.5}), type=v.VllmSamplingParams
    )
    assert params.max_tokens is None
    assert params.effective_max_tokens == 16
