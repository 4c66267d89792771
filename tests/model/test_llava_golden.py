"""LLaVA-1.5 images against the Hugging Face processor itself (golden, offline: the folder is
built here with llava-1.5's published CLIP processor settings and the test tokenizer, whose
`<image>` is the image token; no weights, no hub). For each of 6 images our tensor equals the HF
image processor's bit for bit, and a multi-image, multi-turn prompt built by our chat path
equals `LlavaProcessor(text, images)["input_ids"]`, each span the run of 576 `<image>` HF put
there; a vision tower we cannot count features for is refused by name."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
from transformers import AutoTokenizer
from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil
from transformers.models.llava.processing_llava import LlavaProcessor

from smg_trio.core.prepare import chat_prompt
from smg_trio.errors import ClientError
from smg_trio.model.folder import load_model_dir
from smg_trio.model.llava_images import LlavaImages
from smg_trio.model.vision import VisionRefusal, load_vision
from tests.model.vision_goldens import MULTI_TURN_HF, hf_rgb, multi_turn_chat, picture

TEST_MODEL: Final = Path(__file__).resolve().parents[1] / "vision_model"
NOW: Final = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
IMAGE_TOKEN_ID: Final = 4097  # the test tokenizer's <image>
CLIP_MEAN: Final = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD: Final = [0.26862954, 0.26130258, 0.27577711]
# llava-1.5-7b-hf's preprocessor_config.json.
SETTINGS: Final = {
    "image_processor_type": "CLIPImageProcessor",
    "crop_size": {"height": 336, "width": 336},
    "do_center_crop": True,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": CLIP_MEAN,
    "image_std": CLIP_STD,
    "resample": 3,
    "rescale_factor": 1 / 255,
    "size": {"shortest_edge": 336},
}
VISION: Final = {"model_type": "clip_vision_model", "image_size": 336, "patch_size": 14}


IMAGES: Final = [
    picture(30, 20, "RGB", 1),
    picture(640, 480, "RGB", 2),
    picture(97, 333, "RGBA", 3),
    picture(336, 336, "L", 4),
    picture(1000, 90, "RGB", 5),
    picture(123, 457, "RGB", 6),
]


def _folder(root: Path, vision: dict[str, Any] = VISION) -> Path:
    folder = root / "llava"
    shutil.copytree(TEST_MODEL, folder)
    (folder / "processor_config.json").unlink()
    config = json.loads((folder / "config.json").read_text())
    config.pop("image_token_id")
    config.update(
        model_type="llava",
        image_token_index=IMAGE_TOKEN_ID,
        vision_config=vision,
        vision_feature_select_strategy="default",
    )
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "preprocessor_config.json").write_text(json.dumps(SETTINGS))
    return folder


def _hf_image_processor() -> LlavaImageProcessorPil:
    return LlavaImageProcessorPil(
        **{k: v for k, v in SETTINGS.items() if k != "image_processor_type"}
    )


def test_each_image_equals_the_hf_image_processor(tmp_path: Path) -> None:
    ours = load_vision(_folder(tmp_path), "llava")
    assert isinstance(ours, LlavaImages)
    hf = _hf_image_processor()
    for data in IMAGES:
        mine = ours.process(data, "image")
        (field,) = mine.fields
        assert field.name == "pixel_values"
        assert field.kind == "batched"
        pixels = np.frombuffer(field.tensor.data, np.float32).reshape(field.tensor.shape)
        golden = hf(images=[hf_rgb(data)], return_tensors="np")["pixel_values"][0]
        assert pixels.shape == golden.shape == (3, 336, 336)
        assert np.array_equal(pixels, golden)
        assert mine.embed_count == 576


def test_a_multi_image_multi_turn_prompt_equals_the_hf_processor(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    vision = load_vision(folder, "llava")
    assert isinstance(vision, LlavaImages)
    chat = multi_turn_chat()
    chosen = [IMAGES[0], IMAGES[2], IMAGES[4], IMAGES[5]]
    processed = [vision.process(data, "image") for data in chosen]
    model = load_model_dir(folder).prompt_model()
    ids, features = chat_prompt(chat, model, now=NOW, images=processed)
    template = (folder / "chat_template.jinja").read_text()
    hf: Any = LlavaProcessor(
        image_processor=_hf_image_processor(),
        tokenizer=AutoTokenizer.from_pretrained(folder),  # type: ignore[no-untyped-call]
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=template,
    )
    text = hf.apply_chat_template(
        MULTI_TURN_HF,
        add_generation_prompt=True,
        tokenize=False,
    )
    golden = hf(text=text, images=[hf_rgb(d) for d in chosen], return_tensors="np")
    assert list(ids) == [int(t) for t in golden["input_ids"][0]]
    for feature in features:
        assert feature.length == 576
        assert feature.is_embed is None
        assert set(ids[feature.offset : feature.offset + feature.length]) == {IMAGE_TOKEN_ID}
    covered = [at for f in features for at in range(f.offset, f.offset + f.length)]
    assert covered == [at for at, token in enumerate(ids) if token == IMAGE_TOKEN_ID]


@pytest.mark.parametrize(
    "vision",
    [
        {"model_type": "pixtral", "image_size": 336, "patch_size": 14},
        {"model_type": "clip_vision_model"},
    ],
)
def test_a_tower_we_cannot_count_is_refused(tmp_path: Path, vision: dict[str, Any]) -> None:
    refusal = load_vision(_folder(tmp_path, vision), "llava")
    assert isinstance(refusal, VisionRefusal)


def test_do_pad_equals_the_hf_processor_given_it(tmp_path: Path) -> None:
    """vLLM hands `mm_processor_kwargs` to the HF processor: `do_pad: true` pads each picture
    to a square first (same shape, same feature count); the identifier changes with it."""
    ours = load_vision(_folder(tmp_path), "llava")
    assert isinstance(ours, LlavaImages)
    hf = _hf_image_processor()
    for data in (IMAGES[1], IMAGES[4]):
        mine = ours.process(data, "image", {"do_pad": True})
        (field,) = mine.fields
        pixels = np.frombuffer(field.tensor.data, np.float32).reshape(field.tensor.shape)
        golden = hf(images=[hf_rgb(data)], return_tensors="np", do_pad=True)["pixel_values"][0]
        assert np.array_equal(pixels, golden)
        plain = ours.process(data, "image")
        assert not np.array_equal(pixels, np.frombuffer(plain.fields[0].tensor.data, np.float32))
        assert mine.identifier != plain.identifier
        assert mine.embed_count == plain.embed_count == 576
    unpadded = ours.process(IMAGES[1], "image", {"do_pad": False})
    assert unpadded.identifier == ours.process(IMAGES[1], "image").identifier


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"crop_size": {"height": 224, "width": 224}}, "mm_processor_kwargs.crop_size"),
        ({"size": {"shortest_edge": 100}}, "mm_processor_kwargs.size"),
        ({"do_pad": "yes"}, "mm_processor_kwargs.do_pad"),
    ],
    ids=str,
)
def test_other_mm_processor_kwargs_are_a_400_naming_them(
    tmp_path: Path, options: dict[str, Any], param: str
) -> None:
    ours = load_vision(_folder(tmp_path), "llava")
    assert isinstance(ours, LlavaImages)
    with pytest.raises(ClientError) as caught:
        ours.process(IMAGES[0], "image", options)
    assert caught.value.param == param
