"""A Qwen2-VL, Qwen2.5-VL or Qwen3-VL model folder built from tests/vision_model (its test
tokenizer given Qwen's vision tokens, a template that writes Qwen's placeholder) with each
family's published image processor settings, the pixel bounds made small: no weights, no hub.
The golden tests compare it with the HF processor; the e2e tests serve it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Final

from tokenizers import AddedToken, Tokenizer

TEST_MODEL: Final = Path(__file__).resolve().parents[1] / "vision_model"
VISION_TOKENS: Final = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")
CLIP_MEAN: Final = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD: Final = [0.26862954, 0.26130258, 0.27577711]
# Each family's published image processor settings, the pixel bounds made small (fewer patches).
SETTINGS: Final[dict[str, dict[str, Any]]] = {
    "qwen2_vl": {
        "image_processor_type": "Qwen2VLImageProcessor",
        "min_pixels": 56 * 56,
        "max_pixels": 28 * 28 * 40,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
    },
    "qwen2_5_vl": {
        "image_processor_type": "Qwen2VLImageProcessor",
        "min_pixels": 3136,
        "max_pixels": 28 * 28 * 24,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
    },
    "qwen3_vl": {
        "image_processor_type": "Qwen2VLImageProcessor",
        "size": {"shortest_edge": 64 * 64, "longest_edge": 32 * 32 * 36},
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
    },
}
TEMPLATE: Final = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for p in message['content'] %}{% if p['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif p['type'] == 'text' %}{{ p['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def qwen_folder(root: Path, model_type: str) -> Path:
    folder = root / model_type
    folder.mkdir()
    tokenizer = Tokenizer.from_file(str(TEST_MODEL / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in VISION_TOKENS])
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True) for t in ("<|im_start|>", "<|im_end|>")]
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    shutil.copy(TEST_MODEL / "tokenizer_config.json", folder / "tokenizer_config.json")
    (folder / "chat_template.jinja").write_text(TEMPLATE)
    config = json.loads((TEST_MODEL / "config.json").read_text())
    config.update(
        model_type=model_type,
        image_token_id=tokenizer.token_to_id("<|image_pad|>"),
        vision_config={"spatial_merge_size": 2},
    )
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "preprocessor_config.json").write_text(json.dumps(SETTINGS[model_type]))
    return folder
