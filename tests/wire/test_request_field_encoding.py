"""Each wire spells the request fields beyond stops its engine's way (docs/request-fields.md):
constraints, logit_bias, allowed_token_ids, bad words. Encoded, then decoded from the bytes."""

from __future__ import annotations

from typing import Any, Final

import msgspec
import pytest

from smg_trio.core.finalize import WorkerTarget, finalize
from smg_trio.core.plan import GeneratePlan
from smg_trio.errors import ClientError
from smg_trio.neutral.runtime import Endpoint, Runtime, Wire
from smg_trio.neutral.sampling import (
    ConstraintKind,
    EngineRequest,
    SamplingParams,
    StructuredConstraint,
)
from smg_trio.wire import tokenspeed_zmq as ts
from smg_trio.wire import vllm_zmq as v
from smg_trio.wire._proto import trtllm_service_pb2 as trtllm
from smg_trio.wire.grpc_messages import (
    build_generate,
    build_mlx_generate,
    build_sglang_generate,
    build_vllm_generate,
)
from tests.core.mock_tokenizers import WordMockTokenizer

SCHEMA = '{"type":"object","properties":{"a":{"type":"integer"}}}'


def finalized(runtime: Runtime, wire: Wire, **fields: object) -> EngineRequest:
    plan = GeneratePlan(
        request_id="r1",
        endpoint=Endpoint.COMPLETION,
        model="m",
        prompt_ids=(1, 2),
        sampling=msgspec.convert({"max_tokens": 4, **fields}, SamplingParams),
    )
    target = WorkerTarget(runtime=runtime, wire=wire)
    (request,) = finalize(plan, target, WordMockTokenizer()).requests
    return request


def constraint(kind: ConstraintKind, text: str = "", *choices: str) -> dict[str, object]:
    value = StructuredConstraint(kind=kind, param="p", text=text, choices=choices)
    return msgspec.to_builtins(value)  # type: ignore[no-any-return]


def vllm_zmq_params(**fields: object) -> v.VllmSamplingParams:
    built = v.build_request(
        finalized(Runtime.VLLM, Wire.ZMQ, **fields),
        engine_request_id="e1",
        max_model_len=64,
        arrival_time=0.0,
        vocab_size=1100,
    )
    params = v.decode_request(v.encode_request(built)).sampling_params
    assert params is not None
    return params


# What vLLM 0.32's front end sends its EngineCore for each form (its StructuredOutputsParams after
# `_validate_structured_outputs` with the default backend `auto`, msgpack-encoded by vLLM's
# MsgpackEncoder), less the keys at their defaults, which the engine fills back the same.
VLLM_AUTO: Final = {"_backend": "xgrammar", "_backend_was_auto": True}


@pytest.mark.parametrize(
    ("kind", "text", "choices", "expected"),
    [
        (ConstraintKind.JSON_SCHEMA, SCHEMA, (), {"json": SCHEMA}),
        (ConstraintKind.REGEX, "a+", (), {"regex": "a+"}),
        (ConstraintKind.CHOICE, "", ("x", "y"), {"grammar": 'root ::= "x" | "y"'}),
        (
            ConstraintKind.CHOICE,
            "",
            ('a"b', "c\\d", "e\nf", "\x01", "ü"),
            {"grammar": 'root ::= "a\\"b" | "c\\\\d" | "e\\nf" | "\\u0001" | "ü"'},
        ),
        (ConstraintKind.GRAMMAR, 'root ::= "a"', (), {"grammar": 'root ::= "a"'}),
        (ConstraintKind.JSON_OBJECT, "", (), {"json_object": True}),
    ],
)
def test_vllm_zmq_structured_outputs_map_is_what_vllms_front_end_sends(
    kind: ConstraintKind, text: str, choices: tuple[str, ...], expected: dict[str, object]
) -> None:
    params = vllm_zmq_params(constraint=constraint(kind, text, *choices))
    raw = msgspec.msgpack.decode(msgspec.msgpack.encode(params.structured_outputs))
    assert raw == {**expected, **VLLM_AUTO}


