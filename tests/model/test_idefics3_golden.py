"""Idefics3 images against the Hugging Face processor itself (golden, offline: the model
folder's configs in tests/vision_model, no weights): for each image, our tensors equal the HF
processor's bit for bit, and the prompt ids our chat path builds (template, placeholder
expansion, one tokenization) equal `Idefics3Processor(text, images)["input_ids"]`, with each
image's span and `is_embed` mask where the HF ids hold its `<image>` run.

Also: a text-only install (Pillow missing) refuses images with the extra's name."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pytest
from transformers import AutoProcessor

from smg_trio.core.images import ProcessedImage
from smg_trio.core.prepare import chat_prompt
from smg_trio.model.folder import load_model_dir
from smg_trio.model.idefics3_images import Idefics3Images
from smg_trio.model.vision import ImageProcessor, VisionRefusal, load_vision
from smg_trio.neutral.media import MediaFeature
from tests.model.vision_goldens import MULTI_TURN_HF, hf_rgb, multi_turn_chat, picture

FOLDER: Final = Path(__file__).parent.parent / "vision_model"
IMAGE_TOKEN_ID: Final = 4097
NOW: Final = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


# Sizes that exercise every split (none, 1x2, 2x1, 2x2) and resize path; modes RGB, RGBA, L.
IMAGES: Final = [
    picture(64, 48, "RGB", 1),
    picture(300, 100, "RGB", 2),
    picture(40, 170, "RGBA", 3),
    picture(20, 30, "L", 4),
    picture(56, 56, "RGB", 5),
    picture(513, 257, "RGB", 6),
]


@pytest.fixture(scope="module")
def ours() -> ImageProcessor:
    vision = load_vision(FOLDER, "tiny-idefics3")
    assert vision is not None
    assert not isinstance(vision, VisionRefusal)
    return vision


@pytest.fixture(scope="module")
def hf() -> Any:
    return AutoProcessor.from_pretrained(FOLDER)  # type: ignore[no-untyped-call]


def _array(feature: ProcessedImage | MediaFeature, name: str) -> npt.NDArray[Any]:
    field = next(f for f in feature.fields if f.name == name)
    dtype = {"float32": np.float32, "int64": np.int64}[field.tensor.dtype]
    return np.frombuffer(field.tensor.data, dtype=dtype).reshape(field.tensor.shape)


@pytest.mark.parametrize("index", range(len(IMAGES)))
def test_each_image_equals_the_hf_processor(ours: ImageProcessor, hf: Any, index: int) -> None:
    data = IMAGES[index]
    mine = ours.process(data, "image")
    golden = hf(text="<image>", images=[hf_rgb(data)], return_tensors="np")
    assert np.array_equal(_array(mine, "pixel_values"), golden["pixel_values"][0])
    assert np.array_equal(_array(mine, "pixel_attention_mask"), golden["pixel_attention_mask"][0])
    tiles = golden["pixel_values"].shape[1]
    assert int(_array(mine, "num_patches")) == tiles
    assert mine.embed_count == tiles * 4 == list(golden["input_ids"][0]).count(IMAGE_TOKEN_ID)


def test_a_multi_image_multi_turn_prompt_equals_the_hf_processor(
    ours: ImageProcessor, hf: Any
) -> None:
    """Every image in one conversation: the same ids as the HF processor given the template's
    text and all the images at once, and each span where HF put its image."""
    chat = multi_turn_chat()
    chosen = [IMAGES[0], IMAGES[1], IMAGES[2], IMAGES[5]]
    processed = [ours.process(data, "image") for data in chosen]
    model = load_model_dir(FOLDER).prompt_model()
    ids, features = chat_prompt(chat, model, now=NOW, images=processed)
    template = model.chat_template
    assert template is not None
    text = hf.apply_chat_template(
        MULTI_TURN_HF,
        add_generation_prompt=True,
        tokenize=False,
    )
    golden = hf(text=text, images=[hf_rgb(d) for d in chosen], return_tensors="np")
    assert list(ids) == [int(t) for t in golden["input_ids"][0]]
    # Each span covers exactly one image's replacement; its embed positions are its <image>s.
    tiles = [int(_array(p, "num_patches")) for p in processed]
    assert sum(tiles) == golden["pixel_values"].shape[1]
    for feature, count in zip(features, tiles, strict=True):
        span = ids[feature.offset : feature.offset + feature.length]
        mask = feature.is_embed
        assert mask is not None
        assert [t for t, embed in zip(span, mask, strict=True) if embed] == [IMAGE_TOKEN_ID] * (
            count * 4
        )
    assert sum(f.embed_count for f in features) == list(ids).count(IMAGE_TOKEN_ID)
    # The per-image tensors, concatenated, are the HF batch's.
    stacked = np.concatenate([_array(p, "pixel_values") for p in processed])
    assert np.array_equal(stacked, golden["pixel_values"][0])


@pytest.mark.parametrize(
    "options", [{"do_image_splitting": False}, {"size": {"longest_edge": 56}}], ids=str
)
@pytest.mark.parametrize("index", [0, 1, 5])
def test_mm_processor_kwargs_equal_the_hf_processor_given_them(
    ours: ImageProcessor, hf: Any, index: int, options: dict[str, Any]
) -> None:
    data = IMAGES[index]
    mine = ours.process(data, "image", options)
    golden = hf(text="<image>", images=[hf_rgb(data)], return_tensors="np", **options)
    assert np.array_equal(_array(mine, "pixel_values"), golden["pixel_values"][0])
    assert mine.embed_count == list(golden["input_ids"][0]).count(IMAGE_TOKEN_ID)
    assert mine.identifier != ours.process(data, "image").identifier  # other tensors, other key


def test_identifiers_are_stable_digests(ours: ImageProcessor) -> None:
    first = ours.process(IMAGES[0], "image").identifier
    assert ours.process(IMAGES[0], "image").identifier == first
    assert ours.process(IMAGES[1], "image").identifier != first
    assert len(first) == 64


def test_without_the_vision_extra_images_are_refused_naming_it() -> None:
    """A text-only install: Pillow cannot be imported, so the folder's images are refused
    with the extra's name (run in a fresh interpreter where `PIL` is unimportable)."""
    script = (
        "import sys; sys.modules['PIL'] = None\n"
        "from pathlib import Path\n"
        "from smg_trio.model.vision import load_vision, VisionRefusal\n"
        f"v = load_vision(Path({str(FOLDER)!r}), 'm')\n"
        "assert isinstance(v, VisionRefusal), v\n"
        "print(v.reason)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "smg-trio[vision]" in done.stdout


def test_another_family_is_refused_naming_its_model_type(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "mllama", "vision_config": {}}')
    vision = load_vision(tmp_path, "m")
    assert isinstance(vision, VisionRefusal)
    assert "'mllama'" in vision.reason


def test_a_text_model_has_no_vision(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    assert load_vision(tmp_path, "m") is None


def test_device_normalisation_does_not_apply_to_idefics3() -> None:
    """vLLM turns `mm_device_do_normalize` off for a model that does not support it (Idefics3
    among them), whatever the flag says: its pixels stay normalised float32, the same key."""
    plain = load_vision(FOLDER, "m")
    asked = load_vision(FOLDER, "m", device_normalize=True)
    assert isinstance(plain, Idefics3Images)
    assert isinstance(asked, Idefics3Images)
    mine, theirs = asked.process(IMAGES[0], "image"), plain.process(IMAGES[0], "image")
    assert mine.identifier == theirs.identifier
    assert mine.fields == theirs.fields
