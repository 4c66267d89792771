"""LLaVA-NeXT images against the Hugging Face processor itself (golden, offline: the folder is
built with llava-v1.6-mistral's published settings and the test tokenizer, tests/model/
family_folders.py). For each of 7 images (tiny, each best resolution of the grid, tall and wide
strips; RGB, RGBA, L) our tiles equal the HF image processor's bit for bit, `image_sizes` is
the picture's, and the `<image>` count equals the one `LlavaNextProcessor` writes; a
multi-image, multi-turn prompt built by our chat path equals `LlavaNextProcessor(text,
images)["input_ids"]`, each span a run of `<image>` HF put there; a tower or a tiling we
cannot count for is refused by name."""

from __future__ import annotations

import datetime as dt
import functools
import json
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer
from transformers.models.llava_next.image_processing_pil_llava_next import (
    LlavaNextImageProcessorPil,
)
from transformers.models.llava_next.processing_llava_next import LlavaNextProcessor

from smg_trio.core.prepare import chat_prompt
from smg_trio.errors import ClientError
from smg_trio.model.folder import load_model_dir
from smg_trio.model.llava_next_images import LlavaNextFeatures, LlavaNextImages
from smg_trio.model.vision import VisionRefusal, load_vision
from tests.model.family_folders import (
    IMAGE_TOKEN_ID,
    LLAVA_NEXT_SETTINGS,
    LLAVA_NEXT_VISION,
    PINPOINTS,
    TEST_MODEL,
    llava_next_folder,
)
from tests.model.vision_goldens import MULTI_TURN_HF, hf_rgb, multi_turn_chat, picture

NOW: Final = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

IMAGES: Final = [
    picture(30, 20, "RGB", 1),  # tiny: upscaled into 672 x 336
    picture(640, 480, "RGB", 2),  # 672 x 672, 4 tiles
    picture(97, 333, "RGBA", 3),  # tall: 1008 x 336
    picture(336, 336, "L", 4),  # square
    picture(1000, 90, "RGB", 5),  # a wide strip: 336 x 1008, most rows padding
    picture(123, 457, "RGB", 6),
    picture(700, 330, "RGB", 7),  # 336 x 672
]


def _hf_image_processor() -> LlavaNextImageProcessorPil:
    return LlavaNextImageProcessorPil(
        **{k: v for k, v in LLAVA_NEXT_SETTINGS.items() if k != "image_processor_type"}
    )


def _hf_processor(folder: Path) -> Any:
    return LlavaNextProcessor(
        image_processor=_hf_image_processor(),
        tokenizer=AutoTokenizer.from_pretrained(folder),  # type: ignore[no-untyped-call]
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=(folder / "chat_template.jinja").read_text(),
    )


@functools.cache
def _hf_counter() -> Any:
    return _hf_processor(TEST_MODEL)


def test_each_image_equals_the_hf_processor(tmp_path: Path) -> None:
    folder = llava_next_folder(tmp_path)
    ours = load_vision(folder, "llava-next")
    assert isinstance(ours, LlavaNextImages)
    image_processor = _hf_image_processor()
    processor = _hf_processor(folder)
    tile_counts = set()
    for data in IMAGES:
        mine = ours.process(data, "image")
        pixel_field, sizes_field = mine.fields
        assert (pixel_field.name, pixel_field.kind) == ("pixel_values", "batched")
        assert (sizes_field.name, sizes_field.kind, sizes_field.keep_on_cpu) == (
            "image_sizes",
            "batched",
            True,
        )
        pixels = np.frombuffer(pixel_field.tensor.data, np.float32).reshape(
            pixel_field.tensor.shape
        )
        golden = image_processor(images=[hf_rgb(data)], return_tensors="np")
        assert pixels.shape == golden["pixel_values"][0].shape
        assert np.array_equal(pixels, golden["pixel_values"][0])
        tile_counts.add(pixels.shape[0])
        assert sizes_field.tensor.dtype == "int64"
        sizes = np.frombuffer(sizes_field.tensor.data, np.int64).tolist()
        assert sizes == [int(n) for n in golden["image_sizes"][0]]
        assert sizes == [hf_rgb(data).height, hf_rgb(data).width]
        ids = processor(text="<image>", images=[hf_rgb(data)], return_tensors="np")["input_ids"]
        assert mine.embed_count == int((ids[0] == IMAGE_TOKEN_ID).sum())
        assert mine.replacement == "<image>" * mine.embed_count
    assert tile_counts == {3, 4, 5}  # the base patch and 2 or 4 tiles


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6000), st.integers(1, 6000))
def test_the_feature_count_equals_the_hf_processors_for_any_size(height: int, width: int) -> None:
    """The count alone, over any picture size (every best resolution, every rounding of the
    unpadded grid): ours from config.json as vLLM counts, HF's from its processor."""
    ours = LlavaNextFeatures(
        {
            "vision_config": LLAVA_NEXT_VISION,
            "vision_feature_select_strategy": "default",
            "image_grid_pinpoints": PINPOINTS,
        }
    )
    assert (
        ours.count(height, width)
        == _hf_counter()._get_number_of_features(height, width, 336, 336) - 1
    )


