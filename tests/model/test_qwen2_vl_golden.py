"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL images against the Hugging Face processor itself (golden,
offline: each family's folder is built here from its published processor settings, with the
test tokenizer given Qwen's vision tokens; no weights, no hub). For each of 6 images, our
tensors equal the HF image processor's, bit for bit (normalised float32 when the engine does not
normalise; the raw pixels as uint8, vLLM's default `mm_device_do_normalize`, when it does); and
a multi-image, multi-turn prompt built by our chat path equals `Qwen2VLProcessor(text,
images)["input_ids"]`, each image's span the run of `<|image_pad|>` HF put there."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pytest
from transformers import AutoTokenizer
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor

from smg_trio.core.images import ProcessedImage
from smg_trio.core.prepare import chat_prompt
from smg_trio.errors import ClientError
from smg_trio.model.folder import load_model_dir
from smg_trio.model.qwen2_vl_images import Qwen2VLImages
from smg_trio.model.vision import VisionRefusal, load_vision
from tests.model.qwen2_vl_folder import SETTINGS, TEMPLATE, qwen_folder
from tests.model.vision_goldens import MULTI_TURN_HF, hf_rgb, multi_turn_chat, picture

NOW: Final = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


# Below the minimum (scaled up), above the maximum (scaled down), odd sizes, long sides; modes.
IMAGES: Final = [
    picture(30, 20, "RGB", 1),
    picture(640, 480, "RGB", 2),
    picture(97, 333, "RGBA", 3),
    picture(200, 200, "L", 4),
    picture(1000, 90, "RGB", 5),
    picture(123, 457, "RGB", 6),
]


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return qwen_folder(tmp_path_factory.mktemp("qwen"), request.param)


def _hf_image_processor(model_type: str) -> Qwen2VLImageProcessorPil:
    kwargs = {k: v for k, v in SETTINGS[model_type].items() if k != "image_processor_type"}
    return Qwen2VLImageProcessorPil(**kwargs)


def _array(image: ProcessedImage, name: str) -> npt.NDArray[Any]:
    field = next(f for f in image.fields if f.name == name)
    dtype = {"float32": np.float32, "int64": np.int64, "uint8": np.uint8}[field.tensor.dtype]
    return np.frombuffer(field.tensor.data, dtype=dtype).reshape(field.tensor.shape)


def _ours(folder: Path, *, device_normalize: bool) -> Qwen2VLImages:
    config = json.loads((folder / "config.json").read_text())
    settings = json.loads((folder / "preprocessor_config.json").read_text())
    return Qwen2VLImages(
        model_id=folder.name,
        image_processor_config=settings,
        image_token_id=config["image_token_id"],
        device_normalize=device_normalize,
    )


@pytest.mark.parametrize("device_normalize", [True, False])
def test_each_image_equals_the_hf_image_processor(folder: Path, device_normalize: bool) -> None:
    ours = _ours(folder, device_normalize=device_normalize)
    hf = _hf_image_processor(folder.name)
    off = {"do_rescale": False, "do_normalize": False} if device_normalize else {}
    merge = SETTINGS[folder.name]["merge_size"]
    for data in IMAGES:
        mine = ours.process(data, "image")
        golden = hf(images=[hf_rgb(data)], return_tensors="np", **off)
        pixels = _array(mine, "pixel_values")
        assert pixels.dtype == (np.uint8 if device_normalize else np.float32)
        assert pixels.shape == golden["pixel_values"].shape
        assert np.array_equal(pixels.astype(np.float32), golden["pixel_values"])
        grid = _array(mine, "image_grid_thw")
        assert grid.shape == (3,)
        assert np.array_equal(grid, golden["image_grid_thw"][0])
        assert mine.embed_count == int(grid.prod()) // merge**2
        assert mine.replacement == "<|image_pad|>" * mine.embed_count


