"""Pure. A prompt's processed images as SGLang's gRPC `MultimodalInputs` (docs/images.md §5.2).

What smg-grpc-servicer 0.14.0's SGLang servicer does with `GenerateRequest.mm_inputs` (read in
its source; no SGLang on this machine to run it): it takes them only when `pixel_values` is set
(without it the request is served as text, the images silently gone: so we always set it), and
makes one image item of them: `pixel_values` its feature, every `model_specific_tensors` entry
its model data by name, the placeholders its offsets, `im_token_id` the token whose positions
take the embeddings. `image_urls` / `image_data` are read only by its encode-only (EPD) path, not
by Generate; there are no hashes, batched or flat keys.

So one tensor per processor kwarg for all images, joined as for vLLM (flat kwargs concatenated,
batched ones stacked: `vllm_grpc_media.joined`), the spans, and always an `im_token_id`: the one
id of the embedded positions (every span's id when all of it embeds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from smg_trio.errors import ClientError
from smg_trio.neutral.media import MediaFeature
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire.vllm_grpc_media import PRIMARY, embed_token, fields_by_name, joined

ENGINE: Final = "SGLang"


def sglang_mm_inputs(
    features: Sequence[MediaFeature], prompt_ids: Sequence[int]
) -> sglang.MultimodalInputs:
    """The request's `mm_inputs`, checked first (spans, bytes, masks), one item of all images."""
    by_name = fields_by_name(features, prompt_ids, ENGINE)
    mm = sglang.MultimodalInputs()  # `modalities`: unread by the servicer, not sent
    for name, fields in by_name.items():
        tensor = joined(name, fields, ENGINE)
        data = sglang.TensorData(data=tensor.data, shape=tensor.shape, dtype=tensor.dtype)
        if name == PRIMARY:
            mm.pixel_values.CopyFrom(data)
        else:
            mm.model_specific_tensors[name].CopyFrom(data)
    if not mm.HasField("pixel_values"):
        raise _refused(f"the processor gave no {PRIMARY!r}, which the servicer requires")
    token = embed_token(features, prompt_ids, ENGINE)
    if token is None:
        span_ids = {prompt_ids[i] for f in features for i in range(f.offset, f.offset + f.length)}
        if len(span_ids) != 1:
            raise _refused("its image spans are not one token id's, as it marks embeddings")
        (token,) = span_ids
    mm.im_token_id = token
    for f in features:
        mm.mm_placeholders.append(sglang.PlaceholderRange(offset=f.offset, length=f.length))
    return mm


def _refused(reason: str) -> ClientError:
    return ClientError(
        f"images of this model cannot travel to {ENGINE} over gRPC: {reason}",
        code="multimodal_not_supported",
        param="messages",
    )
