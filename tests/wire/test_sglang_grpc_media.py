"""Images in SGLang's gRPC `mm_inputs` (wire/sglang_grpc_media.py, docs/images.md §5.2).

Golden bytes for an Idefics3-shaped pair and a LLaVA-shaped pair; decoded back, the tensors are
the images' concatenated / stacked, `im_token_id` always set. The reference SGLang engine's
reading (as smg-grpc-servicer 0.14.0's SGLang servicer reads it, stricter where it would drop
images) finds no problem in what we encode and names corruptions. No SGLang runs here.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pytest

from smg_trio.engines.grpc_sglang_media import mm_inputs_problem
from smg_trio.errors import ClientError
from smg_trio.model.tensors import flat_field
from smg_trio.neutral.media import MediaFeature
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire.sglang_grpc_media import sglang_mm_inputs
from tests.wire.grpc_media_cases import (
    LLAVA_PROMPT,
    PROMPT,
    TWO_IDEFICS,
    TWO_LLAVA,
    built,
    digest,
)

pytestmark = pytest.mark.timeout(30)

GOLDEN_IDEFICS: Final = "bef999caa667833d81693f4f471a6b2d0090b62c1521ccf7e5ffdc0e9595554c"
GOLDEN_LLAVA: Final = "3738d0f52a8b426a3ac8b38704826ccf947bbe1afa15ea53504f253e5ddc207e"


def request(
    media: tuple[MediaFeature, ...], prompt: tuple[int, ...] = PROMPT
) -> sglang.GenerateRequest:
    message = built(Runtime.SGLANG, media, prompt)
    assert isinstance(message, sglang.GenerateRequest)
    return message


def array(tensor: sglang.TensorData) -> np.ndarray:
    return np.frombuffer(tensor.data, dtype=tensor.dtype).reshape(tuple(tensor.shape))


def test_idefics3_shaped_images() -> None:
    message = request(TWO_IDEFICS)
    mm = message.mm_inputs
    assert list(mm.pixel_values.shape) == [3, 3, 4, 4]
    assert array(mm.pixel_values)[2].flat[1] == 1.0  # the second image's first tile
    assert array(mm.model_specific_tensors["num_patches"]).tolist() == [2, 1]
    assert list(mm.model_specific_tensors["pixel_attention_mask"].shape) == [3, 4, 4]
    assert mm.im_token_id == 9
    assert [(p.offset, p.length) for p in mm.mm_placeholders] == [(1, 4), (5, 4)]
    assert not mm.image_urls
    assert not mm.modalities
    assert digest(mm) == GOLDEN_IDEFICS
    assert mm_inputs_problem(message, PROMPT) is None


def test_llava_shaped_images_name_their_span_token() -> None:
    message = request(TWO_LLAVA, LLAVA_PROMPT)
    assert message.mm_inputs.HasField("im_token_id")
    assert message.mm_inputs.im_token_id == 9
    assert list(message.mm_inputs.pixel_values.shape) == [2, 3, 2, 2]
    assert digest(message.mm_inputs) == GOLDEN_LLAVA
    assert mm_inputs_problem(message, LLAVA_PROMPT) is None


def test_a_text_request_carries_no_mm_inputs() -> None:
    assert not request(()).HasField("mm_inputs")


@pytest.mark.parametrize(
    ("corrupt", "problem"),
    [
        (lambda r: r.mm_inputs.ClearField("pixel_values"), "served as text"),
        (lambda r: r.mm_inputs.image_urls.append("https://x/a.png"), "image_urls"),
        (lambda r: r.mm_inputs.ClearField("im_token_id"), "no im_token_id"),
        (lambda r: r.mm_inputs.pixel_values.shape.__setitem__(0, 4), "bytes for float32"),
        (lambda r: setattr(r.mm_inputs.mm_placeholders[1], "offset", 8), "leaves the prompt"),
        (lambda r: setattr(r.mm_inputs, "im_token_id", 7), "holds no im_token_id"),
    ],
)
def test_the_reference_reading_names_corruptions(corrupt: object, problem: str) -> None:
    message = request(TWO_IDEFICS)
    corrupt(message)  # type: ignore[operator]
    found = mm_inputs_problem(message, PROMPT)
    assert found is not None
    assert problem in found


def test_refused_before_sending() -> None:
    mixed_spans = MediaFeature(
        identifier="e" * 64,
        offset=0,
        length=4,
        is_embed=None,
        fields=(flat_field("pixel_values", np.zeros((1, 6), dtype=np.float32)),),
    )
    with pytest.raises(ClientError, match="SGLang over gRPC: its image spans"):
        sglang_mm_inputs((mixed_spans,), PROMPT)  # ids 1, 5, 9, 9: not one token's
    no_pixels = MediaFeature(
        identifier="f" * 64,
        offset=2,
        length=3,
        is_embed=None,
        fields=(flat_field("patches", np.zeros((1, 6), dtype=np.float32)),),
    )
    with pytest.raises(ClientError, match="no 'pixel_values'"):
        sglang_mm_inputs((no_pixels,), PROMPT)
