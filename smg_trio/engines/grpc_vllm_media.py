"""Pure. The reference vLLM gRPC engine's reading of `GenerateRequest.mm_inputs` and `media_refs`,
as smg-grpc-servicer 0.14.0 reads them (docs/images.md §5.1): `mm_inputs_problem` names the first
thing the servicer would refuse (INVALID_ARGUMENT) or misread, None when the payload is whole.

- `media_refs` are read elsewhere (grpc_vllm_media_refs): this reads tensors only.
- Every tensor's dtype is one the servicer reads, its bytes exactly shape x dtype.
- A batched kwarg has one element per placeholder; a flat kwarg names (`flat_keys`) a sizes
  kwarg in the batch whose values, one per placeholder, sum to its first axis.
- Placeholders lie in the prompt in order without overlap, one hash each; with `im_token_id`, each
  span holds that id somewhere (the servicer's `is_embed`), without it every position embeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from smg_trio.wire._proto import common_pb2 as common
from smg_trio.wire._proto import vllm_engine_pb2 as vllm

ITEM_SIZES: Final = {"float32": 4, "bfloat16": 2, "float16": 2, "uint8": 1, "int64": 8, "uint32": 4}


def mm_inputs_problem(request: vllm.GenerateRequest, prompt: Sequence[int]) -> str | None:
    if len(request.extra_mm_inputs):
        return "extra_mm_inputs: this engine serves images only (one batch)"
    if not request.HasField("mm_inputs"):
        return None
    mm = request.mm_inputs
    if mm.modality != common.IMAGE:
        return f"mm_inputs.modality {common.Modality.Name(mm.modality)}: images only here"
    items = len(mm.mm_placeholders)
    if items == 0:
        return "mm_inputs carries no placeholders"
    if len(mm.mm_hashes) != items:
        return f"{len(mm.mm_hashes)} mm_hashes for {items} placeholders"
    if not mm.HasField("pixel_values"):
        return "mm_inputs carries no pixel_values"
    tensors = {"pixel_values": mm.pixel_values, **dict(mm.model_specific_tensors)}
    for name, tensor in tensors.items():
        problem = _tensor_problem(name, tensor)
        if problem:
            return problem
    for name in mm.batched_keys:
        if name not in tensors:
            return f"batched key {name!r} names no tensor"
        if not tensors[name].shape or tensors[name].shape[0] != items:
            return f"batched {name!r} has shape {list(tensors[name].shape)} for {items} items"
    for name, sizes_key in mm.flat_keys.items():
        if name not in tensors or sizes_key not in tensors:
            return f"flat key {name!r} -> {sizes_key!r} names no tensor"
        sizes = _int64_values(tensors[sizes_key])
        if sizes is None or len(sizes) != items or any(size < 0 for size in sizes):
            return f"flat {name!r}: sizes {sizes_key!r} are not one int64 per item"
        if not tensors[name].shape or sum(sizes) != tensors[name].shape[0]:
            return f"flat {name!r}: sizes sum to {sum(sizes)}, not its first axis"
    end = 0
    for number, span in enumerate(mm.mm_placeholders):
        if span.length == 0 or span.offset < end or span.offset + span.length > len(prompt):
            return f"placeholder {number} ({span.offset}+{span.length}) leaves the prompt"
        end = span.offset + span.length
        ids = prompt[span.offset : end]
        if mm.HasField("im_token_id") and mm.im_token_id not in ids:
            return f"placeholder {number} holds no im_token_id {mm.im_token_id}"
    return None


def _tensor_problem(name: str, tensor: vllm.TensorData) -> str | None:
    size = ITEM_SIZES.get(tensor.dtype)
    if size is None:
        return f"{name}: unsupported proto tensor dtype {tensor.dtype!r}"
    if tensor.WhichOneof("payload") != "inline":
        return f"{name}: only inline tensor payloads here"
    expected = math.prod(tensor.shape) * size
    if len(tensor.inline) != expected:
        return f"{name}: {len(tensor.inline)} bytes for {tensor.dtype} {list(tensor.shape)}"
    return None


def _int64_values(tensor: vllm.TensorData) -> list[int] | None:
    if tensor.dtype != "int64":
        return None
    data = tensor.inline
    return [int.from_bytes(data[i : i + 8], "little", signed=True) for i in range(0, len(data), 8)]
