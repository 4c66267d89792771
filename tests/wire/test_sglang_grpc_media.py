"""Images in SGLang's gRPC `mm_inputs` (wire/sglang_grpc_media.py, docs/images.md §5.2).

Golden bytes for an Idefics3-shaped pair and a LLaVA-shaped pair; decoded back, the tensors are
the images' concatenated / stacked, `im_token_id` always set. The reference SGLang engine's
reading (as smg-grpc-servicer 0.14.0's SGLang servicer reads it, stricter where it would drop
images) finds no problem in what we encode and names corruptions. No SGLang runs here.
"""

from __future__ import annotations

import hashlib
from typing import Final

import numpy as np
import pytest

from smg_trio.engines.grpc_sglang_media import mm_inputs_problem
from smg_trio.errors import ClientError
from smg_trio.model.tensors import flat_field
from smg_trio.neutral.media import MediaFeature
from smg_trio.neutral.runtime import Runtime
from smg_trio.neutral.sampling import EngineRequest, SamplingParams
from smg_trio.wire import grpc_messages
from smg_trio.wire._proto import sglang_scheduler_pb2 as sglang
from smg_trio.wire.sglang_grpc_media import sglang_mm_inputs
from tests.wire.test_vllm_grpc_media import PROMPT, TWO_IDEFICS, TWO_LLAVA

pytestmark = pytest.mark.timeout(30)

GOLDEN_IDEFICS: Final = "71cd7424c88c03699cbfd11bca77eb5886d885897801b59c02a87c957c50ea7a"
GOLDEN_LLAVA: Final = "3738d0f52a8b426a3ac8b38704826ccf947bbe1afa15ea53504f253e5ddc207e"


LLAVA_PROMPT: Final = (1, 9, 9, 9, 9, 9, 9, 9, 9, 2)  # two spans of 4 <image>


def request(
    media: tuple[MediaFeature, ...], prompt: tuple[int, ...] = PROMPT
) -> sglang.GenerateRequest:
    engine_request = EngineRequest(
        request_id="r",
        choice_index=0,
        prompt_ids=prompt,
        sampling=SamplingParams(max_tokens=2),
        media=media,
    )
    built = grpc_messages.build_generate(Runtime.SGLANG, engine_request, "r-0")
    assert isinstance(built, sglang.GenerateRequest)
    return built


def digest(mm: sglang.MultimodalInputs) -> str:
    return hashlib.sha256(mm.SerializeToString(deterministic=True)).hexdigest()


def array(tensor: sglang.TensorData) -> np.ndarray:
    return np.frombuffer(tensor.data, dtype=tensor.dtype).reshape(tuple(tensor.shape))


def test_idefics3_shaped_images() -> None:
    built = request(TWO_IDEFICS)
    mm = built.mm_inputs
    assert list(mm.pixel_values.shape) == [3, 3, 2, 2]
    assert array(mm.pixel_values)[2].flat[0] == 5.0  # the second image's first tile
    assert array(mm.model_specific_tensors["num_patches"]).tolist() == [2, 1]
    assert list(mm.model_specific_tensors["pixel_attention_mask"].shape) == [3, 2, 2]
    assert mm.im_token_id == 9
    assert [(p.offset, p.length) for p in mm.mm_placeholders] == [(1, 4), (5, 4)]
    assert not mm.image_urls
    assert not mm.modalities
    assert digest(mm) == GOLDEN_IDEFICS
    assert mm_inputs_problem(built, PROMPT) is None


def test_llava_shaped_images_name_their_span_token() -> None:
    built = request(TWO_LLAVA, LLAVA_PROMPT)
    assert built.mm_inputs.HasField("im_token_id")
    assert built.mm_inputs.im_token_id == 9
    assert list(built.mm_inputs.pixel_values.shape) == [2, 3, 2, 2]
    assert digest(built.mm_inputs) == GOLDEN_LLAVA
    assert mm_inputs_problem(built, LLAVA_PROMPT) is None


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
    built = request(TWO_IDEFICS)
    corrupt(built)  # type: ignore[operator]
    found = mm_inputs_problem(built, PROMPT)
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
