"""What the families' golden tests share: noise pictures (resizing and normalising are
exercised on every pixel), the picture as vLLM hands it to an HF processor, and one
multi-image, multi-turn conversation in both forms: our chat request's and the HF processor's
`apply_chat_template` messages (4 images: two in one turn around a text, one in a later turn)."""

from __future__ import annotations

import io
from typing import Any, Final

import numpy as np
from PIL import Image

from smg_trio.wire import openai as oa
from smg_trio.wire.openai_decode import decode_chat_request


def picture(width: int, height: int, mode: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = rng.integers(0, 256, size=(height, width, channels), dtype=np.uint8)
    image = Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def hf_rgb(data: bytes) -> Image.Image:
    """What vLLM hands the HF processor: the picture in RGB, transparency on white."""
    image = Image.open(io.BytesIO(data))
    if image.mode == "RGBA":
        rgb = Image.new("RGB", image.size, (255, 255, 255))
        rgb.paste(image, mask=image.split()[3])
        return rgb
    return image.convert("RGB")


def multi_turn_chat() -> oa.ChatCompletionRequest:
    return decode_chat_request(
        b"""{"model": "m", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:a"}},
            {"type": "text", "text": "Compare"},
            {"type": "image_url", "image_url": {"url": "data:b"}},
            {"type": "image_url", "image_url": {"url": "data:c"}}]},
        {"role": "assistant", "content": "They differ."},
        {"role": "user", "content": [{"type": "text", "text": "And this one?"},
            {"type": "image_url", "image_url": {"url": "data:d"}}]}]}"""
    )


MULTI_TURN_HF: Final[list[dict[str, Any]]] = [
    {"role": "system", "content": "Be brief."},
    {
        "role": "user",
        "content": [
            {"type": "image"},
            {"type": "text", "text": "Compare"},
            {"type": "image"},
            {"type": "image"},
        ],
    },
    {"role": "assistant", "content": "They differ."},
    {"role": "user", "content": [{"type": "text", "text": "And this one?"}, {"type": "image"}]},
]
