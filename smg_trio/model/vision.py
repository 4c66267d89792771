"""I/O (startup). A model folder's image processing, or why its images are refused.

`load_vision(folder)` reads config.json's `model_type` and, for a family we process, builds its
processor once (model/idefics3_images.py, model/qwen2_vl_images.py, model/llava_images.py,
model/llava_next_images.py, model/gemma3_images.py). What it returns answers every image
request:
- a folder whose config names no vision tower: `None`, images are a 400 (a text-only model);
- the `vision` extra missing (Pillow, numpy, transformers): a `VisionRefusal` naming it;
- a vision family we do not process: a `VisionRefusal` naming its model type.
Only the families' modules import the extra, and only here, so a text-only install never does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from smg_trio.core.images import ProcessedImage
from smg_trio.errors import ConfigError
from smg_trio.model.folder import read_json_object

logger = logging.getLogger(__name__)

EXTRA_HINT: Final = "install smg-trio[vision] (Pillow, numpy, transformers) to take images"
SUPPORTED: Final = (
    "idefics3",
    "qwen2_vl",
    "qwen2_5_vl",
    "qwen3_vl",
    "llava",
    "llava_next",
    "gemma3",
)
# config.json's key for the embedded image token, where it is not `image_token_id`.
TOKEN_INDEX_FAMILIES: Final = ("llava", "llava_next", "gemma3")


class ImageProcessor(Protocol):
    """One model's image processing (CPU-bound: run it off the event loop)."""

    @property
    def placeholder(self) -> str: ...

    def process(
        self, data: bytes, param: str, options: Mapping[str, Any] | None = None
    ) -> ProcessedImage:
        """`options`: the request's `mm_processor_kwargs` (a 400 for what it does not take)."""
        ...


@dataclass(frozen=True)
class VisionRefusal:
    """Why this gateway refuses images for its model: the 400's words."""

    reason: str


def load_vision(
    folder: Path, model_id: str, *, device_normalize: bool | None = None
) -> ImageProcessor | VisionRefusal | None:
    """`device_normalize`: the engines' `--mm-device-do-normalize` (None: vLLM's default, on
    for the families that support it; it applies to those alone, as vLLM turns it off for the
    others: docs/images.md §4.2)."""
    config = read_json_object(folder / "config.json") or {}
    model_type = str(config.get("model_type") or "")
    if "vision_config" not in config and model_type not in SUPPORTED:
        return None
    if model_type not in SUPPORTED:
        return VisionRefusal(
            f"images for model type {model_type!r} are not supported by this gateway "
            f"(it processes {', '.join(SUPPORTED)})"
        )
    key = "image_token_index" if model_type in TOKEN_INDEX_FAMILIES else "image_token_id"
    image_token_id = config.get(key)
    if not isinstance(image_token_id, int):
        return VisionRefusal(f"the model's config.json names no {key}")
    try:
        if model_type == "idefics3":
            return _idefics3(folder, model_id, config, image_token_id)
        if model_type == "llava":
            return _llava(folder, model_id, config, image_token_id)
        if model_type == "llava_next":
            return _llava_next(folder, model_id, config, image_token_id)
        if model_type == "gemma3":
            return _gemma3(folder, model_id, config, image_token_id)
        return _qwen2_vl(folder, model_id, image_token_id, device_normalize is not False)
    except ImportError as exc:
        logger.warning("images refused: %s (%s)", EXTRA_HINT, exc)
        return VisionRefusal(f"this gateway was installed without image support: {EXTRA_HINT}")


def _image_processor_config(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """processor_config.json, and the image processor's settings: nested in it (transformers
    5), else preprocessor_config.json."""
    processor_config = read_json_object(folder / "processor_config.json") or {}
    nested = processor_config.get("image_processor")
    image_config: dict[str, Any] = (
        dict(nested)
        if isinstance(nested, dict)
        else read_json_object(folder / "preprocessor_config.json") or {}
    )
    return processor_config, image_config


def _idefics3(
    folder: Path, model_id: str, config: Mapping[str, Any], image_token_id: int
) -> ImageProcessor:
    from smg_trio.model.idefics3_images import Idefics3Images

    processor_config, image_config = _image_processor_config(folder)
    return Idefics3Images(
        model_id=model_id,
        config=config,
        processor_config=processor_config,
        image_processor_config=image_config,
        image_token_id=image_token_id,
    )


def _qwen2_vl(
    folder: Path, model_id: str, image_token_id: int, device_normalize: bool
) -> ImageProcessor:
    from smg_trio.model.qwen2_vl_images import Qwen2VLImages

    _, image_config = _image_processor_config(folder)
    return Qwen2VLImages(
        model_id=model_id,
        image_processor_config=image_config,
        image_token_id=image_token_id,
        device_normalize=device_normalize,
    )


def _llava(
    folder: Path, model_id: str, config: Mapping[str, Any], image_token_id: int
) -> ImageProcessor | VisionRefusal:
    from smg_trio.model.llava_images import LlavaImages, feature_count

    try:
        feature_count(config)
    except ConfigError as exc:  # a tower we cannot count for: text served, images refused
        return VisionRefusal(exc.message)
    _, image_config = _image_processor_config(folder)
    return LlavaImages(
        model_id=model_id,
        config=config,
        image_processor_config=image_config,
        image_token_id=image_token_id,
    )


def _llava_next(
    folder: Path, model_id: str, config: Mapping[str, Any], image_token_id: int
) -> ImageProcessor | VisionRefusal:
    from smg_trio.model.llava_next_images import LlavaNextImages

    _, image_config = _image_processor_config(folder)
    try:
        return LlavaNextImages(
            model_id=model_id,
            config=config,
            image_processor_config=image_config,
            image_token_id=image_token_id,
        )
    except ConfigError as exc:  # a tower or tiling we cannot count for: text served
        return VisionRefusal(exc.message)


def _gemma3(
    folder: Path, model_id: str, config: Mapping[str, Any], image_token_id: int
) -> ImageProcessor | VisionRefusal:
    from smg_trio.model.gemma3_images import DEFAULT_SEQ_LENGTH, Gemma3Images

    processor_config, image_config = _image_processor_config(folder)
    tokenizer_config = read_json_object(folder / "tokenizer_config.json") or {}
    named = tokenizer_config.get("extra_special_tokens")  # transformers 5 may keep them here
    named = {**(named if isinstance(named, dict) else {}), **tokenizer_config}
    tokens = {
        name: named[name]
        for name in ("boi_token", "eoi_token", "image_token")
        if isinstance(named.get(name), str)
    }
    per_image = config.get("mm_tokens_per_image", DEFAULT_SEQ_LENGTH)
    seq_length = processor_config.get("image_seq_length", per_image)
    if seq_length != per_image or not isinstance(seq_length, int) or seq_length < 1:
        return VisionRefusal(
            f"Gemma 3's processor writes {seq_length!r} image tokens where config.json's "
            f"mm_tokens_per_image is {per_image!r}"
        )
    try:
        return Gemma3Images(
            model_id=model_id,
            tokens=tokens,
            image_processor_config=image_config,
            image_token_id=image_token_id,
            seq_length=seq_length,
        )
    except ConfigError as exc:  # settings we cannot take: text served, images refused
        return VisionRefusal(exc.message)
