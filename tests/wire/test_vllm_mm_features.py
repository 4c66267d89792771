"""`mm_features` on the vLLM ZMQ wire (wire/vllm_mm_features.py, docs/images.md §5).

- Layout: the map per image with its inline (ext 3, under 256 bytes) and frame-indexed tensors,
  checked by the reference engine's reader, which finds no problem in anything we encode and a
  named one in every corruption (hypothesis).
- `checked_features` refuses, before the ADD exists, what would kill EngineCore.
- Opt-in (`real_engine`): vLLM's own MsgpackDecoder, run in vLLM's venv, decodes our ADD into its
  EngineCoreRequest with the same tensors (scripts/vllm_decode_add.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Final

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from smg_trio.engines.vllm_mm_checks import mm_features_problem
from smg_trio.errors import ClientError
from smg_trio.model.tensors import flat_field, scalar_field
from smg_trio.neutral.media import FieldKind, MediaFeature, MediaField, Tensor
from smg_trio.neutral.sampling import EngineRequest, SamplingParams
from smg_trio.wire import vllm_zmq
from smg_trio.wire.vllm_mm_features import checked_features, encode_features

VLLM_VENV: Final = os.environ.get("SMG_TRIO_VLLM_VENV", "")
SCRIPT: Final = Path(__file__).resolve().parents[2] / "scripts" / "vllm_decode_add.py"
PROMPT: Final = (1, 5, 9, 9, 9, 5, 9, 9, 9, 2)  # images at 1 and 5: <fake> + 3 embeds


def feature(tiles: int, offset: int = 1, identifier: str = "a" * 64) -> MediaFeature:
    pixels = np.arange(tiles * 3 * 4 * 4, dtype=np.float32).reshape(tiles, 3, 4, 4)
    mask = np.ones((tiles, 4, 4), dtype=np.int64)
    return MediaFeature(
        identifier=identifier,
        offset=offset,
        length=4,
        is_embed=(False, True, True, True),
        fields=(
            flat_field("pixel_values", pixels),
            flat_field("pixel_attention_mask", mask),
            scalar_field("num_patches", tiles, kind=FieldKind.BATCHED, keep_on_cpu=True),
        ),
    )


def add_frames(
    features: tuple[MediaFeature, ...], cached: frozenset[str] = frozenset()
) -> list[bytes]:
    encoded, frames = encode_features(features, cached=cached)
    request = vllm_zmq.build_request(
        EngineRequest(
            request_id="r", choice_index=0, prompt_ids=PROMPT, sampling=SamplingParams(max_tokens=2)
        ),
        engine_request_id="r-1",
        max_model_len=64,
        arrival_time=1.0,
        mm_features=encoded,
    )
    return [vllm_zmq.encode_request(request), *frames]


def decoded(frames: list[bytes]) -> Any:
    return vllm_zmq.decode_request(frames[0]).mm_features


def test_the_layout_of_one_image() -> None:
    frames = add_frames((feature(2),))
    [image] = decoded(frames)
    assert image["modality"] == "image"
    assert image["identifier"] == image["mm_hash"] == "a" * 64
    assert image["mm_position"]["offset"] == 1
    assert image["mm_position"]["length"] == 4
    mask = image["mm_position"]["is_embed"]
    assert mask[:2] == ["bool", [4]]
    assert mask[2].data == b"\x00\x01\x01\x01"  # inline: 4 bytes
    pixels = image["data"]["pixel_values"]
    assert pixels["field"] == ["flat", {"keep_on_cpu": False, "slices": [[[0, 2, None]]], "dim": 0}]
    assert pixels["data"][:2] == ["float32", [2, 3, 4, 4]]
    assert frames[pixels["data"][2]] == feature(2).fields[0].tensor.data  # 384 bytes: a frame
    patches = image["data"]["num_patches"]
    assert patches["field"] == ["batched", {"keep_on_cpu": True}]
    assert patches["data"][:2] == ["int64", []]
    assert patches["data"][2].data == (2).to_bytes(8, "little")
    assert mm_features_problem(image and decoded(frames), frames, PROMPT) is None


def test_a_held_image_goes_without_data() -> None:
    frames = add_frames((feature(1),), cached=frozenset({"a" * 64}))
    [image] = decoded(frames)
    assert image["data"] is None
    assert len(frames) == 1  # no tensor frame


@given(st.integers(1, 5), st.integers(1, 5))
def test_anything_we_encode_the_engine_reads(first: int, second: int) -> None:
    features = (feature(first, 1, "x" * 64), feature(second, 5, "y" * 64))
    checked_features(features, len(PROMPT))
    frames = add_frames(features)
    assert mm_features_problem(decoded(frames), frames, PROMPT) is None


@given(st.sampled_from(["short", "index", "shape", "span", "mask"]))
def test_every_corruption_is_named_by_the_engine(kind: str) -> None:
    frames = add_frames((feature(2),))
    features = decoded(frames)
    image = features[0]
    pixels = image["data"]["pixel_values"]["data"]
    match kind:
        case "short":
            frames[pixels[2]] = frames[pixels[2]][:-4]
        case "index":
            pixels[2] = 9
        case "shape":
            pixels[1] = [2, 3, 4, 5]
        case "span":
            image["mm_position"]["offset"] = len(PROMPT) - 1
        case "mask":
            image["mm_position"]["is_embed"][1] = [3]
    assert mm_features_problem(features, frames, PROMPT) is not None


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (Tensor("float32", (2, 3), bytes(20)), "bytes for"),
        (Tensor("int64", (), bytes(4)), "bytes for"),
    ],
)
def test_a_malformed_tensor_never_reaches_an_add(bad: Tensor, words: str) -> None:
    broken = msgspec.structs.replace(
        feature(1), fields=(MediaField(name="pixel_values", tensor=bad, kind=FieldKind.FLAT),)
    )
    with pytest.raises(ClientError, match=words):
        checked_features((broken,), len(PROMPT))


def test_spans_that_leave_the_prompt_or_overlap_are_refused() -> None:
    with pytest.raises(ClientError, match="leaves the prompt"):
        checked_features((feature(1, offset=8),), len(PROMPT))
    with pytest.raises(ClientError, match="overlaps"):
        checked_features((feature(1, 0), feature(1, 2, "b" * 64)), len(PROMPT))


@pytest.mark.real_engine
@pytest.mark.skipif(not VLLM_VENV, reason="set SMG_TRIO_VLLM_VENV to decode with vLLM's own code")
@pytest.mark.timeout(180)
def test_vllm_decodes_our_add(tmp_path: Path) -> None:
    """vLLM's MsgpackDecoder(EngineCoreRequest), in vLLM's venv, reads our frames: the same
    identifier, span, embed count, tensor dtypes, shapes and values, field kinds."""
    features = (feature(2, 1, "x" * 64), feature(3, 5, "y" * 64))
    for index, frame in enumerate(add_frames(features)):
        (tmp_path / f"{index}.bin").write_bytes(frame)
    done = subprocess.run(
        [str(Path(VLLM_VENV) / "bin" / "python"), str(SCRIPT), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["prompt"] == len(PROMPT)
    for ours, theirs in zip(features, got["features"], strict=True):
        assert theirs["identifier"] == ours.identifier
        assert (theirs["offset"], theirs["length"], theirs["embeds"]) == (ours.offset, 4, 3)
        tiles = int(np.frombuffer(ours.fields[2].tensor.data, dtype=np.int64)[0])
        pixels = theirs["fields"]["pixel_values"]
        assert (pixels["dtype"], pixels["shape"], pixels["field"]) == (
            "float32",
            [tiles, 3, 4, 4],
            "MultiModalFlatField",
        )
        expected = float(np.arange(tiles * 48, dtype=np.float64).sum())
        assert pixels["sum"] == expected
        patches = theirs["fields"]["num_patches"]
        assert (patches["dtype"], patches["shape"], patches["keep_on_cpu"]) == ("int64", [], True)
        assert theirs["fields"]["pixel_attention_mask"]["dtype"] == "int64"
