"""I/O. Every served model's folder, read once at startup (docs/fleet.md §4): the tokenizer,
template, EOS ids and context length of each `ModelSpec`, with its own `chat_template` file
and `max_model_len` applied; and which folder a worker's `?model=NAME` means.

- `chat_template` is read as the template's text (vLLM's `--chat-template FILE`); an
  unreadable file is a ConfigError naming it.
- `max_model_len` may lower the folder's context length, never raise it (vLLM refuses a
  length above the one the model derives, as we do); a folder without one takes it as is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from smg_trio.errors import ConfigError
from smg_trio.model.folder import ModelDir, load_model_dir
from smg_trio.serving.model_specs import ModelSpec


@dataclass(frozen=True)
class ModelFolders:
    """The served models' folders, in the order of their specs (the first model first)."""

    specs: tuple[ModelSpec, ...]
    folders: tuple[ModelDir, ...]

    def of(self, name: str | None) -> tuple[str, ModelDir]:
        """The key and folder of the model served as `name` (None: the first model);
        KeyError for a name no model is served as."""
        for spec, folder in zip(self.specs, self.folders, strict=True):
            if name is None or name in spec.names:
                return spec.names[0], folder
        raise KeyError(name)


def load_model_folders(specs: tuple[ModelSpec, ...]) -> ModelFolders:
    return ModelFolders(specs, tuple(load_spec_folder(spec) for spec in specs))


def load_spec_folder(spec: ModelSpec) -> ModelDir:
    folder = load_model_dir(spec.model_path, served_name=spec.names[0])
    if spec.chat_template is not None:
        try:
            template = spec.chat_template.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{spec.chat_template}: cannot read the chat template: {exc}"
            ) from exc
        folder = dataclasses.replace(folder, chat_template=template)
    limit = spec.max_model_len
    if limit is not None:
        derived = folder.context_length
        if derived is not None and limit > derived:
            raise ConfigError(
                f"model {spec.names[0]!r}: max_model_len {limit} is more than its folder's "
                f"context length {derived} ({spec.model_path})"
            )
        folder = dataclasses.replace(folder, context_length=limit)
    return folder
