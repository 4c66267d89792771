"""Pure. `EngineCoreRequest.mm_features` (vLLM 0.32, docs/wire.md §A.10): one msgpack map per
image, by position, and the extra ZMQ frames holding its large tensors.

`{"data": ITEM | nil, "modality": "image", "identifier": STR, "mm_position": {"offset": O,
"length": L, "is_embed": TENSOR | nil}, "mm_hash": STR | nil}`; ITEM maps each processor kwarg
to `{"data": TENSOR, "field": [KIND, KWARGS]}`; TENSOR is `[dtype, shape, data]` with `data`
the raw bytes as msgpack ext 3 (inline, under `INLINE_MAX_BYTES` as vLLM does) or the index
of an extra frame (frame 0 is the request itself, so extra frames count from 1).

A malformed tensor kills EngineCore (it dies and pushes `ENGINE_CORE_DEAD`), so
`checked_features` refuses, before the ADD is built, any feature whose bytes disagree with
its shape, whose span leaves the prompt, or whose mask disagrees with its span.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from smg_trio.errors import ClientError
from smg_trio.neutral.media import FieldKind, MediaFeature, MediaField, Tensor

INLINE_MAX_BYTES: Final = 256  # vLLM's MsgpackEncoder size_threshold
RAW_VIEW_EXT: Final = 3  # vLLM's CUSTOM_TYPE_RAW_VIEW


def checked_features(features: Sequence[MediaFeature], prompt_len: int) -> None:
    """Raise for any feature the engine would choke on (our processor's bug, never sent)."""
    end = 0
    for number, feature in enumerate(features):
        where = f"image {number}"
        if feature.offset < end or feature.length <= 0:
            raise ClientError(f"{where}: its span overlaps another or is empty", param="messages")
        end = feature.offset + feature.length
        if end > prompt_len:
            raise ClientError(f"{where}: its span leaves the prompt", param="messages")
        if feature.is_embed is not None and len(feature.is_embed) != feature.length:
            raise ClientError(f"{where}: its embed mask disagrees with its span", param="messages")
        if feature.embed_count == 0:
            raise ClientError(f"{where}: no position takes its embeddings", param="messages")
        for field in feature.fields:
            tensor = field.tensor
            if not tensor.consistent():
                raise ClientError(
                    f"{where}: {field.name} holds {len(tensor.data)} bytes for "
                    f"{tensor.dtype} {list(tensor.shape)}",
                    param="messages",
                )
            if field.kind is FieldKind.FLAT and not 0 <= field.dim < len(tensor.shape):
                raise ClientError(
                    f"{where}: {field.name} has no axis {field.dim}", param="messages"
                )


def encode_features(
    features: Sequence[MediaFeature], *, cached: frozenset[str] = frozenset()
) -> tuple[list[dict[str, Any]], list[bytes]]:
    """The `mm_features` array and the extra frames it points to. A feature whose identifier
    is in `cached` goes as `data: nil` (the engine's receiver cache holds it)."""
    frames: list[bytes] = []
    encoded: list[dict[str, Any]] = []
    for feature in features:
        item = None
        if feature.identifier not in cached:
            item = {field.name: _field(field, frames) for field in feature.fields}
        mask = None
        if feature.is_embed is not None:
            mask = _tensor(Tensor("bool", (feature.length,), bytes(feature.is_embed)), frames)
        encoded.append(
            {
                "data": item,
                "modality": feature.modality,
                "identifier": feature.identifier,
                "mm_position": {
                    "offset": feature.offset,
                    "length": feature.length,
                    "is_embed": mask,
                },
                "mm_hash": feature.identifier,
            }
        )
    return encoded, frames


def _field(field: MediaField, frames: list[bytes]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"keep_on_cpu": field.keep_on_cpu}
    if field.kind is FieldKind.FLAT:
        # This image's own slice of its own data: everything along `dim`.
        whole = [None, None, None]
        kwargs["slices"] = [[*([whole] * field.dim), [0, field.tensor.shape[field.dim], None]]]
        kwargs["dim"] = field.dim
    return {"data": _tensor(field.tensor, frames), "field": [field.kind.value, kwargs]}


def _tensor(tensor: Tensor, frames: list[bytes]) -> list[Any]:
    data: msgspec.msgpack.Ext | int
    if tensor.shape and len(tensor.data) >= INLINE_MAX_BYTES:
        frames.append(tensor.data)
        data = len(frames)  # frame 0 is the request
    else:
        data = msgspec.msgpack.Ext(RAW_VIEW_EXT, tensor.data)
    return [tensor.dtype, list(tensor.shape), data]