def test_a_multi_image_multi_turn_prompt_equals_the_hf_processor(tmp_path: Path) -> None:
    folder = llava_next_folder(tmp_path)
    vision = load_vision(folder, "llava-next")
    assert isinstance(vision, LlavaNextImages)
    chosen = [IMAGES[0], IMAGES[2], IMAGES[4], IMAGES[1]]
    processed = [vision.process(data, "image") for data in chosen]
    model = load_model_dir(folder).prompt_model()
    ids, features = chat_prompt(multi_turn_chat(), model, now=NOW, images=processed)
    hf = _hf_processor(folder)
    text = hf.apply_chat_template(MULTI_TURN_HF, add_generation_prompt=True, tokenize=False)
    golden = hf(text=text, images=[hf_rgb(d) for d in chosen], return_tensors="np")
    assert list(ids) == [int(t) for t in golden["input_ids"][0]]
    assert [f.length for f in features] == [p.embed_count for p in processed]
    assert len({f.length for f in features}) == 4  # each image its own count
    for feature in features:
        assert feature.is_embed is None  # every <image> is an embedding
        assert set(ids[feature.offset : feature.offset + feature.length]) == {IMAGE_TOKEN_ID}
    covered = [at for f in features for at in range(f.offset, f.offset + f.length)]
    assert covered == [at for at, token in enumerate(ids) if token == IMAGE_TOKEN_ID]


def test_mm_processor_kwargs_are_refused_by_name(tmp_path: Path) -> None:
    vision = load_vision(llava_next_folder(tmp_path), "llava-next")
    assert isinstance(vision, LlavaNextImages)
    with pytest.raises(ClientError) as caught:
        vision.process(IMAGES[0], "image", {"image_grid_pinpoints": [[336, 336]]})
    assert caught.value.param == "mm_processor_kwargs.image_grid_pinpoints"


@pytest.mark.parametrize(
    ("vision", "settings", "named"),
    [
        ({"model_type": "pixtral", "image_size": 336, "patch_size": 14}, None, "pixtral"),
        (
            None,
            {**LLAVA_NEXT_SETTINGS, "image_grid_pinpoints": [[336, 672]]},
            "image_grid_pinpoints",
        ),
    ],
)
def test_a_tower_or_tiling_we_cannot_count_is_refused(
    tmp_path: Path, vision: dict[str, Any] | None, settings: dict[str, Any] | None, named: str
) -> None:
    folder = llava_next_folder(tmp_path)
    if vision is not None:
        config = json.loads((folder / "config.json").read_text())
        config["vision_config"] = vision
        (folder / "config.json").write_text(json.dumps(config))
    if settings is not None:
        (folder / "preprocessor_config.json").write_text(json.dumps(settings))
    refusal = load_vision(folder, "llava-next")
    assert isinstance(refusal, VisionRefusal)
    assert named in refusal.reason
