"""CPU. Gemma 3 images: transformers' PIL image processor, the HF processor's placeholder
expansion and vLLM's `mm_features` fields (docs/images.md §4.5).

- Pixels: `Gemma3ImageProcessorPil` with the folder's settings: the picture resized to the
  vision tower's square (896 x 896 for Gemma 3), rescaled, normalised; with pan-and-scan, its
  crops after it (a long picture cut across its long side into 2 to `max_num_crops` crops, each
  processed as a picture): [1 + crops, 3, H, W].
- Placeholder: the chat template writes `<start_of_image>` (the tokenizer's `boi_token`); it
  becomes the HF processor's `full_image_sequence`, `"\\n\\n" + boi + image_token x
  image_seq_length + eoi + "\\n\\n"` (vLLM's replacement); with crops, "Here is the original
  image {sequence} and here are some crops to help you see better {sequence} {sequence}...".
  Only the soft image tokens (config.json's `image_token_index`) are embedded. The newlines
  around a sequence merge with the text's into one token ("\\n" + "\\n\\n" is "\\n\\n\\n" in
  Gemma's vocabulary), as the HF processor tokenizes the whole text, so the span is the first
  `boi` to the last `eoi` (`ProcessedImage.span_text`, core/images.py): special tokens, which
  nothing merges with. vLLM's span takes the whole replacement, found after splitting merged
  newline tokens again (two adjacent images then share one token); the embedded positions are
  the same.
- `mm_processor_kwargs` (vLLM's for Gemma 3): `do_pan_and_scan`, `pan_and_scan_min_crop_size`,
  `pan_and_scan_max_num_crops`, `pan_and_scan_min_ratio_to_activate`, over the folder's
  settings, over the HF processor's defaults (off, 256, 4, 1.2); any other key, or a value of
  the wrong kind, a 400 naming it.
- Fields (vLLM's Gemma 3 fields): `pixel_values` float32 [1 + crops, 3, H, W] flat, sized by
  `num_patches` int64 [] (1 + crops) batched, kept on the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

from smg_trio.core.images import ProcessedImage
from smg_trio.errors import ClientError, ConfigError
from smg_trio.model.image_decode import DEFAULT_MAX_PIXELS, decoded_image
from smg_trio.model.image_processing import (
    built_processor,
    image_identifier,
    processed,
    processor_kwargs,
    settings_salt,
)
from smg_trio.model.tensors import flat_field, scalar_field
from smg_trio.neutral.media import FieldKind

# The tokenizer's names for them, as Gemma 3's tokenizer_config.json writes them.
BOI_TOKEN: Final = "<start_of_image>"
EOI_TOKEN: Final = "<end_of_image>"
IMAGE_TOKEN: Final = "<image_soft_token>"
DEFAULT_SEQ_LENGTH: Final = 256
# Gemma3Processor's defaults for what its image processor config leaves unset (None).
PAN_AND_SCAN_DEFAULTS: Final[Mapping[str, Any]] = {
    "do_pan_and_scan": False,
    "pan_and_scan_min_crop_size": 256,
    "pan_and_scan_max_num_crops": 4,
    "pan_and_scan_min_ratio_to_activate": 1.2,
}


def _bad_option(key: str, why: str) -> ClientError:
    return ClientError(f"mm_processor_kwargs.{key}: {why}", param=f"mm_processor_kwargs.{key}")


def pan_and_scan_settings(
    base: Mapping[str, Any], options: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The pan-and-scan settings for one image: the request's over `base` (the folder's, the
    defaults); a key not among them, or a value of the wrong kind, a 400 naming it."""
    merged = dict(base)
    for key, value in (options or {}).items():
        if key not in PAN_AND_SCAN_DEFAULTS:
            raise _bad_option(
                key, f"not taken for Gemma 3 (takes {', '.join(PAN_AND_SCAN_DEFAULTS)})"
            )
        if key == "do_pan_and_scan":
            if not isinstance(value, bool):
                raise _bad_option(key, "must be true or false")
        elif key == "pan_and_scan_min_ratio_to_activate":
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise _bad_option(key, "must be a positive number")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _bad_option(key, "must be a positive integer")
        merged[key] = value
    return merged


class Gemma3Images:
    """One Gemma 3 model's image processing, built once at startup."""

    def __init__(
        self,
        *,
        model_id: str,
        tokens: Mapping[str, str],
        image_processor_config: Mapping[str, Any],
        image_token_id: int,
        seq_length: int,
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> None:
        """`tokens`: the tokenizer's `boi_token`, `eoi_token`, `image_token` (defaults: Gemma 3's)."""
        kwargs = {
            k: v
            for k, v in processor_kwargs(image_processor_config).items()
            if k not in PAN_AND_SCAN_DEFAULTS
        }
        self._processor = built_processor(Gemma3ImageProcessorPil, kwargs, "Gemma 3")
        self.pan_and_scan = {
            key: default if image_processor_config.get(key) is None else image_processor_config[key]
            for key, default in PAN_AND_SCAN_DEFAULTS.items()
        }
        try:
            pan_and_scan_settings(PAN_AND_SCAN_DEFAULTS, self.pan_and_scan)
        except ClientError as exc:  # the folder's settings: the operator's to fix
            raise ConfigError(f"Gemma 3's image processor config: {exc.message}") from None
        self.boi = tokens.get("boi_token", BOI_TOKEN)
        self.eoi = tokens.get("eoi_token", EOI_TOKEN)
        self.placeholder = self.boi  # the tokenizer's own name for it
        self.sequence = f"\n\n{self.boi}{tokens.get('image_token', IMAGE_TOKEN) * seq_length}"
        self.sequence += f"{self.eoi}\n\n"
        self.image_token_id = image_token_id
        self.seq_length = seq_length
        self.max_pixels = max_pixels
        self._model_id = model_id
        self._kwargs = kwargs

    def replacement(self, crops: int) -> str:
        """The HF processor's text for a picture and its `crops` (vLLM's the same)."""
        if not crops:
            return self.sequence
        return (
            f"Here is the original image {self.sequence} and here are some crops to help you "
            "see better " + " ".join([self.sequence] * crops)
        )

    def process(
        self, data: bytes, param: str, options: Mapping[str, Any] | None = None
    ) -> ProcessedImage:
        """One image's bytes -> its pictures and placeholder text (a 400 if unreadable)."""
        settings = pan_and_scan_settings(self.pan_and_scan, options)
        picture = decoded_image(data, param, max_pixels=self.max_pixels)
        out = processed(self._processor, [picture], param, **settings)
        pixels = np.asarray(out["pixel_values"], dtype=np.float32)
        crops = int(np.asarray(out["num_crops"])[0])
        text = self.replacement(crops)
        salt = settings_salt(  # the crop settings change nothing while pan-and-scan is off
            self._model_id,
            processor=self._kwargs,
            seq_length=self.seq_length,
            pan_and_scan=settings if settings["do_pan_and_scan"] else False,
        )
        return ProcessedImage(
            placeholder=self.placeholder,
            replacement=text,
            embed_token_id=self.image_token_id,
            embed_count=(1 + crops) * self.seq_length,
            fields=(
                flat_field("pixel_values", pixels),
                scalar_field("num_patches", 1 + crops, kind=FieldKind.BATCHED, keep_on_cpu=True),
            ),
            identifier=image_identifier(salt, data),
            span_text=text[text.index(self.boi) : text.rindex(self.eoi) + len(self.eoi)],
        )
