"""CPU. LLaVA-1.5 images: transformers' PIL image processor, the HF processor's placeholder
expansion and vLLM's `mm_features` field (docs/images.md §4.3).

- Pixels: `LlavaImageProcessorPil` with the folder's settings (CLIP's: shortest edge resized,
  centre crop, rescale, normalise; `do_pad` pads to a square first): one [3, H, W] picture.
- Placeholder: the chat template writes `<image>` (config.json's `image_token_index`); it
  becomes one `<image>` per vision feature the language model receives: the vision tower's
  patches, `(image_size / patch_size)^2`, plus its class token for CLIP, less one when the
  model's `vision_feature_select_strategy` is "default" (it drops the class token), as both
  the HF processor and vLLM count them.
- Field (vLLM's LLaVA fields): `pixel_values` float32 [3, H, W], batched.
- `mm_processor_kwargs` (vLLM's, per request): `do_pad` (true or false), which keeps the
  picture's shape (the vision tower's input) and the feature count; any other key (a size, a
  crop: another shape the tower cannot take) is a 400 naming it. It enters the identifier.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil

from smg_trio.core.images import ProcessedImage
from smg_trio.errors import ConfigError
from smg_trio.model.image_decode import DEFAULT_MAX_PIXELS, decoded_image
from smg_trio.model.image_processing import (
    built_processor,
    image_identifier,
    option_refusal,
    processed,
    processor_kwargs,
    settings_salt,
)
from smg_trio.model.tensors import tensor_of
from smg_trio.neutral.media import FieldKind, MediaField

IMAGE_TOKEN: Final = "<image>"
# Vision towers whose feature count we know, and the extra (class) tokens they output.
TOWER_EXTRA_TOKENS: Final = {"clip_vision_model": 1, "siglip_vision_model": 0}
STRATEGIES: Final = ("default", "full")
# vLLM's `mm_processor_kwargs` keys for LLaVA-1.5's images: the ones that keep the shape.
OPTION_KEYS: Final = ("do_pad",)


def feature_count(config: Mapping[str, Any]) -> int:
    """How many `<image>` one image becomes, from config.json (a ConfigError if unknown)."""
    vision = config.get("vision_config") or {}
    tower = vision.get("model_type")
    strategy = config.get("vision_feature_select_strategy", "default")
    if tower not in TOWER_EXTRA_TOKENS or strategy not in STRATEGIES:
        raise ConfigError(
            f"LLaVA images with vision tower {tower!r} and feature strategy {strategy!r} are "
            f"not processed (towers: {', '.join(TOWER_EXTRA_TOKENS)}; strategies: "
            f"{', '.join(STRATEGIES)})"
        )
    try:
        grid = int(vision["image_size"]) // int(vision["patch_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"LLaVA's vision_config lacks image_size/patch_size ({exc})") from exc
    drop = 1 if strategy == "default" else 0
    return grid * grid + TOWER_EXTRA_TOKENS[tower] - drop


class LlavaImages:
    """One LLaVA-1.5 model's image processing, built once at startup."""

    placeholder: Final = IMAGE_TOKEN

    def __init__(
        self,
        *,
        model_id: str,
        config: Mapping[str, Any],
        image_processor_config: Mapping[str, Any],
        image_token_id: int,
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> None:
        kwargs = processor_kwargs(image_processor_config)
        self._processor = built_processor(LlavaImageProcessorPil, kwargs, "LLaVA")
        self.image_token_id = image_token_id
        self.tokens = feature_count(config)
        self.max_pixels = max_pixels
        self._model_id = model_id
        self._kwargs = kwargs
        self._do_pad = bool(self._processor.do_pad)
        self._salt = settings_salt(model_id, processor=kwargs)

    def process(
        self, data: bytes, param: str, options: Mapping[str, Any] | None = None
    ) -> ProcessedImage:
        """One image's bytes -> its picture tensor and placeholder run (a 400 if unreadable).
        `options`: the request's `mm_processor_kwargs` (`OPTION_KEYS` only)."""
        do_pad, salt = self._do_pad, self._salt
        for key, value in (options or {}).items():
            if key not in OPTION_KEYS:
                raise option_refusal(
                    key, f"not taken for LLaVA images (takes {', '.join(OPTION_KEYS)})"
                )
            if not isinstance(value, bool):
                raise option_refusal(key, f"must be true or false, got {value!r}")
            do_pad = value
        if do_pad != self._do_pad:
            salt = settings_salt(self._model_id, processor={**self._kwargs, "do_pad": do_pad})
        picture = decoded_image(data, param, max_pixels=self.max_pixels)
        out = processed(self._processor, [picture], param, do_pad=do_pad)
        pixels = np.asarray(out["pixel_values"], dtype=np.float32)[0]
        return ProcessedImage(
            placeholder=IMAGE_TOKEN,
            replacement=IMAGE_TOKEN * self.tokens,
            embed_token_id=self.image_token_id,
            embed_count=self.tokens,
            fields=(
                MediaField(name="pixel_values", tensor=tensor_of(pixels), kind=FieldKind.BATCHED),
            ),
            identifier=image_identifier(salt, data),
        )
