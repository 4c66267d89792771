"""Images in vLLM's gRPC `mm_inputs` (wire/vllm_grpc_media.py, docs/images.md §5.1).

- Golden bytes: two Idefics3-shaped images (2 and 1 tiles) and a LLaVA-shaped pair encode to
  pinned protobuf bytes; decoded back, the tensors are the images' concatenated / stacked.
- The reference engine's reading (as smg-grpc-servicer 0.14.0 reads it) finds no problem in what
  we encode, and a named one in corruptions.
- Refused before sending (a 400): a flat field with no sizes field, shapes that cannot stack, a
  dtype the servicer cannot read, embed positions that are not one token id's.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pytest

from smg_trio.engines.grpc_vllm_media import mm_inputs_problem
from smg_trio.errors import ClientError
from smg_trio.model.tensors import flat_field
from smg_trio.neutral.media import FieldKind, MediaFeature, MediaField, Tensor
from smg_trio.neutral.runtime import Runtime
from smg_trio.wire._proto import common_pb2 as common
from smg_trio.wire._proto import vllm_engine_pb2 as vllm
from smg_trio.wire.vllm_grpc_media import vllm_mm_inputs
from tests.wire.grpc_media_cases import PROMPT, TWO_IDEFICS, TWO_LLAVA, built, digest, llava
from tests.wire.test_vllm_mm_features import feature

pytestmark = pytest.mark.timeout(30)


def request(media: tuple[MediaFeature, ...]) -> vllm.GenerateRequest:
    message = built(Runtime.VLLM, media, PROMPT)
    assert isinstance(message, vllm.GenerateRequest)
    return message


def array(tensor: vllm.TensorData) -> np.ndarray:
    return np.frombuffer(tensor.inline, dtype=tensor.dtype).reshape(tuple(tensor.shape))


def test_idefics3_images_concatenate_with_their_sizes() -> None:
    mm = request(TWO_IDEFICS).mm_inputs
    assert mm.modality == common.IMAGE
    assert list(mm.pixel_values.shape) == [3, 3, 4, 4]
    expected = np.concatenate(
        [
            np.arange(96, dtype=np.float32).reshape(2, 3, 4, 4),
            np.arange(48, dtype=np.float32).reshape(1, 3, 4, 4),
        ]
    )
    assert np.array_equal(array(mm.pixel_values), expected)
    assert dict(mm.flat_keys) == {
        "pixel_values": "num_patches",
        "pixel_attention_mask": "num_patches",
    }
    assert list(mm.batched_keys) == ["num_patches"]
    assert list(mm.keep_on_cpu_keys) == ["num_patches"]
    assert array(mm.model_specific_tensors["num_patches"]).tolist() == [2, 1]
    assert list(array(mm.model_specific_tensors["pixel_attention_mask"]).shape) == [3, 4, 4]
    assert mm.im_token_id == 9
    assert [(p.offset, p.length) for p in mm.mm_placeholders] == [(1, 4), (5, 4)]
    assert list(mm.mm_hashes) == ["a" * 64, "b" * 64]
    assert digest(mm) == GOLDEN_IDEFICS
    assert mm_inputs_problem(request(TWO_IDEFICS), PROMPT) is None


def test_llava_images_stack() -> None:
    mm = request(TWO_LLAVA).mm_inputs
    assert list(mm.pixel_values.shape) == [2, 3, 2, 2]
    assert array(mm.pixel_values)[0].flat[0] == 0.5
    assert array(mm.pixel_values)[1].flat[0] == -1.0
    assert list(mm.batched_keys) == ["pixel_values"]
    assert not mm.flat_keys
    assert not mm.HasField("im_token_id")  # every position embeds
    assert digest(mm) == GOLDEN_LLAVA
    assert mm_inputs_problem(request(TWO_LLAVA), PROMPT) is None


def _tiles(offset: int, identifier: str, tiles: int, value: float) -> MediaFeature:
    """A LLaVA-NeXT-shaped image: `tiles` pictures [tiles, 3, 2, 2], padded when stacked."""
    pixels = np.full((tiles, 3, 2, 2), value, dtype=np.float32)
    field = MediaField(
        name="pixel_values",
        tensor=Tensor("float32", pixels.shape, pixels.tobytes()),
        kind=FieldKind.BATCHED,
        pad_first_dim=True,
    )
    return MediaFeature(
        identifier=identifier, offset=offset, length=4, is_embed=None, fields=(field,)
    )


def test_images_of_different_tile_counts_stack_zero_padded_to_the_largest() -> None:
    mm = vllm_mm_inputs((_tiles(1, "c" * 64, 3, 0.5), _tiles(5, "d" * 64, 1, -1.0)), PROMPT)
    pixels = array(mm.pixel_values)
    assert pixels.shape == (2, 3, 3, 2, 2)
    assert (pixels[0] == 0.5).all()
    assert (pixels[1, 0] == -1.0).all()
    assert (pixels[1, 1:] == 0.0).all()  # vLLM's model cuts them back by image_sizes
    assert list(mm.batched_keys) == ["pixel_values"]
    # Equal tile counts stack as any batched field does, with no padding.
    alike = vllm_mm_inputs((_tiles(1, "c" * 64, 2, 0.5), _tiles(5, "d" * 64, 2, 1.0)), PROMPT)
    assert list(alike.pixel_values.shape) == [2, 2, 3, 2, 2]
    # Only a field marked pad_first_dim pads; and only on the first dim.
    other = MediaField(
        name="pixel_values",
        tensor=Tensor("float32", (1, 3, 3, 2), bytes(72)),
        kind=FieldKind.BATCHED,
        pad_first_dim=True,
    )
    wide = MediaFeature(identifier="e" * 64, offset=5, length=4, is_embed=None, fields=(other,))
    with pytest.raises(ClientError, match="differs in shape"):
        vllm_mm_inputs((_tiles(1, "c" * 64, 2, 0.5), wide), PROMPT)


def test_a_text_request_carries_no_mm_inputs() -> None:
    assert not request(()).HasField("mm_inputs")


@pytest.mark.parametrize(
    ("corrupt", "problem"),
    [
        (lambda r: r.mm_inputs.mm_hashes.pop(), "mm_hashes for 2"),
        (lambda r: r.mm_inputs.pixel_values.shape.__setitem__(0, 4), "bytes for float32"),
        (lambda r: r.mm_inputs.flat_keys.__setitem__("pixel_values", "nope"), "names no tensor"),
        (lambda r: setattr(r.mm_inputs.mm_placeholders[1], "offset", 8), "leaves the prompt"),
        (lambda r: setattr(r.mm_inputs, "im_token_id", 7), "holds no im_token_id"),
        (lambda r: setattr(r.mm_inputs.pixel_values, "dtype", "int32"), "unsupported"),
    ],
)
def test_the_reference_reading_names_corruptions(corrupt: object, problem: str) -> None:
    message = request(TWO_IDEFICS)
    corrupt(message)  # type: ignore[operator]
    found = mm_inputs_problem(message, PROMPT)
    assert found is not None
    assert problem in found


def test_sizes_that_disagree_are_named() -> None:
    message = request(TWO_IDEFICS)
    message.mm_inputs.model_specific_tensors["num_patches"].inline = np.array(
        [1, 1], dtype=np.int64
    ).tobytes()
    assert "sizes sum to 2" in (mm_inputs_problem(message, PROMPT) or "")


def test_refused_before_sending() -> None:
    qwen_like = MediaFeature(
        identifier="e" * 64,
        offset=1,
        length=4,
        is_embed=None,
        fields=(flat_field("pixel_values", np.zeros((4, 6), dtype=np.float32)),),
    )
    with pytest.raises(ClientError, match="no per-image size field"):
        vllm_mm_inputs((qwen_like,), PROMPT)
    odd = (
        llava(1, "c" * 64, 0.5),
        MediaFeature(
            identifier="f" * 64,
            offset=5,
            length=4,
            is_embed=None,
            fields=(
                MediaField(
                    name="pixel_values",
                    tensor=Tensor("float32", (3, 1, 2), bytes(24)),
                    kind=FieldKind.BATCHED,
                ),
            ),
        ),
    )
    with pytest.raises(ClientError, match="differs in shape"):
        vllm_mm_inputs(odd, PROMPT)
    int32 = MediaFeature(
        identifier="g" * 64,
        offset=1,
        length=4,
        is_embed=None,
        fields=(
            MediaField(
                name="pixel_values", tensor=Tensor("int32", (1,), bytes(4)), kind=FieldKind.BATCHED
            ),
        ),
    )
    with pytest.raises(ClientError, match="int32"):
        vllm_mm_inputs((int32,), PROMPT)
    mixed = feature(1, 1, "h" * 64)
    mixed = MediaFeature(
        identifier=mixed.identifier,
        offset=1,
        length=4,
        is_embed=(True, True, False, True),
        fields=mixed.fields,
    )
    with pytest.raises(ClientError, match="one token id"):
        vllm_mm_inputs((mixed,), PROMPT)
    with pytest.raises(ClientError, match="leaves the prompt"):
        vllm_mm_inputs((feature(1, 8, "i" * 64),), PROMPT)


GOLDEN_IDEFICS: Final = "866cf9759f844af2dcc0409e838db9d5c017b5e463b5ea014e10c8004ed74109"
GOLDEN_LLAVA: Final = "f225be738f73839eca9556370eb3d49fb4f1b4ac6539b7a3d3d703fd3024374e"
