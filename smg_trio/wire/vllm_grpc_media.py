"""Pure. A prompt's processed images as vLLM's gRPC `MultimodalInputs` (docs/images.md §5.1).

smg-grpc-servicer 0.14.0 takes images two ways: `media_refs` (URLs the worker fetches and
processes itself, only when it runs with `--mm-processor`, advertised by `GetServerInfo`'s
`mm_processor` / `mm_media_ref_schemes`) and `mm_inputs` (tensors processed before the request,
the prompt ids already expanded). We send `mm_inputs`: the images are fetched and processed here
under our own fetch rules (docs/images.md §3), the prompt we route and count is the engine's.

One `MultimodalInputs` holds every image of the request (one modality, image): each kwarg is
one tensor for all images, as the servicer rebuilds them:

- a `flat` kwarg (Idefics3's `pixel_values`) is the images' tensors concatenated on dim 0, with
  `flat_keys[kwarg]` naming a batched kwarg whose values are each image's dim-0 size (Idefics3's
  `num_patches`): the servicer cuts the concatenation with it. A flat kwarg with no such sizes
  kwarg among the image's fields cannot travel (a 400 naming it: Qwen2-VL's patches are sized
  by `image_grid_thw`'s product, which the servicer does not compute);
- a `batched` kwarg is the images' tensors stacked (one shape for every image, else a 400;
  a field marked `pad_first_dim`, LLaVA-NeXT's tiles, zero-padded on dim 0 to the largest);
- `pixel_values` travels in its own field, the others in `model_specific_tensors`;
- `mm_placeholders` are the spans, `mm_hashes` the identifiers; the servicer rebuilds each span's
  `is_embed` as "ids equal to `im_token_id`", so the embedded positions must be exactly one token
  id's positions in the span (checked), or the whole span (no `im_token_id`).

`fields_by_name`, `joined` and `embed_token` build SGLang's `mm_inputs` too (sglang_grpc_media).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from smg_trio.errors import ClientError
from smg_trio.neutral.media import FieldKind, MediaFeature, MediaField, Tensor
from smg_trio.wire._proto import common_pb2 as common
from smg_trio.wire._proto import vllm_engine_pb2 as vllm
from smg_trio.wire.vllm_mm_features import checked_features

# The dtypes smg-grpc-servicer 0.14.0 reads (tensor_wire's map); any other is refused there.
SERVICER_DTYPES: Final = frozenset({"float32", "bfloat16", "float16", "uint8", "int64", "uint32"})
PRIMARY: Final = "pixel_values"
_PARAM: Final = "messages"


def vllm_mm_inputs(
    features: Sequence[MediaFeature], prompt_ids: Sequence[int]
) -> vllm.MultimodalInputs:
    """The request's `mm_inputs`, checked first (spans, bytes, masks: `checked_features`)."""
    by_name = fields_by_name(features, prompt_ids, "vLLM")
    mm = vllm.MultimodalInputs(modality=common.IMAGE)
    for name, fields in by_name.items():
        tensor = joined(name, fields, "vLLM")
        if fields[0].kind is FieldKind.FLAT:
            mm.flat_keys[name] = _sizes_key(name, fields, by_name)
        else:
            mm.batched_keys.append(name)
        if fields[0].keep_on_cpu:
            mm.keep_on_cpu_keys.append(name)
        data = vllm.TensorData(inline=tensor.data, shape=tensor.shape, dtype=tensor.dtype)
        if name == PRIMARY:
            mm.pixel_values.CopyFrom(data)
        else:
            mm.model_specific_tensors[name].CopyFrom(data)
    if not mm.HasField("pixel_values"):
        raise _refused("vLLM", f"the processor gave no {PRIMARY!r}, the servicer's encoder input")
    image_token = embed_token(features, prompt_ids, "vLLM")
    if image_token is not None:
        mm.im_token_id = image_token
    for f in features:
        mm.mm_placeholders.append(vllm.PlaceholderRange(offset=f.offset, length=f.length))
        mm.mm_hashes.append(f.identifier)
    return mm


def fields_by_name(
    features: Sequence[MediaFeature], prompt_ids: Sequence[int], engine: str
) -> dict[str, list[MediaField]]:
    """Each processor kwarg's fields, one per image in prompt order, after `checked_features`."""
    checked_features(features, len(prompt_ids))
    if any(f.modality != "image" for f in features):
        raise _refused(engine, "only images travel over its gRPC wire")
    names = [field.name for field in features[0].fields]
    if any([field.name for field in f.fields] != names for f in features):
        raise _refused(engine, "the images of one request carry different processor fields")
    return {name: [f.fields[i] for f in features] for i, name in enumerate(names)}


