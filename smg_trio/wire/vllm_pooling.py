"""Pure. vLLM EngineCore's pooling requests (vLLM 0.32/0.33, docs/wire.md §A.15,
docs/pooling.md §2): the ADD of one pooling input and the tensor its finishing output carries.

- A pooling ADD is an `EngineCoreRequest` with `sampling_params` nil and `pooling_params` the
  positional `PoolingParams` array: `[use_activation, dimensions, step_tag_id,
  returned_token_ids, task, requires_token_ids, skip_reading_prefix_cache, ...]`. We send what
  vLLM's own frontend sends after its checks: the pooler's defaults filled in
  (`use_activation` true unless the client said false, `skip_reading_prefix_cache` false)
  and the trailing defaults left out.
- The result comes once, in the request's finishing output (finish STOP, no tokens):
  `pooling_output` is a `[dtype, shape, data]` tensor triple whose data is an aux frame index
  (vLLM's way at any size) or inline ext-3 bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from smg_trio.errors import BackendProtocolError, ClientError
from smg_trio.neutral.pooling import PoolingRequest, PoolingTask
from smg_trio.neutral.validation import checked_prompt
from smg_trio.wire.msgpack_arrays import WireArray, array_values
from smg_trio.wire.vllm_zmq import EngineCoreRequest

FINAL_ONLY: Final = 2  # vLLM's RequestOutputKind.FINAL_ONLY, the only kind pooling takes


class VllmPoolingParams(msgspec.Struct, array_like=True, frozen=True, omit_defaults=True):
    """vLLM's PoolingParams, positional, with its defaults (trailing defaults are omitted)."""

    use_activation: bool | None = None
    dimensions: int | None = None
    step_tag_id: int | None = None
    returned_token_ids: tuple[int, ...] | None = None
    task: str | None = None
    requires_token_ids: bool = False
    skip_reading_prefix_cache: bool | None = None
    late_interaction_params: Any = None
    extra_kwargs: dict[str, Any] | None = None
    output_kind: int = FINAL_ONLY


def pooling_params(request: PoolingRequest) -> VllmPoolingParams:
    """What vLLM's frontend sends for `request` once its defaults are merged in."""
    if request.dimensions is not None and request.task is not PoolingTask.EMBED:
        raise ClientError(
            f"Task {request.task.value!r} only supports ['use_activation'] parameters, "
            "does not support ['dimensions'] parameters",
            param="dimensions",
        )
    return VllmPoolingParams(
        use_activation=True if request.use_activation is None else request.use_activation,
        dimensions=request.dimensions,
        task=request.task.value,
        skip_reading_prefix_cache=False,
    )


def build_pooling_request(
    request: PoolingRequest,
    *,
    engine_request_id: str,
    max_model_len: int,
    arrival_time: float,
    vocab_size: int | None = None,
    client_index: int = 0,
) -> EngineCoreRequest:
    """One pooling ADD. The prompt is checked against the engine's context and vocabulary
    (a pooling prompt may fill the whole context: nothing is generated after it)."""
    if not engine_request_id:
        raise ClientError("the engine request id must not be empty", param="request_id")
    prompt = checked_prompt(request.prompt_ids, max_model_len + 1, vocab_size)
    return EngineCoreRequest(
        request_id=engine_request_id,
        prompt_token_ids=prompt,
        mm_features=None,
        sampling_params=None,
        pooling_params=pooling_params(request),
        arrival_time=float(arrival_time),
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
        client_index=client_index,
        external_req_id=request.request_id,
    )


def decode_pooling_params(raw: Any) -> VllmPoolingParams:
    """Engine side: the request's `pooling_params` (decoded as Any) as vLLM's struct."""
    try:
        return msgspec.convert(raw, VllmPoolingParams)
    except msgspec.ValidationError as exc:
        raise BackendProtocolError(f"malformed pooling_params: {exc}") from exc


def pooled_tensor(raw: Any, frames: Sequence[bytes]) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """A finishing output's `pooling_output` (decoded as Any) resolved against its message's
    frames (`frames[0]` = payload): the values, flat and row-major, and the shape."""
    try:
        array = msgspec.convert(raw, WireArray)
    except msgspec.ValidationError as exc:
        raise BackendProtocolError(f"malformed pooling_output: {exc}") from exc
    if not array.dtype.removeprefix("torch.").startswith(("float", "bfloat")):
        raise BackendProtocolError(f"pooling_output has dtype {array.dtype!r}, not a float")
    values = array_values(array, frames)
    return tuple(float(value) for value in values), array.shape


def frame_tensor(shape: Sequence[int], frame_index: int) -> WireArray:
    """Engine side: a float32 tensor triple whose data is aux frame `frame_index` (the caller
    sends `float32_bytes(values)` there), as vLLM sends pooling outputs."""
    return WireArray(dtype="float32", shape=tuple(shape), data=frame_index)


def float32_bytes(values: Sequence[float]) -> bytes:
    """The little-endian float32 bytes of `values` (an aux frame's, or base64's)."""
    return struct.pack(f"<{len(values)}f", *values)
