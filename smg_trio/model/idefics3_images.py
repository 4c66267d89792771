"""CPU. Idefics3 / SmolVLM images: transformers' PIL image processor, the HF processor's
placeholder expansion and vLLM's `mm_features` fields (docs/images.md §4.1).

- Pixels: `Idefics3ImageProcessorPil` with the folder's settings (transformers 5 nests them in
  processor_config.json, older folders have preprocessor_config.json): resize, split into tiles
  of `max_image_size` plus one global tile, rescale, normalise, pad.
- Placeholder: the chat template writes `<image>`; it becomes the HF processor's replacement:
  per tile `<fake_token_around_image><row_i_col_j>` + `image_seq_len` x `<image>`, a newline per
  row, then `\\n<fake_token_around_image><global-img>` + `image_seq_len` x `<image>` +
  `<fake_token_around_image>` (without the tiles and the leading newline for an unsplit image).
- Fields (vLLM's `_get_mm_fields_config`): `pixel_values` float32 [tiles, 3, H, W] and
  `pixel_attention_mask` int64 [tiles, H, W], both flat; `num_patches` int64 [] batched, kept
  on the CPU. The encoder outputs `tiles x image_seq_len` embeddings, one per `<image>`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from smg_trio.core.images import ProcessedImage
from smg_trio.errors import ClientError
from smg_trio.model.image_decode import DEFAULT_MAX_PIXELS, decoded_image
from smg_trio.model.image_processing import (
    built_processor,
    image_identifier,
    processor_kwargs,
    settings_salt,
)
from smg_trio.model.tensors import flat_field, scalar_field
from smg_trio.neutral.media import FieldKind, MediaField

IMAGE_TOKEN: Final = "<image>"
FAKE_TOKEN: Final = "<fake_token_around_image>"
GLOBAL_TOKEN: Final = "<global-img>"
# vLLM's mm_processor_kwargs taken for Idefics3: fewer or smaller tiles, never another tile size.
OPTION_KEYS: Final = frozenset({"do_image_splitting", "size"})
MAX_VARIANTS: Final = 16


class Idefics3Images:
    """One Idefics3 model's image processing, built once at startup."""

    placeholder: Final = IMAGE_TOKEN

    def __init__(
        self,
        *,
        model_id: str,
        config: Mapping[str, Any],
        processor_config: Mapping[str, Any],
        image_processor_config: Mapping[str, Any],
        image_token_id: int,
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> None:
        kwargs = processor_kwargs(image_processor_config)
        self._processor = built_processor(Idefics3ImageProcessorPil, kwargs, "Idefics3")
        self.image_token_id = image_token_id
        self.image_seq_len = int(
            processor_config.get("image_seq_len") or _default_seq_len(config) or 169
        )
        self.max_pixels = max_pixels
        self._model_id = model_id
        self._kwargs = kwargs
        # The identifier's salt: the model and every setting that changes the tensors.
        self._salt = self._salt_of(kwargs)
        # Processors with a request's settings, by those settings (bounded).
        self._variants: dict[str, tuple[Idefics3ImageProcessorPil, bytes]] = {}

    def process(
        self, data: bytes, param: str, options: Mapping[str, Any] | None = None
    ) -> ProcessedImage:
        """One image's bytes -> its tensors and placeholder replacement (a 400 if unreadable).
        `options`: the request's `mm_processor_kwargs` (`OPTION_KEYS` only)."""
        processor, salt = self._processor, self._salt
        if options:
            processor, salt = self._variant(options)
        picture = decoded_image(data, param, max_pixels=self.max_pixels)
        try:
            out = processor(images=[[picture]], return_tensors="np", return_row_col_info=True)
        except (ValueError, TypeError, OSError) as exc:  # a picture it cannot take: the client's
            raise ClientError(
                f"{param}: the image cannot be processed ({exc})", code="invalid_image", param=param
            ) from None
        pixel_values = np.asarray(out["pixel_values"], dtype=np.float32)[0]
        mask = np.asarray(out["pixel_attention_mask"], dtype=np.int64)[0]
        rows, cols = int(out["rows"][0][0]), int(out["cols"][0][0])
        tiles = int(pixel_values.shape[0])
        fields: tuple[MediaField, ...] = (
            flat_field("pixel_values", pixel_values),
            flat_field("pixel_attention_mask", mask),
            scalar_field("num_patches", tiles, kind=FieldKind.BATCHED, keep_on_cpu=True),
        )
        return ProcessedImage(
            placeholder=IMAGE_TOKEN,
            replacement=self.replacement(rows, cols),
            embed_token_id=self.image_token_id,
            embed_count=tiles * self.image_seq_len,
            fields=fields,
            identifier=image_identifier(salt, data),
        )

    def _variant(self, options: Mapping[str, Any]) -> tuple[Idefics3ImageProcessorPil, bytes]:
        """The processor with the request's settings (vLLM's `mm_processor_kwargs`), and its
        identifier salt. Only settings that keep the model's tile size (the vision tower's
        input) and can only shrink the work are taken; anything else is a 400 naming it."""
        for key in options:
            if key not in OPTION_KEYS:
                raise _bad_option(
                    key, f"not taken for Idefics3 (takes {', '.join(sorted(OPTION_KEYS))})"
                )
        splitting = options.get("do_image_splitting", self._kwargs.get("do_image_splitting"))
        if not isinstance(splitting, bool):
            raise _bad_option("do_image_splitting", "must be true or false")
        merged = {**self._kwargs, "do_image_splitting": splitting}
        if "size" in options:
            size, ceiling = options["size"], (self._kwargs.get("size") or {}).get("longest_edge")
            edge = size.get("longest_edge") if isinstance(size, dict) and len(size) == 1 else None
            if not isinstance(ceiling, int):
                raise _bad_option("size", "this model's processor has no longest_edge to bound it")
            if not isinstance(edge, int) or isinstance(edge, bool) or not 1 <= edge <= ceiling:
                raise _bad_option(
                    "size", f'must be {{"longest_edge": N}} with N in 1..{ceiling} (the model\'s)'
                )
            merged["size"] = {"longest_edge": edge}
        key = json.dumps(merged, sort_keys=True)
        cached = self._variants.get(key)
        if cached is None:
            cached = (Idefics3ImageProcessorPil(**merged), self._salt_of(merged))
            if len(self._variants) >= MAX_VARIANTS:
                self._variants.clear()
            self._variants[key] = cached
        return cached

    def _salt_of(self, kwargs: Mapping[str, Any]) -> bytes:
        return settings_salt(self._model_id, processor=kwargs, seq=self.image_seq_len)

    def replacement(self, rows: int, cols: int) -> str:
        """The HF processor's text for an image split into `rows` x `cols` tiles (0 x 0: not
        split, the global tile alone)."""
        run = IMAGE_TOKEN * self.image_seq_len
        global_part = f"{FAKE_TOKEN}{GLOBAL_TOKEN}{run}{FAKE_TOKEN}"
        if rows == 0 and cols == 0:
            return global_part
        lines = [
            "".join(f"{FAKE_TOKEN}<row_{r + 1}_col_{c + 1}>{run}" for c in range(cols)) + "\n"
            for r in range(rows)
        ]
        return "".join(lines) + "\n" + global_part


def _bad_option(key: str, reason: str) -> ClientError:
    param = f"mm_processor_kwargs.{key}"
    return ClientError(f"{param}: {reason}", param=param)


def _default_seq_len(config: Mapping[str, Any]) -> int | None:
    """transformers' rule: ((image_size // patch_size) ** 2) / scale_factor ** 2."""
    vision = config.get("vision_config") or {}
    try:
        size, patch = int(vision["image_size"]), int(vision["patch_size"])
        scale = int(config.get("scale_factor", 2))
    except (KeyError, TypeError, ValueError):
        return None
    return int(((size // patch) ** 2) / (scale**2))
