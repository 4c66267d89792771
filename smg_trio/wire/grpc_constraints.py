"""Pure. The gRPC spellings of structured outputs and logit_bias (wire.md §C): which protobuf
field each engine takes a constraint in, and which key type its logit_bias map has.

finalize already rewrote the constraint to a kind the engine takes (`core/engine_fields.py`):
vLLM takes every kind natively; SGLang and TokenSpeed take a JSON schema, a regex or an EBNF
grammar; TRT-LLM takes those and JSON mode. A kind outside that set here is a programming error.
"""

from __future__ import annotations

from typing import Final

from smg_trio.neutral.sampling import ConstraintKind, StructuredConstraint
from smg_trio.neutral.validation import checked_ids
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire._proto import tokenspeed_scheduler_pb2 as tokenspeed
from smg_trio.wire._proto import trtllm_service_pb2 as trtllm
from smg_trio.wire._proto import vllm_engine_pb2 as vllm

_SGLANG_FIELDS: Final = {
    ConstraintKind.JSON_SCHEMA: "json_schema",
    ConstraintKind.REGEX: "regex",
    ConstraintKind.GRAMMAR: "ebnf_grammar",
}
_VLLM_FIELDS: Final = {
    ConstraintKind.JSON_SCHEMA: "json_schema",
    ConstraintKind.REGEX: "regex",
    ConstraintKind.GRAMMAR: "grammar",
}
_TRTLLM_GUIDES: Final = {
    ConstraintKind.JSON_SCHEMA: trtllm.GuidedDecodingParams.GUIDE_TYPE_JSON_SCHEMA,
    ConstraintKind.JSON_OBJECT: trtllm.GuidedDecodingParams.GUIDE_TYPE_JSON,
    ConstraintKind.REGEX: trtllm.GuidedDecodingParams.GUIDE_TYPE_REGEX,
    ConstraintKind.GRAMMAR: trtllm.GuidedDecodingParams.GUIDE_TYPE_EBNF_GRAMMAR,
}


def set_vllm_constraint(
    params: vllm.SamplingParams, constraint: StructuredConstraint | None
) -> None:
    """Fill vLLM's `constraint` oneof: a JSON switch for JSON mode, a message for choices."""
    if constraint is None:
        return
    if constraint.kind is ConstraintKind.JSON_OBJECT:
        params.json_object = True
    elif constraint.kind is ConstraintKind.CHOICE:
        params.choice.CopyFrom(vllm.ChoiceConstraint(choices=constraint.choices))
    else:
        setattr(params, _VLLM_FIELDS[constraint.kind], constraint.text)


def set_sglang_constraint(
    params: sglang.SamplingParams | tokenspeed.SamplingParams,
    constraint: StructuredConstraint | None,
) -> None:
    """Fill SGLang's or TokenSpeed's `constraint` oneof (same field names in both protos)."""
    if constraint is not None:
        setattr(params, _SGLANG_FIELDS[constraint.kind], constraint.text)


def trtllm_guide(constraint: StructuredConstraint | None) -> trtllm.GuidedDecodingParams | None:
    if constraint is None:
        return None
    return trtllm.GuidedDecodingParams(
        guide_type=_TRTLLM_GUIDES[constraint.kind], guide=constraint.text
    )


def int_keys(pairs: tuple[tuple[int, float], ...]) -> dict[int, float]:
    """A `map<int32, float>` logit_bias (vLLM, MLX)."""
    checked_ids([token_id for token_id, _ in pairs], "logit_bias", 2**31)
    return dict(pairs)


def string_keys(pairs: tuple[tuple[int, float], ...]) -> dict[str, float]:
    """A `map<string, float>` logit_bias (SGLang, TokenSpeed): token ids as decimal strings."""
    return {str(token_id): bias for token_id, bias in pairs}
