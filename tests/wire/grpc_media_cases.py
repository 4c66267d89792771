"""Images shaped as two families lay them out, and the gRPC GenerateRequest built around them:
what the vLLM and SGLang `mm_inputs` tests (test_vllm_grpc_media.py, test_sglang_grpc_media.py)
encode and pin."""

from __future__ import annotations

import hashlib
from typing import Final

import numpy as np
from google.protobuf.message import Message

from smg_trio.neutral.media import FieldKind, MediaFeature, MediaField, Tensor
from smg_trio.neutral.runtime import Runtime
from smg_trio.neutral.sampling import EngineRequest, SamplingParams
from smg_trio.wire import grpc_messages
from tests.wire.test_vllm_mm_features import PROMPT, feature

LLAVA_PROMPT: Final = (1, 9, 9, 9, 9, 9, 9, 9, 9, 2)  # two spans of 4 <image>


def llava(offset: int, identifier: str, value: float) -> MediaFeature:
    """A LLaVA-1.5-shaped image: batched `pixel_values` [3, H, W], every span position embeds."""
    pixels = np.full((3, 2, 2), value, dtype=np.float32)
    field = MediaField(
        name="pixel_values",
        tensor=Tensor("float32", (3, 2, 2), pixels.tobytes()),
        kind=FieldKind.BATCHED,
    )
    return MediaFeature(
        identifier=identifier, offset=offset, length=4, is_embed=None, fields=(field,)
    )


# Idefics3-shaped (flat pixel_values and mask, batched num_patches): 2 tiles at 1, 1 tile at 5.
TWO_IDEFICS: Final = (feature(2, 1, "a" * 64), feature(1, 5, "b" * 64))
TWO_LLAVA: Final = (llava(1, "c" * 64, 0.5), llava(5, "d" * 64, -1.0))


def built(runtime: Runtime, media: tuple[MediaFeature, ...], prompt: tuple[int, ...]) -> Message:
    engine_request = EngineRequest(
        request_id="r",
        choice_index=0,
        prompt_ids=prompt,
        sampling=SamplingParams(max_tokens=2),
        media=media,
    )
    return grpc_messages.build_generate(runtime, engine_request, "r-0")


def digest(mm: Message) -> str:
    """The deterministic serialization's sha256: what the golden tests pin."""
    return hashlib.sha256(mm.SerializeToString(deterministic=True)).hexdigest()


__all__ = ["LLAVA_PROMPT", "PROMPT", "TWO_IDEFICS", "TWO_LLAVA", "built", "digest", "llava"]
