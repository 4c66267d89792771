"""Model folders of the LLaVA-NeXT and Gemma 3 families, built offline from the test tokenizer
(tests/vision_model) with each family's published processor settings (llava-hf/
llava-v1.6-mistral-7b-hf's and google/gemma-3-4b-it's preprocessor_config.json), no weights:
what the golden tests compare against the HF processors and the e2e tests serve.

Gemma 3's folder gives the test tokenizer Gemma's image tokens and, as Gemma's vocabulary has
them, single tokens for runs of 1 to 4 newlines, so the newlines around an image's replacement
merge with the text's as in Gemma."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Final

TEST_MODEL: Final = Path(__file__).resolve().parents[1] / "vision_model"
IMAGE_TOKEN_ID: Final = 4097  # the test tokenizer's <image>
CLIP_MEAN: Final = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD: Final = [0.26862954, 0.26130258, 0.27577711]
PINPOINTS: Final = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
# llava-v1.6-mistral-7b-hf's preprocessor_config.json.
LLAVA_NEXT_SETTINGS: Final[dict[str, Any]] = {
    "aspect_ratio_setting": "anyres",
    "crop_size": {"height": 336, "width": 336},
    "do_center_crop": True,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_grid_pinpoints": PINPOINTS,
    "image_mean": CLIP_MEAN,
    "image_processor_type": "LlavaNextImageProcessor",
    "image_std": CLIP_STD,
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"shortest_edge": 336},
}
LLAVA_NEXT_VISION: Final = {"model_type": "clip_vision_model", "image_size": 336, "patch_size": 14}
# gemma-3-4b-it's preprocessor_config.json.
GEMMA3_SETTINGS: Final[dict[str, Any]] = {
    "do_convert_rgb": None,
    "do_normalize": True,
    "do_pan_and_scan": None,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "Gemma3ImageProcessor",
    "image_seq_length": 256,
    "image_std": [0.5, 0.5, 0.5],
    "pan_and_scan_max_num_crops": None,
    "pan_and_scan_min_crop_size": None,
    "pan_and_scan_min_ratio_to_activate": None,
    "processor_class": "Gemma3Processor",
    "resample": 2,
    "rescale_factor": 0.00392156862745098,
    "size": {"height": 896, "width": 896},
}
GEMMA3_TOKENS: Final = {
    "boi_token": "<start_of_image>",
    "eoi_token": "<end_of_image>",
    "image_token": "<image_soft_token>",
}
NEWLINE_RUNS: Final = ("\n", "\n\n", "\n\n\n", "\n\n\n\n")


def _copy(root: Path, name: str) -> tuple[Path, dict[str, Any]]:
    folder = root / name
    shutil.copytree(TEST_MODEL, folder)
    (folder / "processor_config.json").unlink()
    config: dict[str, Any] = json.loads((folder / "config.json").read_text())
    config.pop("image_token_id")
    config["text_config"]["max_position_embeddings"] = 16384  # LLaVA-NeXT: ~2,000 per image
    return folder, config


def llava_next_folder(
    root: Path,
    vision: dict[str, Any] = LLAVA_NEXT_VISION,
    settings: dict[str, Any] = LLAVA_NEXT_SETTINGS,
) -> Path:
    folder, config = _copy(root, "llava_next")
    config.update(
        model_type="llava_next",
        architectures=["LlavaNextForConditionalGeneration"],
        image_token_index=IMAGE_TOKEN_ID,
        image_grid_pinpoints=PINPOINTS,
        vision_config=vision,
        vision_feature_select_strategy="default",
    )
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "preprocessor_config.json").write_text(json.dumps(settings))
    return folder


def gemma3_folder(
    root: Path, settings: dict[str, Any] = GEMMA3_SETTINGS, seq_length: int = 256
) -> tuple[Path, dict[str, int]]:
    """The folder, and the ids of its added tokens by content."""
    folder, config = _copy(root, "gemma3")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    ids: dict[str, int] = {}
    next_id = 1 + max(token["id"] for token in tokenizer["added_tokens"])
    for content, special in [(t, True) for t in GEMMA3_TOKENS.values()] + [
        (run, False) for run in NEWLINE_RUNS
    ]:
        ids[content] = next_id
        tokenizer["added_tokens"].append(
            {
                "id": next_id,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": special,
            }
        )
        next_id += 1
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config.update(GEMMA3_TOKENS)
    tokenizer_config["extra_special_tokens"] = dict(GEMMA3_TOKENS)
    tokenizer_config["processor_class"] = "Gemma3Processor"
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    template = (folder / "chat_template.jinja").read_text()
    (folder / "chat_template.jinja").write_text(template.replace("<image>", "<start_of_image>"))
    config["text_config"]["vocab_size"] = next_id
    config.update(
        model_type="gemma3",
        architectures=["Gemma3ForConditionalGeneration"],
        image_token_index=ids[GEMMA3_TOKENS["image_token"]],
        boi_token_index=ids[GEMMA3_TOKENS["boi_token"]],
        eoi_token_index=ids[GEMMA3_TOKENS["eoi_token"]],
        mm_tokens_per_image=seq_length,
        vision_config={"model_type": "siglip_vision_model", "image_size": 896, "patch_size": 14},
    )
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "preprocessor_config.json").write_text(
        json.dumps({**settings, "image_seq_length": seq_length})
    )
    (folder / "processor_config.json").write_text(
        json.dumps({"image_seq_length": seq_length, "processor_class": "Gemma3Processor"})
    )
    return folder, ids
