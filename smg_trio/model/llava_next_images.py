"""CPU. LLaVA-NeXT (LLaVA-1.6) images: transformers' PIL image processor (any-resolution
tiling), the feature count as vLLM and the HF processor compute it, and vLLM's `mm_features`
fields (docs/images.md §4.4).

- Pixels: `LlavaNextImageProcessorPil` with the folder's settings: the picture resized whole
  to one tile (the base patch), then resized into the best of `image_grid_pinpoints` (the
  resolution that keeps the most of the picture and wastes the least), padded, cut into
  tiles: [1 + tiles, 3, H, W]. One image at a time, so never padded to a sibling's tile count
  (vLLM's model takes each image's own count; the tensor depends on the image alone, as its
  identifier does).
- Placeholder: `<image>` (config.json's `image_token_index`) becomes one `<image>` per feature:
  the base patch's (LLaVA's count: the tower's patches, its class token, less one under the
  "default" strategy), plus the tiles' features with the padding rows or columns removed
  ("unpadded": the grid of patch features scaled to the picture's aspect ratio), plus one
  newline embedding per remaining row. Every one is an embedding position.
- Fields (vLLM's LLaVA-NeXT fields): `pixel_values` float32 [1 + tiles, 3, H, W] batched,
  `image_sizes` int64 [2] (height, width of the picture) batched, kept on the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
from transformers.image_processing_utils import select_best_resolution
from transformers.models.llava_next.image_processing_pil_llava_next import (
    LlavaNextImageProcessorPil,
)

from smg_trio.core.images import ProcessedImage
from smg_trio.errors import ConfigError
from smg_trio.model.image_decode import DEFAULT_MAX_PIXELS, decoded_image
from smg_trio.model.image_processing import (
    built_processor,
    image_identifier,
    processed,
    processor_kwargs,
    refuse_options,
    settings_salt,
)
from smg_trio.model.llava_images import feature_count
from smg_trio.model.tensors import tensor_of
from smg_trio.neutral.media import FieldKind, MediaField

IMAGE_TOKEN: Final = "<image>"


def pinpoints(value: Any, where: str) -> tuple[tuple[int, int], ...]:
    """`image_grid_pinpoints` as (height, width) pairs (a ConfigError if malformed)."""
    try:
        pairs = tuple((int(h), int(w)) for h, w in value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"LLaVA-NeXT's {where} image_grid_pinpoints is malformed") from exc
    if not pairs or any(h <= 0 or w <= 0 for h, w in pairs):
        raise ConfigError(f"LLaVA-NeXT's {where} image_grid_pinpoints is empty or not positive")
    return pairs


def unpadded_features(
    height: int, width: int, grid: int, tiles_high: int, tiles_wide: int
) -> tuple[int, int]:
    """The tiles' features once the padding is removed, and the newline count (one per row):
    the patch-feature grid of the chosen resolution, cut to the picture's aspect ratio with
    the same rounding as vLLM and the HF processor."""
    rows = grid * tiles_high
    cols = grid * tiles_wide
    if width / height > cols / rows:
        kept = int(round(height * (cols / width), 7))
        rows -= 2 * ((rows - kept) // 2)
    else:
        kept = int(round(width * (rows / height), 7))
        cols -= 2 * ((cols - kept) // 2)
    return rows * cols, rows


class LlavaNextFeatures:
    """How many `<image>` a picture of a given size becomes, from config.json."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.base = feature_count(config)  # the base patch, as LLaVA-1.5 counts one picture
        vision = config.get("vision_config") or {}
        self.tile = int(vision["image_size"])
        self.grid = self.tile // int(vision["patch_size"])
        self.pinpoints = pinpoints(config.get("image_grid_pinpoints"), "config.json")

    def count(self, height: int, width: int) -> int:
        best_h, best_w = select_best_resolution((height, width), list(self.pinpoints))
        features, newlines = unpadded_features(
            height, width, self.grid, best_h // self.tile, best_w // self.tile
        )
        return self.base + features + newlines


class LlavaNextImages:
    """One LLaVA-NeXT model's image processing, built once at startup."""

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
        self._processor = built_processor(LlavaNextImageProcessorPil, kwargs, "LLaVA-NeXT")
        self.features = LlavaNextFeatures(config)
        tiling = pinpoints(self._processor.image_grid_pinpoints, "image processor's")
        if tiling != self.features.pinpoints:
            raise ConfigError(
                "LLaVA-NeXT's image processor tiles with other image_grid_pinpoints than "
                "config.json's (the model would count other features than the prompt holds)"
            )
        self.image_token_id = image_token_id
        self.max_pixels = max_pixels
        self._salt = settings_salt(model_id, processor=kwargs)

    def process(
        self, data: bytes, param: str, options: Mapping[str, Any] | None = None
    ) -> ProcessedImage:
        """One image's bytes -> its tiles, its size and its placeholder run (a 400 if
        unreadable)."""
        refuse_options(options)
        picture = decoded_image(data, param, max_pixels=self.max_pixels)
        out = processed(self._processor, [picture], param)
        pixels = np.asarray(out["pixel_values"], dtype=np.float32)[0]
        size: Sequence[int] = [int(n) for n in np.asarray(out["image_sizes"])[0]]
        tokens = self.features.count(size[0], size[1])
        return ProcessedImage(
            placeholder=IMAGE_TOKEN,
            replacement=IMAGE_TOKEN * tokens,
            embed_token_id=self.image_token_id,
            embed_count=tokens,
            fields=(
                MediaField(
                    name="pixel_values",
                    tensor=tensor_of(pixels),
                    kind=FieldKind.BATCHED,
                    pad_first_dim=True,
                ),
                MediaField(
                    name="image_sizes",
                    tensor=tensor_of(np.array(size, dtype=np.int64)),
                    kind=FieldKind.BATCHED,
                    keep_on_cpu=True,
                ),
            ),
            identifier=image_identifier(self._salt, data),
        )