def test_a_multi_image_multi_turn_prompt_equals_the_hf_processor(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Qwen2VLProcessor`'s constructor checks its video processor's class in a mapping that
    needs torchvision (absent here: no torch in the gateway's venv); that check alone is
    skipped, and the processor runs as it is (its image processor, expansion, tokenizer)."""
    monkeypatch.setattr(
        Qwen2VLProcessor, "check_argument_for_proper_class", lambda self, name, arg: None
    )
    vision = load_vision(folder, folder.name)
    assert isinstance(vision, Qwen2VLImages)
    chat = multi_turn_chat()
    chosen = [IMAGES[0], IMAGES[1], IMAGES[2], IMAGES[5]]
    processed = [vision.process(data, "image") for data in chosen]
    model = load_model_dir(folder).prompt_model()
    ids, features = chat_prompt(chat, model, now=NOW, images=processed)
    hf: Any = Qwen2VLProcessor(
        image_processor=_hf_image_processor(folder.name),
        tokenizer=AutoTokenizer.from_pretrained(folder),  # type: ignore[no-untyped-call]
        chat_template=TEMPLATE,
    )
    text = hf.apply_chat_template(
        MULTI_TURN_HF,
        add_generation_prompt=True,
        tokenize=False,
    )
    golden = hf(text=text, images=[hf_rgb(d) for d in chosen], return_tensors="np")
    assert list(ids) == [int(t) for t in golden["input_ids"][0]]
    pad = vision.image_token_id
    runs, at = [], 0
    while at < len(ids):  # the pad runs of the HF ids, in order
        if ids[at] == pad:
            end = at
            while end < len(ids) and ids[end] == pad:
                end += 1
            runs.append((at, end - at))
            at = end
        else:
            at += 1
    assert [(f.offset, f.length) for f in features] == runs
    assert all(f.is_embed is None for f in features)  # every pad is an embedding
    grids = np.stack([_array(p, "image_grid_thw") for p in processed])
    assert np.array_equal(grids, golden["image_grid_thw"])


def test_another_vision_family_is_refused_naming_its_model_type(tmp_path: Path) -> None:
    folder = qwen_folder(tmp_path, "qwen2_vl")
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "mllama"
    (folder / "config.json").write_text(json.dumps(config))
    refusal = load_vision(folder, "m")
    assert isinstance(refusal, VisionRefusal)
    assert "'mllama'" in refusal.reason


OPTIONS: Final[list[dict[str, Any]]] = [
    {"max_pixels": 28 * 28 * 8},
    {"min_pixels": 28 * 28 * 16},
    {"size": {"longest_edge": 32 * 32 * 6}},
    {"size": {"shortest_edge": 64 * 64, "longest_edge": 32 * 32 * 12}, "max_pixels": 64 * 64 * 2},
]


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_mm_processor_kwargs_equal_the_hf_processor_given_them(
    folder: Path, options: dict[str, Any]
) -> None:
    """vLLM hands a request's `mm_processor_kwargs` to the HF processor (the pixel keys over
    `size`, both over the model's own bounds): the tensors, grid and token count equal the HF
    image processor's given the same bounds, and the identifier changes with them."""
    ours = _ours(folder, device_normalize=False)
    size = dict(_hf_image_processor(folder.name).size.__dict__)
    bounds = {k: size[k] for k in ("shortest_edge", "longest_edge")}
    bounds.update(options.get("size", {}))
    for key, edge in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge")):
        if key in options:
            bounds[edge] = options[key]
    settings = {k: v for k, v in SETTINGS[folder.name].items() if k != "image_processor_type"}
    settings.pop("min_pixels", None)
    settings.pop("max_pixels", None)
    hf = Qwen2VLImageProcessorPil(**{**settings, "size": bounds})
    counts = []
    for data in (IMAGES[0], IMAGES[1], IMAGES[4], IMAGES[5]):
        mine = ours.process(data, "image", options)
        golden = hf(images=[hf_rgb(data)], return_tensors="np")
        assert np.array_equal(_array(mine, "pixel_values"), golden["pixel_values"])
        assert np.array_equal(_array(mine, "image_grid_thw"), golden["image_grid_thw"][0])
        assert mine.embed_count == int(golden["image_grid_thw"][0].prod()) // 4
        plain = ours.process(data, "image")
        assert mine.identifier != plain.identifier
        counts.append((mine.embed_count, plain.embed_count))
    assert any(mine != plain for mine, plain in counts)  # the bounds took effect


def test_mm_processor_kwargs_equal_to_the_models_keep_its_identifier(folder: Path) -> None:
    ours = _ours(folder, device_normalize=True)
    longest = int(_hf_image_processor(folder.name).size["longest_edge"])
    same = ours.process(IMAGES[1], "image", {"max_pixels": longest})
    assert same.identifier == ours.process(IMAGES[1], "image").identifier


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"fps": 2}, "mm_processor_kwargs.fps"),
        ({"patch_size": 7}, "mm_processor_kwargs.patch_size"),
        ({"max_pixels": 10**9}, "mm_processor_kwargs.max_pixels"),
        ({"min_pixels": 0}, "mm_processor_kwargs.min_pixels"),
        ({"min_pixels": True}, "mm_processor_kwargs.min_pixels"),
        ({"size": {"height": 28}}, "mm_processor_kwargs.size"),
        ({"size": {"longest_edge": "big"}}, "mm_processor_kwargs.size.longest_edge"),
    ],
    ids=str,
)
def test_mm_processor_kwargs_it_does_not_take_are_a_400_naming_them(
    folder: Path, options: dict[str, Any], param: str
) -> None:
    ours = _ours(folder, device_normalize=True)
    with pytest.raises(ClientError) as caught:
        ours.process(IMAGES[0], "image", options)
    assert caught.value.param == param


@pytest.mark.parametrize(
    ("setting", "dtype"), [(None, np.uint8), (True, np.uint8), (False, np.float32)]
)
def test_the_engines_setting_chooses_the_pixels(
    folder: Path, setting: bool | None, dtype: type[np.generic]
) -> None:
    """`load_vision(..., device_normalize=)`: the engines' `--mm-device-do-normalize`, vLLM's
    default (None) on for these families; off, the pixels are the HF processor's normalised
    float32; the identifiers of the two forms differ (the engine's caches must not mix them)."""
    vision = load_vision(folder, folder.name, device_normalize=setting)
    assert isinstance(vision, Qwen2VLImages)
    image = vision.process(IMAGES[1], "image")
    pixels = _array(image, "pixel_values")
    assert pixels.dtype == dtype
    off = {} if dtype is np.float32 else {"do_rescale": False, "do_normalize": False}
    golden = _hf_image_processor(folder.name)(
        images=[hf_rgb(IMAGES[1])], return_tensors="np", **off
    )
    assert np.array_equal(pixels.astype(np.float32), golden["pixel_values"])
    other = load_vision(folder, folder.name, device_normalize=dtype is np.float32)
    assert isinstance(other, Qwen2VLImages)
    assert other.process(IMAGES[1], "image").identifier != image.identifier
