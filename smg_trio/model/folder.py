"""I/O. A Hugging Face style model folder: tokenizer, chat template, special tokens, EOS, context.

`load_model_dir` reads `tokenizer.json` (required), `tokenizer_config.json`, `config.json`,
`generation_config.json` and, when the config has no template, `chat_template.jinja` or
`chat_template.json`. Weights are never read.

EOS ids follow docs/stops-and-finalize.md §2.1 and §2.2, with one deliberate divergence:
the spec says a corrupt `config.json` or `generation_config.json` contributes nothing, with a
warning. We raise `ConfigError` naming the file instead, because a corrupt file in a model
folder is an operator mistake that should stop startup, not silently change which ids end a
generation. A missing optional file still contributes nothing.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer

from smg_trio.core.chat_template import ChatTemplate
from smg_trio.core.prepare import PromptModel
from smg_trio.errors import ConfigError
from smg_trio.model.hf_tokenizer import ModelTokenizer
from smg_trio.neutral.sampling import EosIds

logger = logging.getLogger(__name__)

U32_MAX = 2**32 - 1
# transformers writes model_max_length = 1e30 when a model declares none; nothing real is this big.
MAX_PLAUSIBLE_CONTEXT = 1_000_000_000
CONTEXT_KEYS = ("max_position_embeddings", "max_seq_len")
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")
# What transformers' `all_special_ids` gathers: these, and the listed extra special tokens.
NAMED_SPECIAL_KEYS = (*SPECIAL_TOKEN_KEYS, "sep_token", "cls_token", "mask_token")
EXTRA_SPECIAL_KEYS = ("additional_special_tokens", "extra_special_tokens")


@dataclass(frozen=True)
class ModelDir:
    path: Path
    served_name: str
    tokenizer: ModelTokenizer
    chat_template: str | None
    bos_token: str | None
    eos_token: str | None
    pad_token: str | None
    unk_token: str | None
    tokenizer_eos_ids: tuple[int, ...]
    eos_ids: EosIds
    context_length: int | None
    named_special_ids: frozenset[int] = frozenset()

    def prompt_model(self) -> PromptModel:
        """What `core.prepare` needs, with the chat template compiled once."""
        template = (
            None
            if self.chat_template is None
            else ChatTemplate(
                self.chat_template,
                special_tokens={
                    "bos_token": self.bos_token,
                    "eos_token": self.eos_token,
                    "pad_token": self.pad_token,
                    "unk_token": self.unk_token,
                },
            )
        )
        return PromptModel(
            name=self.served_name,
            tokenizer=self.tokenizer,
            chat_template=template,
            vocab_size=self.tokenizer.vocab_size,
            context_length=self.context_length,
            eos_token_id=self.eos_ids.primary,
            max_bytes_per_token=self.tokenizer.max_bytes_per_token,
            named_special_ids=self.named_special_ids,
        )


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A JSON object file → dict; missing → None; unreadable, corrupt, not an object → ConfigError."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from exc
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: corrupt JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


def eos_id_values(config: Mapping[str, Any] | None) -> list[int]:
    """`eos_token_id` as ids in file order: an int or a list; non-integers and non-u32 dropped."""
    if config is None:
        return []
    value = config.get("eos_token_id")
    values = value if isinstance(value, list) else [value]
    return [v for v in values if type(v) is int and 0 <= v <= U32_MAX]


def merge_tokenizer_eos_ids(
    config: Mapping[str, Any] | None, generation_config: Mapping[str, Any] | None
) -> tuple[int, ...]:
    """docs/stops-and-finalize.md §2.1: the sorted, deduplicated union of both files' `eos_token_id`."""
    return tuple(sorted({*eos_id_values(config), *eos_id_values(generation_config)}))


def merge_connect_eos_ids(
    config: Mapping[str, Any] | None, generation_config: Mapping[str, Any] | None
) -> EosIds:
    """docs/stops-and-finalize.md §2.2: primary = first of config.json, else of generation_config.json; the rest extra."""
    ordered = [*eos_id_values(config), *eos_id_values(generation_config)]
    if not ordered:
        return EosIds()
    primary = ordered[0]
    extra = tuple(dict.fromkeys(i for i in ordered if i != primary))
    return EosIds(primary=primary, extra=extra)


def named_special_ids(
    tokenizer: Tokenizer, settings: Mapping[str, Any], specials_map: Mapping[str, Any]
) -> frozenset[int]:
    """The ids of the special tokens the configs name (bos, eos, ..., the extra ones), as
    transformers' `all_special_ids` lists them: vLLM's reasoning counts drop only these."""
    texts = [
        special_token_text(settings[key] if key in settings else specials_map.get(key))
        for key in NAMED_SPECIAL_KEYS
    ]
    for key in EXTRA_SPECIAL_KEYS:
        extra = settings[key] if key in settings else specials_map.get(key)
        if isinstance(extra, dict):
            extra = list(extra.values())
        if isinstance(extra, list):
            texts.extend(special_token_text(value) for value in extra)
    ids = (tokenizer.token_to_id(text) for text in texts if text is not None)
    return frozenset(token for token in ids if token is not None)