def joined(name: str, fields: Sequence[MediaField], engine: str) -> Tensor:
    """One tensor for every image: flat kwargs concatenated on dim 0, batched ones stacked."""
    kind, dtype = fields[0].kind, fields[0].tensor.dtype
    if dtype not in SERVICER_DTYPES:
        raise _refused(engine, f"processor field {name!r} is {dtype}, which it cannot read")
    if any(f.kind is not kind or f.tensor.dtype != dtype for f in fields):
        raise _refused(engine, f"processor field {name!r} differs in kind or dtype between images")
    if kind is FieldKind.FLAT:
        return _concatenated(name, fields, engine)
    return _stacked(name, fields, engine)


def _concatenated(name: str, fields: Sequence[MediaField], engine: str) -> Tensor:
    shapes = [f.tensor.shape for f in fields]
    if any(f.dim != 0 or not shape for f, shape in zip(fields, shapes, strict=True)):
        raise _refused(engine, f"processor field {name!r} is not concatenated on its first axis")
    if any(shape[1:] != shapes[0][1:] for shape in shapes):
        raise _refused(engine, f"processor field {name!r} differs in shape between images")
    total = sum(shape[0] for shape in shapes)
    data = b"".join(f.tensor.data for f in fields)
    return Tensor(fields[0].tensor.dtype, (total, *shapes[0][1:]), data)


def _stacked(name: str, fields: Sequence[MediaField], engine: str) -> Tensor:
    shape = fields[0].tensor.shape
    if all(f.tensor.shape == shape for f in fields):
        data = b"".join(f.tensor.data for f in fields)
        return Tensor(fields[0].tensor.dtype, (len(fields), *shape), data)
    if not all(
        f.pad_first_dim and f.tensor.shape and f.tensor.shape[1:] == shape[1:] for f in fields
    ):
        raise _refused(engine, f"processor field {name!r} differs in shape between images")
    return _padded_stack(fields)


def _padded_stack(fields: Sequence[MediaField]) -> Tensor:
    """Images whose first dims differ, each zero-padded on dim 0 to the largest, stacked."""
    largest = max(f.tensor.shape[0] for f in fields)
    rest = fields[0].tensor.shape[1:]
    row = len(fields[0].tensor.data) // fields[0].tensor.shape[0]  # bytes per dim-0 entry
    data = b"".join(f.tensor.data + bytes(row * (largest - f.tensor.shape[0])) for f in fields)
    return Tensor(fields[0].tensor.dtype, (len(fields), largest, *rest), data)


def _sizes_key(
    name: str, fields: Sequence[MediaField], by_name: Mapping[str, Sequence[MediaField]]
) -> str:
    """The batched int64 scalar kwarg equal, per image, to `name`'s dim-0 size."""
    sizes = [f.tensor.shape[0] for f in fields]
    for candidate, per_image in by_name.items():
        first = per_image[0]
        if first.kind is not FieldKind.BATCHED or first.tensor.shape != ():
            continue
        if first.tensor.dtype != "int64":
            continue
        values = [int.from_bytes(f.tensor.data, "little", signed=True) for f in per_image]
        if values == sizes:
            return candidate
    raise _refused(
        "vLLM", f"processor field {name!r} has no per-image size field the servicer can cut it with"
    )


def embed_token(
    features: Sequence[MediaFeature], prompt_ids: Sequence[int], engine: str
) -> int | None:
    """The one id whose positions are each span's embedded positions; None: every position."""
    if all(f.is_embed is None or all(f.is_embed) for f in features):
        return None
    embedded = {
        prompt_ids[f.offset + i]
        for f in features
        for i in range(f.length)
        if f.is_embed is None or f.is_embed[i]
    }
    if len(embedded) != 1:
        raise _refused(engine, "the embedded positions are not one token id's, as it reads them")
    (token,) = embedded
    for f in features:
        span = prompt_ids[f.offset : f.offset + f.length]
        mask = tuple(i == token for i in span)
        if mask != (f.is_embed or (True,) * f.length):
            raise _refused(engine, "an image span holds its embed token outside its embeddings")
    return token


def _refused(engine: str, reason: str) -> ClientError:
    return ClientError(
        f"images of this model cannot travel to {engine} over gRPC: {reason}",
        code="multimodal_not_supported",
        param=_PARAM,
    )
