"""I/O. vLLM's `GET /tokenizer_info` (its `--enable-tokenizer-info-endpoint`) from a model
folder: the tokenizer's configuration as its `tokenizer_config.json` states it (file-path
fields dropped, added tokens by their text, as vLLM serializes them), its class, and the chat
template in use. Built once at startup (docs/client-apis.md §4, docs/vllm-frontend.md §2).

vLLM reads the same values from the loaded tokenizer's `init_kwargs`; for a fast tokenizer those
are the file's own, and `tokenizer_class` is the Python class vLLM instantiated, where we report
the class the file names.
"""

from __future__ import annotations

from typing import Any

import msgspec

from smg_trio.model.folder import ModelDir, read_json_object

_FILE_FIELDS = ("vocab_file", "merges_file", "tokenizer_file")


def tokenizer_info_body(model: ModelDir) -> bytes:
    """The JSON body of `GET /tokenizer_info` for `model`."""
    config: dict[str, Any] = dict(read_json_object(model.path / "tokenizer_config.json") or {})
    for name in _FILE_FIELDS:
        config.pop(name, None)
    config = {key: _as_text(value) for key, value in config.items()}
    config.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
    if model.chat_template:
        config["chat_template"] = model.chat_template
    return msgspec.json.encode(config)


def _as_text(value: Any) -> Any:
    """An added token's object (`{"content": ..., ...}`) → its text, as vLLM serializes it."""
    if isinstance(value, dict):
        if isinstance(value.get("content"), str) and "special" in value:
            return value["content"]
        return {key: _as_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_text(item) for item in value]
    return value
