"""Pure. The reference vLLM EngineCore's output messages (docs/wire.md §A.7): finish fields of an
outcome, utility replies, and a step's message with its aux frames (a pooling request's tensor
goes in an aux frame, its index in `pooling_output`, as vLLM sends it; docs/pooling.md §2).
"""

from __future__ import annotations

import time
from typing import Any, assert_never

from smg_trio.engines.generation import EosStop, LengthStop, TokenStop
from smg_trio.engines.wire_adapter import Aborted, Outcome, Pooled, Rejected
from smg_trio.wire.vllm_pooling import float32_bytes, frame_tensor
from smg_trio.wire.vllm_zmq_outputs import (
    EngineCoreOutput,
    EngineCoreOutputs,
    FinishReason,
    RequestError,
    UtilityOutput,
    encode_outputs,
)


def encode_utility_reply(engine_index: int, call_id: int, failure: str | None, value: Any) -> bytes:
    """A UtilityOutput message: `result` is `[type_info=nil, value]` unless the call failed."""
    result = None if failure is not None else (None, value)
    return encode_outputs(
        EngineCoreOutputs(
            engine_index=engine_index,
            timestamp=time.monotonic(),
            utility_output=UtilityOutput(call_id=call_id, failure_message=failure, result=result),
        )
    )


def cache_miss(outcome: Outcome | None) -> tuple[str, ...] | None:
    if isinstance(outcome, Rejected) and outcome.cache_miss:
        return outcome.cache_miss
    return None


def finish_fields(outcome: Outcome | None) -> tuple[int | None, int | None, RequestError | None]:
    """(finish_reason, stop_reason, error) of an EngineCoreOutput."""
    match outcome:
        case None:
            return None, None, None
        case EosStop():
            return FinishReason.STOP, None, None
        case TokenStop(token_id):
            return FinishReason.STOP, token_id, None
        case LengthStop():
            return FinishReason.LENGTH, None, None
        case Aborted():
            return FinishReason.ABORT, None, None
        case Rejected(message=message):
            return FinishReason.ERROR, None, RequestError("validation_error", message, False)
        case Pooled():
            return FinishReason.STOP, None, None
        case _:
            assert_never(outcome)


def with_pooled(
    output: EngineCoreOutput, outcome: Outcome | None, frames: list[bytes]
) -> EngineCoreOutput:
    """`output` carrying a pooling outcome's tensor, its bytes appended to `frames` (the
    message's aux frames: index 1 is the first)."""
    if not isinstance(outcome, Pooled):
        return output
    frames.append(float32_bytes(outcome.values))
    tensor = frame_tensor((len(outcome.values),), len(frames))
    return EngineCoreOutput(
        request_id=output.request_id,
        new_token_ids=(),
        pooling_output=tensor,
        finish_reason=FinishReason.STOP,
        prefill_stats=output.prefill_stats,
    )


def step_payload(outputs: EngineCoreOutputs, frames: list[bytes]) -> bytes | list[bytes]:
    """One message: its payload alone, or with its aux frames."""
    payload = encode_outputs(outputs)
    return [payload, *frames] if frames else payload
