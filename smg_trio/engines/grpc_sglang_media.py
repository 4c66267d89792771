"""Pure. The reference SGLang gRPC engine's reading of `GenerateRequest.mm_inputs`, as
smg-grpc-servicer 0.14.0's SGLang servicer reads it (docs/images.md §5.2): `mm_inputs_problem`
names the first thing it would refuse or lose, None when the payload is whole.

Stricter than the servicer where it would lose images silently (we check our gateway with it):
`mm_inputs` without `pixel_values` (served as text there), `image_urls` / `image_data` /
video / audio (read by its encode-only path, not by Generate), no placeholders (a warning
there), no `im_token_id`. Like it: every tensor's dtype readable and its bytes shape x dtype;
placeholders in the prompt, in order, each holding `im_token_id`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from smg_trio.engines.grpc_vllm_media import ITEM_SIZES
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang


def mm_inputs_problem(request: sglang.GenerateRequest, prompt: Sequence[int]) -> str | None:
    if not request.HasField("mm_inputs"):
        return None
    mm = request.mm_inputs
    for unread in ("image_urls", "video_urls", "audio_urls", "image_data", "video_data"):
        if len(getattr(mm, unread)):
            return f"mm_inputs.{unread}: Generate does not read it"
    if len(mm.audio_data) or len(mm.modalities):
        return "mm_inputs.audio_data / modalities: Generate does not read them"
    if not mm.HasField("pixel_values"):
        return "mm_inputs without pixel_values would be served as text"
    if not mm.HasField("im_token_id"):
        return "mm_inputs carries no im_token_id"
    tensors = {"pixel_values": mm.pixel_values, **dict(mm.model_specific_tensors)}
    for name, tensor in tensors.items():
        size = ITEM_SIZES.get(tensor.dtype)
        if size is None:
            return f"{name}: unsupported proto tensor dtype {tensor.dtype!r}"
        if len(tensor.data) != math.prod(tensor.shape) * size:
            return f"{name}: {len(tensor.data)} bytes for {tensor.dtype} {list(tensor.shape)}"
    if not mm.mm_placeholders:
        return "mm_inputs carries no placeholders"
    end = 0
    for number, span in enumerate(mm.mm_placeholders):
        if span.length == 0 or span.offset < end or span.offset + span.length > len(prompt):
            return f"placeholder {number} ({span.offset}+{span.length}) leaves the prompt"
        end = span.offset + span.length
        if mm.im_token_id not in prompt[span.offset : end]:
            return f"placeholder {number} holds no im_token_id {mm.im_token_id}"
    return None
