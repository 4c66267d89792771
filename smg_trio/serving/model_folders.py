"""I/O. Every served model's folder, read once at startup (docs/fleet.md §4): the tokenizer,
template, EOS ids and context length of each `ModelSpec`, with its own `chat_template` file
and `max_model_len` applied; and which folder a worker's `?model=NAME` means.

- `chat_template` is read as the template's text (vLLM's `--chat-template FILE`); an
  unreadable file is a ConfigError naming it; `chat_template_text` is the template itself
  (vLLM's inline `--chat-template`); not both.
- `max_model_len` may lower the folder's context length, never raise it (vLLM refuses a
  length above the one the model derives, as we do), unless `VLLM_ALLOW_LONG_MAX_MODEL_LEN`
  is `1` or `true` in the environment, vLLM's own switch for exactly that (then it is taken,
  with a warning, as vLLM takes it); a folder without one takes it as is.
- Each model's `DeclaredModel` is what its workers' engines are checked against
  (backends/declared_model.py): its names, folder and the folder's own context length.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass

from smg_trio.backends.declared_model import DeclaredModel
from smg_trio.errors import ConfigError
from smg_trio.model.folder import ModelDir, load_model_dir
from smg_trio.serving.model_specs import ModelSpec

logger = logging.getLogger(__name__)
ALLOW_LONG_MAX_MODEL_LEN = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


def long_max_model_len_allowed() -> bool:
    """vLLM's switch for a max_model_len above the model's own (parsed as vLLM parses it)."""
    return os.environ.get(ALLOW_LONG_MAX_MODEL_LEN, "0").strip().lower() in ("1", "true")


@dataclass(frozen=True)
class ModelFolders:
    """The served models' folders, in the order of their specs (the first model first)."""

    specs: tuple[ModelSpec, ...]
    folders: tuple[ModelDir, ...]
    declared: tuple[DeclaredModel, ...]

    def of(self, name: str | None) -> tuple[ModelDir, DeclaredModel]:
        """The folder and declaration of the model served as `name` (None: the first
        model); KeyError for a name no model is served as."""
        for index, spec in enumerate(self.specs):
            if name is None or name in spec.names:
                return self.folders[index], self.declared[index]
        raise KeyError(name)


def load_model_folders(specs: tuple[ModelSpec, ...]) -> ModelFolders:
    loaded = [(spec, load_model_dir(spec.model_path, served_name=spec.names[0])) for spec in specs]
    return ModelFolders(
        specs,
        tuple(with_overrides(spec, folder) for spec, folder in loaded),
        tuple(
            DeclaredModel(
                key=spec.names[0],
                names=spec.names,
                path=str(spec.model_path),
                context_length=_engine_bound(spec, folder),
            )
            for spec, folder in loaded
        ),
    )


def _engine_bound(spec: ModelSpec, folder: ModelDir) -> int | None:
    """The longest context an engine of this model may report: the folder's own, or a longer
    max_model_len that VLLM_ALLOW_LONG_MAX_MODEL_LEN let the engines take too."""
    own, limit = folder.context_length, spec.max_model_len
    if own is not None and limit is not None and limit > own and long_max_model_len_allowed():
        return limit
    return own


def load_spec_folder(spec: ModelSpec) -> ModelDir:
    """`spec`'s folder with its own template and context bound."""
    return with_overrides(spec, load_model_dir(spec.model_path, served_name=spec.names[0]))


def with_overrides(spec: ModelSpec, folder: ModelDir) -> ModelDir:
    if spec.chat_template is not None and spec.chat_template_text is not None:
        raise ConfigError(
            f"model {spec.names[0]!r}: chat_template (a file) and chat_template_text (the "
            "template itself) are both given; give one"
        )
    if spec.chat_template_text is not None:
        folder = dataclasses.replace(folder, chat_template=spec.chat_template_text)
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
        if derived is not None and limit > derived and long_max_model_len_allowed():
            logger.warning(
                "model %r: max_model_len %d is more than its folder's context length %d, "
                "taken as %s asks",
                spec.names[0],
                limit,
                derived,
                ALLOW_LONG_MAX_MODEL_LEN,
            )
        elif derived is not None and limit > derived:
            raise ConfigError(
                f"model {spec.names[0]!r}: max_model_len {limit} is more than its folder's "
                f"context length {derived} ({spec.model_path})"
            )
        folder = dataclasses.replace(folder, context_length=limit)
    return folder