def test_vllm_zmq_choice_bytes_in_the_add_request() -> None:
    """Golden bytes: a choice reaches EngineCore as vLLM's grammar, never as `choice`."""
    request = finalized(
        Runtime.VLLM, Wire.ZMQ, constraint=constraint(ConstraintKind.CHOICE, "", "x", "y")
    )
    built = v.build_request(request, engine_request_id="e1", max_model_len=64, arrival_time=0.0)
    payload = v.encode_request(built)
    sampling = msgspec.msgpack.decode(payload)[3]
    golden = bytes.fromhex(
        "83a76772616d6d6172b2726f6f74203a3a3d20227822207c20227922a85f6261636b656e64a8786772616d"
        "6d6172b15f6261636b656e645f7761735f6175746fc3"
    )
    assert golden in payload  # the map's own bytes, inside the ADD's sampling map
    assert msgspec.msgpack.encode(sampling["structured_outputs"]) == golden
    assert "choice" not in sampling["structured_outputs"]


def test_vllm_zmq_logit_bias_allowed_ids_and_bad_words_token_ids() -> None:
    params = vllm_zmq_params(
        logit_bias=[[5, 100.0], [6, -1.5]], allowed_token_ids=[3, 4], bad_words=["Hello world"]
    )
    assert params.logit_bias == {5: 100.0, 6: -1.5}
    assert params.allowed_token_ids == (3, 4)
    assert params.bad_words_token_ids == ((1, 2),)
    raw = msgspec.msgpack.decode(msgspec.msgpack.encode(params))
    assert raw["_bad_words_token_ids"] == [[1, 2]]
    assert list(raw["logit_bias"]) == [5, 6]  # integer keys, as vLLM's SamplingParams has


def test_vllm_zmq_refuses_a_logit_bias_id_outside_the_engine_vocabulary() -> None:
    with pytest.raises(ClientError) as info:
        vllm_zmq_params(logit_bias=[[5000, 1.0]])
    assert info.value.param == "logit_bias"


def test_tokenspeed_zmq_string_keys_and_constraint_fields() -> None:
    request = finalized(
        Runtime.TOKENSPEED,
        Wire.ZMQ,
        logit_bias=[[5, 2.0]],
        constraint=constraint(ConstraintKind.CHOICE, "", "x", "y"),
    )
    built = ts.build_request(request, engine_request_id="e1", max_model_len=64)
    params = ts.decode_request(ts.encode_request(built)).sampling_params
    assert params.logit_bias == {"5": 2.0}
    assert (params.regex, params.json_schema, params.ebnf) == ("(x|y)", None, None)


@pytest.mark.parametrize(
    ("runtime", "field", "value"),
    [
        (Runtime.VLLM, "json_object", True),
        (Runtime.SGLANG, "json_schema", '{"type":"object"}'),
        (Runtime.TOKENSPEED, "json_schema", '{"type":"object"}'),
    ],
)
def test_grpc_json_mode_lands_in_the_constraint_oneof(
    runtime: Runtime, field: str, value: object
) -> None:
    request = finalized(runtime, Wire.GRPC, constraint=constraint(ConstraintKind.JSON_OBJECT))
    message: Any = build_generate(runtime, request, "e1")
    params = type(message).FromString(message.SerializeToString()).sampling_params
    assert params.WhichOneof("constraint") == field
    assert getattr(params, field) == value


def test_grpc_choice_and_logit_bias_keys_per_engine() -> None:
    fields = {"constraint": constraint(ConstraintKind.CHOICE, "", "x"), "logit_bias": [[5, 1.0]]}
    vllm = build_vllm_generate(finalized(Runtime.VLLM, Wire.GRPC, **fields), "e1")
    assert list(vllm.sampling_params.choice.choices) == ["x"]
    assert dict(vllm.sampling_params.logit_bias) == {5: 1.0}
    sglang = build_sglang_generate(finalized(Runtime.SGLANG, Wire.GRPC, **fields), "e1")
    assert sglang.sampling_params.regex == "(x)"
    assert dict(sglang.sampling_params.logit_bias) == {"5": 1.0}
    mlx_request = finalized(Runtime.MLX, Wire.GRPC, logit_bias=[[5, 1.0]])
    mlx = build_mlx_generate(mlx_request, "e1")
    assert dict(mlx.sampling_params.logit_bias) == {5: 1.0}


def test_trtllm_guided_decoding_and_bad_words() -> None:
    request = finalized(
        Runtime.TRTLLM,
        Wire.GRPC,
        constraint=constraint(ConstraintKind.JSON_SCHEMA, SCHEMA),
        bad_words=["Hello"],
    )
    message = build_generate(Runtime.TRTLLM, request, "e1")
    assert isinstance(message, trtllm.GenerateRequest)
    guide = message.guided_decoding
    assert (guide.guide_type, guide.guide) == (
        trtllm.GuidedDecodingParams.GUIDE_TYPE_JSON_SCHEMA,
        SCHEMA,
    )
    assert list(message.bad) == ["Hello"]
