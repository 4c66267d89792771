"""Gemma 3 images against the Hugging Face processor itself (golden, offline: the folder is
built with gemma-3-4b-it's published settings and the test tokenizer given Gemma's image and
newline tokens, tests/model/family_folders.py). For each of 6 images our picture tensor equals
the HF image processor's bit for bit; a multi-image, multi-turn prompt whose newlines merge
across the images' replacements (a turn's "\\n" before one, two images side by side, text on
both sides of one) equals `Gemma3Processor(text, images)["input_ids"]`, each span `boi` to
`eoi` with only the soft tokens embedded. Pan-and-scan, from the folder or the request's
`mm_processor_kwargs`: 6 images' crops (none, 2, 3 across, 3 down, capped at 4) equal the HF
image processor's, and a prompt of pictures with and without crops equals the HF processor's
with `do_pan_and_scan=True`; a setting of the wrong kind is refused by name."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.gemma3.processing_gemma3 import Gemma3Processor

from smg_trio.core.images import expand_placeholders, place_images
from smg_trio.core.prepare import chat_prompt
from smg_trio.errors import ClientError
from smg_trio.model.folder import load_model_dir
from smg_trio.model.gemma3_images import Gemma3Images
from smg_trio.model.image_workers import ImageWorkers, PooledImages
from smg_trio.model.vision import VisionRefusal, load_vision
from tests.model.family_folders import GEMMA3_SETTINGS, gemma3_folder
from tests.model.vision_goldens import MULTI_TURN_HF, hf_rgb, multi_turn_chat, picture

NOW: Final = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
IMAGES: Final = [
    picture(30, 20, "RGB", 1),
    picture(640, 480, "RGB", 2),
    picture(97, 333, "RGBA", 3),
    picture(896, 896, "L", 4),
    picture(1000, 90, "RGB", 5),
    picture(123, 457, "RGB", 6),
]


def _hf_image_processor() -> Gemma3ImageProcessorPil:
    return Gemma3ImageProcessorPil(
        **{
            k: v
            for k, v in GEMMA3_SETTINGS.items()
            if k not in ("image_processor_type", "processor_class", "image_seq_length")
        }
    )


def test_each_image_equals_the_hf_image_processor(tmp_path: Path) -> None:
    folder, ids = gemma3_folder(tmp_path)
    ours = load_vision(folder, "gemma3")
    assert isinstance(ours, Gemma3Images)
    hf = _hf_image_processor()
    for data in IMAGES:
        mine = ours.process(data, "image")
        pixel_field, patches_field = mine.fields
        assert (pixel_field.name, pixel_field.kind) == ("pixel_values", "flat")
        assert (patches_field.name, patches_field.kind, patches_field.keep_on_cpu) == (
            "num_patches",
            "batched",
            True,
        )
        pixels = np.frombuffer(pixel_field.tensor.data, np.float32).reshape(
            pixel_field.tensor.shape
        )
        golden = hf(images=[hf_rgb(data)], return_tensors="np")
        assert pixels.shape == golden["pixel_values"].shape == (1, 3, 896, 896)
        assert np.array_equal(pixels, golden["pixel_values"])
        assert np.frombuffer(patches_field.tensor.data, np.int64).tolist() == [1]
        assert patches_field.tensor.shape == ()
        assert mine.embed_count == 256
        assert mine.embed_token_id == ids["<image_soft_token>"]


def test_a_multi_image_multi_turn_prompt_equals_the_hf_processor(tmp_path: Path) -> None:
    folder, ids_of = gemma3_folder(tmp_path)
    vision = load_vision(folder, "gemma3")
    assert isinstance(vision, Gemma3Images)
    chosen = [IMAGES[0], IMAGES[2], IMAGES[4], IMAGES[5]]
    processed = [vision.process(data, "image") for data in chosen]
    model = load_model_dir(folder).prompt_model()
    ids, features = chat_prompt(multi_turn_chat(), model, now=NOW, images=processed)
    hf: Any = Gemma3Processor(
        image_processor=_hf_image_processor(),
        tokenizer=AutoTokenizer.from_pretrained(folder),
        chat_template=(folder / "chat_template.jinja").read_text(),
        image_seq_length=256,
    )
    text = hf.apply_chat_template(MULTI_TURN_HF, add_generation_prompt=True, tokenize=False)
    golden = hf(text=text, images=[hf_rgb(d) for d in chosen], return_tensors="np")
    assert list(ids) == [int(t) for t in golden["input_ids"][0]]
    # The newlines merged across the replacements: "\n" + "\n\n", two images side by side.
    assert ids_of["\n\n\n"] in ids
    assert ids_of["\n\n\n\n"] in ids
    soft = ids_of["<image_soft_token>"]
    for feature in features:
        assert feature.length == 258
        assert ids[feature.offset] == ids_of["<start_of_image>"]
        assert ids[feature.offset + feature.length - 1] == ids_of["<end_of_image>"]
        assert feature.is_embed == (False, *[True] * 256, False)
    covered = [
        feature.offset + at
        for feature in features
        for at, embedded in enumerate(feature.is_embed or ())
        if embedded
    ]
    assert covered == [at for at, token in enumerate(ids) if token == soft]
    assert [at for at, kind in enumerate(golden["token_type_ids"][0]) if kind] == covered


PAN_AND_SCAN: Final = {
    "do_pan_and_scan": True,
    "pan_and_scan_min_crop_size": 256,
    "pan_and_scan_max_num_crops": 4,
    "pan_and_scan_min_ratio_to_activate": 1.2,
}
CROPPED: Final = [
    (picture(1200, 400, "RGB", 7), 3),  # wide: 3 crops across
    (picture(300, 900, "RGBA", 8), 3),  # tall: 3 crops down
    (picture(640, 480, "L", 9), 2),  # just past the ratio: 2
    (picture(97, 333, "RGB", 10), 0),  # crops would be under the minimum size
    (picture(500, 480, "RGB", 11), 0),  # under the ratio
    (picture(3000, 300, "RGB", 12), 4),  # capped at max_num_crops
]


def test_pan_and_scan_crops_equal_the_hf_image_processor(tmp_path: Path) -> None:
    folder, _ = gemma3_folder(tmp_path)
    vision = load_vision(folder, "gemma3")
    assert isinstance(vision, Gemma3Images)
    hf = _hf_image_processor()
    for data, crops in CROPPED:
        mine = vision.process(data, "image", {"do_pan_and_scan": True})
        pixel_field, patches_field = mine.fields
        pixels = np.frombuffer(pixel_field.tensor.data, np.float32).reshape(
            pixel_field.tensor.shape
        )
        golden = hf(images=[hf_rgb(data)], return_tensors="np", **PAN_AND_SCAN)
        assert [int(n) for n in golden["num_crops"]] == [crops]
        assert pixels.shape == golden["pixel_values"].shape == (1 + crops, 3, 896, 896)
        assert np.array_equal(pixels, golden["pixel_values"])
        assert np.frombuffer(patches_field.tensor.data, np.int64).tolist() == [1 + crops]
        assert mine.embed_count == 256 * (1 + crops)
        assert mine.identifier != vision.process(data, "image").identifier or crops == 0


def test_a_pan_and_scan_prompt_equals_the_hf_processor(tmp_path: Path) -> None:
    """Small pictures (56 x 56: the ids do not depend on the size) with crops and without,
    in the multi-turn prompt, the setting from the folder or from the request."""
    small = {**GEMMA3_SETTINGS, "size": {"height": 56, "width": 56}}
    chosen = [CROPPED[0][0], CROPPED[3][0], CROPPED[1][0], CROPPED[2][0]]
    golden_ids: list[int] | None = None
    for name, folder_settings, options in [
        ("request", small, {"do_pan_and_scan": True}),
        ("folder", {**small, "do_pan_and_scan": True}, None),
    ]:
        folder, ids_of = gemma3_folder(
            tmp_path / name, settings=small if options else folder_settings
        )
        vision = load_vision(folder, "gemma3")
        assert isinstance(vision, Gemma3Images)
        processed = [vision.process(data, "image", options) for data in chosen]
        model = load_model_dir(folder).prompt_model()
        ids, features = chat_prompt(multi_turn_chat(), model, now=NOW, images=processed)
        if golden_ids is None:
            hf: Any = Gemma3Processor(
                image_processor=_hf_image_processor(),
                tokenizer=AutoTokenizer.from_pretrained(folder),
                chat_template=(folder / "chat_template.jinja").read_text(),
                image_seq_length=256,
            )
            text = hf.apply_chat_template(MULTI_TURN_HF, add_generation_prompt=True, tokenize=False)
            golden = hf(
                text=text, images=[hf_rgb(d) for d in chosen], return_tensors="np", **PAN_AND_SCAN
            )
            golden_ids = [int(t) for t in golden["input_ids"][0]]
            embedded = [at for at, kind in enumerate(golden["token_type_ids"][0]) if kind]
        assert list(ids) == golden_ids, name
        covered = [
            feature.offset + at
            for feature in features
            for at, flag in enumerate(feature.is_embed or ())
            if flag
        ]
        assert covered == embedded
        assert [sum(f.is_embed or ()) for f in features] == [1024, 256, 1024, 768]
        for feature in features:
            assert ids[feature.offset] == ids_of["<start_of_image>"]
            assert ids[feature.offset + feature.length - 1] == ids_of["<end_of_image>"]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"do_pan_and_scan": "yes"}, "do_pan_and_scan"),
        ({"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 0}, "pan_and_scan_max_num_crops"),
        ({"pan_and_scan_min_ratio_to_activate": "1"}, "pan_and_scan_min_ratio_to_activate"),
        ({"size": {"height": 448, "width": 448}}, "size"),
    ],
)
def test_mm_processor_kwargs_of_the_wrong_kind_are_refused(
    tmp_path: Path, options: dict[str, Any], named: str
) -> None:
    vision = load_vision(gemma3_folder(tmp_path)[0], "gemma3")
    assert isinstance(vision, Gemma3Images)
    with pytest.raises(ClientError) as caught:
        vision.process(IMAGES[0], "image", options)
    assert caught.value.param == f"mm_processor_kwargs.{named}"
    plain = vision.process(IMAGES[0], "image")
    assert plain == vision.process(IMAGES[0], "image", {"do_pan_and_scan": False})
    # Crop settings without pan-and-scan change nothing, the identifier included.
    assert plain == vision.process(IMAGES[0], "image", {"pan_and_scan_max_num_crops": 2})


def test_a_folder_setting_of_the_wrong_kind_is_refused_by_name(tmp_path: Path) -> None:
    settings = {**GEMMA3_SETTINGS, "pan_and_scan_max_num_crops": "four"}
    refusal = load_vision(gemma3_folder(tmp_path, settings=settings)[0], "gemma3")
    assert isinstance(refusal, VisionRefusal)
    assert "pan_and_scan_max_num_crops" in refusal.reason


def test_a_sequence_length_the_model_disagrees_with_is_refused_by_name(tmp_path: Path) -> None:
    folder, _ = gemma3_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["mm_tokens_per_image"] = 64
    (folder / "config.json").write_text(json.dumps(config))
    refusal = load_vision(folder, "gemma3")
    assert isinstance(refusal, VisionRefusal)
    assert "mm_tokens_per_image" in refusal.reason


def test_a_worker_process_gives_the_same_crops_and_span(tmp_path: Path) -> None:
    """What `serve` does: the image processed in a worker process equals it processed here,
    the crops and the span's text included (they cross the worker's socket)."""
    small = {**GEMMA3_SETTINGS, "size": {"height": 56, "width": 56}}
    folder, _ = gemma3_folder(tmp_path, settings=small)
    local = load_vision(folder, "gemma3")
    assert isinstance(local, Gemma3Images)
    pool = ImageWorkers(1)
    try:
        pooled = PooledImages(pool, folder, "gemma3", local.placeholder)
        options = {"do_pan_and_scan": True}
        image = pooled.process(CROPPED[0][0], "p", options)
    finally:
        pool.close()
    assert image == local.process(CROPPED[0][0], "p", options)
    assert image.embed_count == 4 * 256
    assert image.span_text.startswith("<start_of_image>")


@pytest.fixture(scope="module")
def small_gemma3(tmp_path_factory: pytest.TempPathFactory) -> tuple[Gemma3Images, Any, Any]:
    """Ours, the test tokenizer and the HF processor for 4 soft tokens per 56 x 56 picture."""
    small = {**GEMMA3_SETTINGS, "size": {"height": 56, "width": 56}}
    folder, _ = gemma3_folder(tmp_path_factory.mktemp("gemma3"), settings=small, seq_length=4)
    vision = load_vision(folder, "gemma3")
    assert isinstance(vision, Gemma3Images)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    image_processor = Gemma3ImageProcessorPil(
        **{k: v for k, v in small.items() if k not in ("image_processor_type", "processor_class")}
    )
    hf = Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_length=4)
    return vision, load_model_dir(folder).prompt_model().tokenizer, hf


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.text(alphabet="a \n?", max_size=6), min_size=2, max_size=4),
)
def test_any_text_around_images_gives_the_hf_processors_ids_and_embeddings(
    small_gemma3: tuple[Gemma3Images, Any, Any], pieces: list[str]
) -> None:
    """Any run of newlines, spaces and letters before, between and after 1 to 3 images (the
    merges on either side, images side by side): the ids are Gemma3Processor's, and the
    embedded positions its token_type_ids."""
    vision, tokenizer, hf = small_gemma3
    text = "<start_of_image>".join(pieces)
    images = [vision.process(IMAGES[0], "image") for _ in pieces[1:]]
    expanded = expand_placeholders(text, vision.placeholder, images, "p")
    ids = tuple(tokenizer.encode(expanded, add_special_tokens=False))
    features = place_images(ids, images, tokenizer, "p")
    golden = hf(text=text, images=[hf_rgb(IMAGES[0])] * len(images), return_tensors="np")
    assert list(ids) == [int(t) for t in golden["input_ids"][0]]
    embedded = [
        feature.offset + at
        for feature in features
        for at, flag in enumerate(feature.is_embed or ())
        if flag
    ]
    assert embedded == [at for at, kind in enumerate(golden["token_type_ids"][0]) if kind]
