"""The reference vLLM engine checks each image's kwargs against its model family's field config
(engines/vllm_mm_fields.py): what our LLaVA-NeXT and Gemma 3 processors send passes, as
encoded on the wire; every way a map can leave vLLM's field config (a kwarg missing or extra,
batched for flat, keep_on_cpu lost, a dtype, a rank, shapes that disagree) is named."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest

from smg_trio.core.images import ProcessedImage
from smg_trio.engines.cli import load_engine_model
from smg_trio.engines.vllm_mm_checks import mm_features_problem
from smg_trio.model.vision import load_vision
from smg_trio.neutral.media import MediaFeature
from smg_trio.neutral.sampling import EngineRequest, SamplingParams
from smg_trio.wire import vllm_zmq
from smg_trio.wire.vllm_mm_features import encode_features
from tests.model.family_folders import GEMMA3_SETTINGS, gemma3_folder, llava_next_folder
from tests.model.vision_goldens import picture

PICTURE: Final = picture(500, 200, "RGB", 1)


def _processed(tmp_path: Path, family: str) -> ProcessedImage:
    if family == "gemma3":
        small = {**GEMMA3_SETTINGS, "size": {"height": 28, "width": 28}}
        folder = gemma3_folder(tmp_path, settings=small, seq_length=4)[0]
    else:
        folder = llava_next_folder(tmp_path)
    vision = load_vision(folder, family)
    assert vision is not None
    assert hasattr(vision, "process")
    image: ProcessedImage = vision.process(PICTURE, "image")
    return image


def _wire(image: ProcessedImage) -> tuple[Any, list[bytes], tuple[int, ...]]:
    prompt = (1, *[9] * image.embed_count, 2)
    feature = MediaFeature(
        identifier="a" * 64,
        offset=1,
        length=image.embed_count,
        is_embed=None,
        fields=image.fields,
    )
    encoded, frames = encode_features((feature,), cached=frozenset())
    request = vllm_zmq.build_request(
        EngineRequest(
            request_id="r", choice_index=0, prompt_ids=prompt, sampling=SamplingParams(max_tokens=2)
        ),
        engine_request_id="r-1",
        max_model_len=len(prompt) + 8,
        arrival_time=1.0,
        mm_features=encoded,
    )
    all_frames = [vllm_zmq.encode_request(request), *frames]
    return vllm_zmq.decode_request(all_frames[0]).mm_features, all_frames, prompt


@pytest.mark.parametrize("family", ["llava_next", "gemma3"])
def test_what_we_send_fits_the_familys_field_config(tmp_path: Path, family: str) -> None:
    features, frames, prompt = _wire(_processed(tmp_path, family))
    assert mm_features_problem(features, frames, prompt, family) is None


def _int64(value: list[int]) -> list[Any]:
    data = b"".join(n.to_bytes(8, "little", signed=True) for n in value)
    return ["int64", [len(value)] if len(value) != 1 else [], msgspec.msgpack.Ext(3, data)]


CORRUPTIONS: Final = [
    ("llava_next", "missing", lambda d: d.pop("image_sizes")),
    ("llava_next", "extra", lambda d: d.update(num_patches=copy.deepcopy(d["image_sizes"]))),
    ("llava_next", "flat", lambda d: d["pixel_values"].update(field=["flat", {"dim": 0}])),
    ("llava_next", "on gpu", lambda d: d["image_sizes"]["field"][1].update(keep_on_cpu=False)),
    ("llava_next", "rank", lambda d: d.update(image_sizes={**d["image_sizes"], "data": _int64([7])})),
    ("llava_next", "pair", lambda d: d.update(image_sizes={**d["image_sizes"], "data": _int64([7, 0])})),
    ("gemma3", "batched", lambda d: d["pixel_values"].update(field=["batched", {"keep_on_cpu": False}])),
    ("gemma3", "patches", lambda d: d.update(num_patches={**d["num_patches"], "data": _int64([2])})),
    ("gemma3", "dtype", lambda d: d["num_patches"].update(data=["float32", [], msgspec.msgpack.Ext(3, bytes(4))])),
]  # fmt: skip


@pytest.mark.parametrize(("family", "what", "corrupt"), CORRUPTIONS)
def test_a_map_off_the_field_config_is_named(
    tmp_path: Path, family: str, what: str, corrupt: Any
) -> None:
    features, frames, prompt = _wire(_processed(tmp_path, family))
    corrupt(features[0]["data"])
    problem = mm_features_problem(features, frames, prompt, family)
    assert problem is not None, what
    assert problem.startswith("mm_features[0]")
    assert mm_features_problem(features, frames, prompt, "") is None or what == "flat"


def test_the_engine_knows_its_family_from_config_json(tmp_path: Path) -> None:
    folder = gemma3_folder(tmp_path, seq_length=4)[0]
    assert load_engine_model(folder).model_type == "gemma3"
