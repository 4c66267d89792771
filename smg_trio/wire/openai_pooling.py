"""Pure. The JSON of vLLM's pooling endpoints (docs/pooling.md §3): `POST /v1/embeddings`,
`/pooling` and `/classify`, their request options and their response bodies.

One options struct decodes all three bodies; `input` and `messages` are decoded as plain JSON
values and told apart by `core/pooling_inputs.py` (strings, token ids, chat conversations), as
vLLM tells its request forms apart. vLLM's fields this gateway does not honour are decoded
only to be refused with a 400 naming them; unknown extra fields stay ignored, as vLLM's server
ignores them (docs/request-fields.md).
"""

from __future__ import annotations

from typing import Any, Final, Generic, TypeVar

import msgspec

from smg_trio.errors import ClientError
from smg_trio.wire.json_depth import check_json_depth
from smg_trio.wire.openai_decode import _decode_error as decode_error
from smg_trio.wire.request_numbers import Int

EMBEDDINGS_PATH: Final = "/v1/embeddings"
POOLING_PATH: Final = "/pooling"
CLASSIFY_PATH: Final = "/classify"
POOLING_PATHS: Final = (EMBEDDINGS_PATH, POOLING_PATH, CLASSIFY_PATH)

ENCODING_FORMATS: Final = ("float", "base64")
ENDIANNESS: Final = ("native", "little", "big")

_MISSING: Final[Any] = msgspec.UNSET


class PoolingOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Every field of vLLM's embeddings, pooling and classify requests."""

    model: str | None = None
    input: Any = _MISSING
    messages: Any = _MISSING
    user: str | None = None
    encoding_format: str = "float"
    embed_dtype: str = "float32"
    endianness: str = "native"
    dimensions: Int | None = None
    use_activation: bool | None = None
    task: str | None = None  # /pooling only
    truncate_prompt_tokens: Int | None = None
    truncation_side: str | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool = False
    continue_final_message: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    request_id: str | None = None
    priority: Int = 0
    # vLLM's fields this gateway does not honour: refused, never ignored.
    normalize: Any = _MISSING
    padding: str | None = None
    cache_salt: str | None = None
    chat_template: str | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, Any] | None = None


_OPTIONS_DECODER: Final = msgspec.json.Decoder(PoolingOptions)


def decode_pooling_options(path: str, body: bytes) -> PoolingOptions:
    """A pooling path's body: decoded, its option values checked (its inputs are checked by
    `core/pooling_inputs.py`); any problem is a 400 naming the parameter."""
    check_json_depth(body)
    try:
        options = _OPTIONS_DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise decode_error(exc) from None
    if options.normalize is not _MISSING:
        raise ClientError(
            "Parameter `normalize` was removed; use `use_activation` instead.", param="normalize"
        )
    for name in (
        "padding",
        "cache_salt",
        "chat_template",
        "mm_processor_kwargs",
        "media_io_kwargs",
    ):
        if getattr(options, name) is not None:
            raise ClientError(f"{name} is not supported by this gateway", param=name)
    if options.encoding_format not in ENCODING_FORMATS:
        raise ClientError(
            f"encoding_format must be one of {', '.join(ENCODING_FORMATS)} "
            f"(the binary responses are not served), got {options.encoding_format!r}",
            param="encoding_format",
        )
    if options.embed_dtype != "float32":
        raise ClientError(
            f"embed_dtype {options.embed_dtype!r} is not supported: only float32",
            param="embed_dtype",
        )
    if options.endianness not in ENDIANNESS:
        raise ClientError(
            f"endianness must be one of {', '.join(ENDIANNESS)}, got {options.endianness!r}",
            param="endianness",
        )
    check_input_options(options.truncate_prompt_tokens, options.truncation_side, options.priority)
    if options.continue_final_message and options.add_generation_prompt:
        raise ClientError(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )
    if path != POOLING_PATH and options.task is not None:
        raise ClientError(f"task is only taken by {POOLING_PATH}", param="task")
    if path == CLASSIFY_PATH and options.dimensions is not None:
        raise ClientError(
            "Task 'classify' only supports ['use_activation'] parameters, does not support "
            "['dimensions'] parameters",
            param="dimensions",
        )
    return options


def check_input_options(
    truncate_prompt_tokens: int | None, truncation_side: str | None, priority: int
) -> None:
    """The options every pooling and scoring body shares about its inputs (docs/pooling.md
    §3, §7): the truncation asked for, and no priority (the engines schedule none)."""
    if truncation_side not in (None, "left", "right"):
        raise ClientError(
            f"truncation_side must be 'left' or 'right', got {truncation_side!r}",
            param="truncation_side",
        )
    if truncate_prompt_tokens is not None and truncate_prompt_tokens < -1:
        raise ClientError(
            "truncate_prompt_tokens must be at least -1", param="truncate_prompt_tokens"
        )
    if priority != 0:
        raise ClientError(
            "priority is not supported: the engines do not use priority scheduling",
            param="priority",
        )


# --- responses --------------------------------------------------------------------------------


class PoolingUsage(msgspec.Struct, frozen=True):
    """vLLM's usage of a pooling response: prompt tokens only."""

    prompt_tokens: int
    total_tokens: int
    completion_tokens: int = 0
    prompt_tokens_details: None = None
    completion_tokens_details: None = None


class EmbeddingData(msgspec.Struct, frozen=True):
    index: int
    embedding: list[float] | str
    object: str = "embedding"


class PoolingData(msgspec.Struct, frozen=True):
    index: int
    data: list[float] | str
    object: str = "pooling"


class ClassificationData(msgspec.Struct, frozen=True):
    index: int
    label: str | None
    probs: list[float]
    num_classes: int


Entry = TypeVar("Entry", EmbeddingData, PoolingData, ClassificationData)


class PoolingList(msgspec.Struct, Generic[Entry], frozen=True, kw_only=True):
    """The body of every pooling endpoint: one entry per input, in input order."""

    id: str  # embd-, pooling- or classify-, then the request id
    object: str = "list"
    created: int
    model: str
    data: list[Entry]
    usage: PoolingUsage
