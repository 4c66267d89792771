"""CPU. Qwen2-VL, Qwen2.5-VL and Qwen3-VL images: transformers' PIL image processor (the three
families share it), the HF processor's placeholder expansion and vLLM's `mm_features` fields
(docs/images.md §4.2).

- Pixels: `Qwen2VLImageProcessorPil` with the folder's settings (preprocessor_config.json, or
  processor_config.json's nested `image_processor`): resized so both sides are multiples of
  `patch_size x merge_size` within the pixel bounds, then cut into patches of
  `temporal_patch_size x patch_size x patch_size` (a picture is its own two frames), one row
  per patch.
- Device normalisation (vLLM's `mm_device_do_normalize`, on by default for these families):
  vLLM's processor then neither rescales nor normalises, and the raw pixels travel as uint8;
  the engine normalises them before the vision tower. We do the same (`device_normalize`;
  off, the pixels are normalised float32, as the HF processor alone gives them: what an engine
  started with `--mm-device-do-normalize false` takes: the gateway's `mm_device_do_normalize`
  setting, docs/images.md §4.2).
- `mm_processor_kwargs` (vLLM's, per request): `min_pixels`, `max_pixels` and `size`
  (`shortest_edge`, `longest_edge`), the pixel bounds of the resize, as vLLM resolves them
  (`size` over the model's, then the two pixel keys over `size`); each bound at most the
  model's own maximum (no request makes a picture larger than the model's settings allow);
  any other key is a 400 naming it. The bounds enter the identifier.
- Placeholder: the chat template writes `<|vision_start|><|image_pad|><|vision_end|>`; the
  `<|image_pad|>` becomes `t*h*w / merge_size**2` of them, every one an embedding.
- Fields (vLLM's Qwen2-VL field factory): `pixel_values` [patches, C*T*P*P] flat, and
  `image_grid_thw` int64 [3] batched, kept on the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from smg_trio.core.images import ProcessedImage
from smg_trio.model.image_decode import DEFAULT_MAX_PIXELS, decoded_image
from smg_trio.model.image_processing import (
    built_processor,
    image_identifier,
    option_refusal,
    processed,
    processor_kwargs,
    settings_salt,
)
from smg_trio.model.tensors import flat_field, tensor_of
from smg_trio.neutral.media import FieldKind, MediaField

IMAGE_TOKEN: Final = "<|image_pad|>"
# The families this module processes, by config.json's model_type.
MODEL_TYPES: Final = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
# vLLM's `mm_processor_kwargs` keys for these families' images, and `size`'s own keys.
OPTION_KEYS: Final = frozenset({"min_pixels", "max_pixels", "size"})
EDGES: Final = {"min_pixels": "shortest_edge", "max_pixels": "longest_edge"}


class Qwen2VLImages:
    """One Qwen2/2.5/3-VL model's image processing, built once at startup."""

    placeholder: Final = IMAGE_TOKEN

    def __init__(
        self,
        *,
        model_id: str,
        image_processor_config: Mapping[str, Any],
        image_token_id: int,
        device_normalize: bool = True,
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> None:
        kwargs = processor_kwargs(image_processor_config)
        self._processor = built_processor(Qwen2VLImageProcessorPil, kwargs, "Qwen2-VL")
        self.image_token_id = image_token_id
        self.device_normalize = device_normalize
        self.max_pixels = max_pixels
        self._merge = int(self._processor.merge_size)
        self._call: dict[str, Any] = (
            {"do_rescale": False, "do_normalize": False} if device_normalize else {}
        )
        self._model_id = model_id
        self._kwargs = kwargs
        self._size = {edge: int(self._processor.size[edge]) for edge in EDGES.values()}
        self._salt = settings_salt(model_id, processor=kwargs, device_normalize=device_normalize)

    def process(
        self, data: bytes, param: str, options: Mapping[str, Any] | None = None
    ) -> ProcessedImage:
        """One image's bytes -> its patches and placeholder run (a 400 if unreadable).
        `options`: the request's `mm_processor_kwargs` (`OPTION_KEYS` only)."""
        size, salt = self._size, self._salt
        if options:
            size = self.requested_size(options)
            if size != self._size:
                salt = settings_salt(
                    self._model_id,
                    processor={**self._kwargs, "size": size},
                    device_normalize=self.device_normalize,
                )
        picture = decoded_image(data, param, max_pixels=self.max_pixels)
        call = {**self._call, "size": size}
        out = processed(self._processor, [picture], param, **call)  # e.g. ratio > 200
        pixels = np.asarray(out["pixel_values"], dtype=np.float32)
        if self.device_normalize:  # raw 0..255 values: exact in uint8
            pixels = pixels.astype(np.uint8)
        grid = np.asarray(out["image_grid_thw"], dtype=np.int64)[0]
        tokens = int(grid.prod()) // (self._merge * self._merge)
        fields = (
            flat_field("pixel_values", pixels),
            MediaField(
                name="image_grid_thw",
                tensor=tensor_of(grid),
                kind=FieldKind.BATCHED,
                keep_on_cpu=True,
            ),
        )
        return ProcessedImage(
            placeholder=IMAGE_TOKEN,
            replacement=IMAGE_TOKEN * tokens,
            embed_token_id=self.image_token_id,
            embed_count=tokens,
            fields=fields,
            identifier=image_identifier(salt, data),
        )

    def requested_size(self, options: Mapping[str, Any]) -> dict[str, int]:
        """The resize's pixel bounds with the request's `mm_processor_kwargs`, as vLLM resolves
        them: `size`'s edges over the model's, then `min_pixels` / `max_pixels` over those (a
        null pixel key changes nothing, as in HF). A 400 naming the key for any other key, a
        value that is not a whole number in 1..the model's maximum, or `size` not a map of
        the two edges."""
        for key in options:
            if key not in OPTION_KEYS:
                raise option_refusal(
                    key, f"not taken for Qwen-VL images (takes {', '.join(sorted(OPTION_KEYS))})"
                )
        ceiling = self._size["longest_edge"]
        size = dict(self._size)
        given = options.get("size")
        if given is not None:
            if not isinstance(given, dict) or not set(given) <= set(EDGES.values()):
                raise option_refusal(
                    "size", 'must be {"shortest_edge": N, "longest_edge": N} (either or both)'
                )
            for edge, value in given.items():
                size[edge] = _bound(f"size.{edge}", value, ceiling)
        for key, edge in EDGES.items():
            if options.get(key) is not None:
                size[edge] = _bound(key, options[key], ceiling)
        return size


def _bound(key: str, value: Any, ceiling: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= ceiling:
        raise option_refusal(
            key, f"must be a pixel count in 1..{ceiling} (the model's maximum), got {value!r}"
        )
    return value
