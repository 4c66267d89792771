"""CPU. Gemma 3 images: transformers' PIL image processor, the HF processor's placeholder
expansion and vLLM's `mm_features` fields (docs/images.md §4.5).

- Pixels: `Gemma3ImageProcessorPil` with the folder's settings: the picture resized to the
  vision tower's square (896 x 896 for Gemma 3), rescaled, normalised: [1, 3, H, W].
- Placeholder: the chat template writes `<start_of_image>` (the tokenizer's `boi_token`); it
  becomes `"\\n\\n" + boi + image_token x image_seq_length + eoi + "\\n\\n"` (the HF
  processor's `full_image_sequence`, vLLM's replacement), and only the soft image tokens
  (config.json's `image_token_index`) are embedded. The newlines around it merge with the
  text's into one token ("\\n" + "\\n\\n" is "\\n\\n\\n" in Gemma's vocabulary), as the HF
  processor tokenizes the whole text, so the span is what lies between them, `boi` to `eoi`
  (`ProcessedImage.span_text`, core/images.py). vLLM's span takes the newline token on each
  side too (found after splitting merged newline tokens again; two adjacent images then
  share one); the embedded positions are the same.
- Pan-and-scan (extra crops of a long picture, with their own prompt text) is not built: a
  folder that turns it on serves text and refuses images naming `do_pan_and_scan`, and the
  request's `mm_processor_kwargs` take only `do_pan_and_scan: false` (the default), any other
  key or value a 400 naming it.
- Fields (vLLM's Gemma 3 fields): `pixel_values` float32 [1, 3, H, W] flat, sized by
  `num_patches` int64 [] batched (1: the picture, no crops), kept on the CPU.
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
PAN_AND_SCAN: Final = "do_pan_and_scan"


def pan_and_scan_refusal(image_config: Mapping[str, Any]) -> str | None:
    """Why a folder's settings cannot be served (pan-and-scan turned on), or None."""
    if image_config.get(PAN_AND_SCAN):
        return (
            f"Gemma 3's image processor config turns on {PAN_AND_SCAN}, which this gateway "
            "does not process (its crops and their prompt text); turn it off to take images"
        )
    return None


def refuse_gemma3_options(options: Mapping[str, Any] | None) -> None:
    """`mm_processor_kwargs`: `do_pan_and_scan: false` is what we do; anything else a 400."""
    for key, value in (options or {}).items():
        if key == PAN_AND_SCAN and value is False:
            continue
        pan_and_scan = key == PAN_AND_SCAN or key.startswith("pan_and_scan")
        what = "pan-and-scan is not built here" if pan_and_scan else "not taken for this model"
        raise ClientError(f"mm_processor_kwargs.{key}: {what}", param=f"mm_processor_kwargs.{key}")


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
        refusal = pan_and_scan_refusal(image_processor_config)
        if refusal is not None:
            raise ConfigError(refusal)
        kwargs = processor_kwargs(image_processor_config)
        self._processor = built_processor(Gemma3ImageProcessorPil, kwargs, "Gemma 3")
        boi = tokens.get("boi_token", BOI_TOKEN)
        image = tokens.get("image_token", IMAGE_TOKEN)
        eoi = tokens.get("eoi_token", EOI_TOKEN)
        self.placeholder = boi  # the tokenizer's own name for it
        self.span_text = f"{boi}{image * seq_length}{eoi}"
        self.replacement = f"\n\n{self.span_text}\n\n"
        self.image_token_id = image_token_id
        self.seq_length = seq_length
        self.max_pixels = max_pixels
        self._salt = settings_salt(model_id, processor=kwargs, seq_length=seq_length)

    def process(
        self, data: bytes, param: str, options: Mapping[str, Any] | None = None
    ) -> ProcessedImage:
        """One image's bytes -> its picture tensor and placeholder run (a 400 if unreadable)."""
        refuse_gemma3_options(options)
        picture = decoded_image(data, param, max_pixels=self.max_pixels)
        out = processed(self._processor, [picture], param, do_pan_and_scan=False)
        pixels = np.asarray(out["pixel_values"], dtype=np.float32)
        return ProcessedImage(
            placeholder=self.placeholder,
            replacement=self.replacement,
            embed_token_id=self.image_token_id,
            embed_count=self.seq_length,
            fields=(
                flat_field("pixel_values", pixels),
                scalar_field(
                    "num_patches", pixels.shape[0], kind=FieldKind.BATCHED, keep_on_cpu=True
                ),
            ),
            identifier=image_identifier(self._salt, data),
            span_text=self.span_text,
        )
