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
  started with `--mm-device-do-normalize false` takes; no option selects it yet).
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
    processed,
    processor_kwargs,
    refuse_options,
    settings_salt,
)
from smg_trio.model.tensors import flat_field, tensor_of
from smg_trio.neutral.media import FieldKind, MediaField

IMAGE_TOKEN: Final = "<|image_pad|>"
# The families this module processes, by config.json's model_type.
MODEL_TYPES: Final = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


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
        self._salt = settings_salt(model_id, processor=kwargs, device_normalize=device_normalize)

    def process(
        self, data: bytes, param: str, options: Mapping[str, Any] | None = None
    ) -> ProcessedImage:
        """One image's bytes -> its patches and placeholder run (a 400 if unreadable)."""
        refuse_options(options)
        picture = decoded_image(data, param, max_pixels=self.max_pixels)
        out = processed(self._processor, [picture], param, **self._call)  # e.g. ratio > 200
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
            identifier=image_identifier(self._salt, data),
        )