def special_token_text(value: object) -> str | None:
    """A special token as configs spell it: a string, or an AddedToken dict with `content`."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def parse_chat_template(value: object, source: Path) -> str | None:
    """`chat_template` as a string or a list of {name, template} → the default one, if any."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        named: dict[str, str] = {}
        for entry in value:
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("name"), str)
                and isinstance(entry.get("template"), str)
            ):
                raise ConfigError(
                    f"{source}: chat_template list entries must be {{name, template}} strings"
                )
            named[entry["name"]] = entry["template"]
        return named.get("default")
    raise ConfigError(f"{source}: chat_template must be a string or a list, not {value!r:.80}")


def _positive_context(value: object) -> int | None:
    if type(value) is int and 0 < value <= MAX_PLAUSIBLE_CONTEXT:
        return value
    return None


def context_length_of(
    config: Mapping[str, Any] | None, tokenizer_config: Mapping[str, Any] | None
) -> int | None:
    """config.json's length (top level, then text_config), else model_max_length; None if absurd."""
    scopes: list[Mapping[str, Any]] = []
    if config is not None:
        scopes.append(config)
        if isinstance(config.get("text_config"), dict):
            scopes.append(config["text_config"])
    for scope in scopes:
        for key in CONTEXT_KEYS:
            if (length := _positive_context(scope.get(key))) is not None:
                return length
    if tokenizer_config is not None:
        return _positive_context(tokenizer_config.get("model_max_length"))
    return None


def _load_tokenizer(path: Path) -> Tokenizer:
    if not path.is_file():
        raise ConfigError(
            f"{path}: missing; the model folder needs a Hugging Face tokenizer.json "
            "(tokenizer.model and tiktoken files are not supported)"
        )
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises bare Exception for every parse failure
        raise ConfigError(f"{path}: not a valid tokenizer.json: {exc}") from exc


def apply_added_tokens_decoder(tokenizer: Tokenizer, declared: object, source: Path) -> None:
    """Honour `added_tokens_decoder` flags the way transformers does on load.

    An entry naming the same token at the same id as tokenizer.json but flagged special there
    makes it special (so decode skips it). An entry that disagrees with tokenizer.json about
    the id is ignored with a warning: tokenizer.json decides ids.
    """
    if declared is None:
        return
    if not isinstance(declared, dict):
        raise ConfigError(f"{source}: added_tokens_decoder must be an object of id → token")
    known = tokenizer.get_added_tokens_decoder()
    for key, entry in declared.items():
        content = special_token_text(entry)
        if not key.isdigit() or content is None:
            raise ConfigError(f"{source}: added_tokens_decoder[{key!r}] is not id → token")
        token_id = int(key)
        if tokenizer.token_to_id(content) != token_id:
            logger.warning(
                "%s: added_tokens_decoder puts %r at id %d but tokenizer.json does not; ignored",
                source,
                content,
                token_id,
            )
            continue
        special = isinstance(entry, dict) and entry.get("special") is True
        if special and not (token_id in known and known[token_id].special):
            flags = {k: entry[k] for k in ("lstrip", "rstrip", "single_word") if k in entry}
            normalized = bool(entry.get("normalized", False))
            tokenizer.add_special_tokens(
                [AddedToken(content, special=True, normalized=normalized, **flags)]
            )


def _read_fallback_chat_template(directory: Path) -> object:
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        try:
            return jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{jinja}: cannot read it: {exc}") from exc
    separate = read_json_object(directory / "chat_template.json")
    return None if separate is None else separate.get("chat_template")


def load_model_dir(path: str | os.PathLike[str], *, served_name: str | None = None) -> ModelDir:
    """Read a model folder; any missing required file or corrupt JSON raises ConfigError."""
    directory = Path(path)
    if not directory.is_dir():
        raise ConfigError(f"{directory}: model path is not a directory")
    tokenizer_config = read_json_object(directory / "tokenizer_config.json")
    config = read_json_object(directory / "config.json")
    generation_config = read_json_object(directory / "generation_config.json")
    specials_map = read_json_object(directory / "special_tokens_map.json") or {}
    settings = tokenizer_config or {}

    hf_tokenizer = _load_tokenizer(directory / "tokenizer.json")
    apply_added_tokens_decoder(
        hf_tokenizer, settings.get("added_tokens_decoder"), directory / "tokenizer_config.json"
    )
    tokenizer_eos_ids = merge_tokenizer_eos_ids(config, generation_config)

    template_source = directory / "tokenizer_config.json"
    raw_template = settings.get("chat_template")
    if raw_template is None:
        raw_template = _read_fallback_chat_template(directory)
        template_source = directory
    chat_template = parse_chat_template(raw_template, template_source)

    tokens = {
        key: special_token_text(settings[key] if key in settings else specials_map.get(key))
        for key in SPECIAL_TOKEN_KEYS
    }
    return ModelDir(
        path=directory,
        served_name=served_name or directory.resolve().name,
        tokenizer=ModelTokenizer(hf_tokenizer, eos_token_ids=tokenizer_eos_ids),
        chat_template=chat_template,
        bos_token=tokens["bos_token"],
        eos_token=tokens["eos_token"],
        pad_token=tokens["pad_token"],
        unk_token=tokens["unk_token"],
        tokenizer_eos_ids=tokenizer_eos_ids,
        eos_ids=merge_connect_eos_ids(config, generation_config),
        context_length=context_length_of(config, tokenizer_config),
        named_special_ids=named_special_ids(hf_tokenizer, settings, specials_map),
    )


def demo_model_path() -> Path:
    """The demo model folder shipped inside the package (tokenizer and configs, no weights)."""
    return Path(__file__).resolve().parent / "demo_model"
