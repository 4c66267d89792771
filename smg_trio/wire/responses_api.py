"""Pure. OpenAI Responses API request bodies (`POST /v1/responses`) and their decoding
(docs/client-apis.md §3).

Unlike chat (which ignores unknown fields, as vLLM does), a Responses body is decoded with
unknown fields forbidden: a field this gateway does not honour is a 400 naming it, never
silently dropped (docs/client-apis.md §3.1). `input` items are decoded one by one by their
`type` (a message may leave `type` out, as OpenAI's "easy" input message does), so an error
names the item: `input[2].call_id`.

Input items are kept normalized (`type` always present, unset fields left out) so a stored
conversation decodes again with the same decoder when `previous_response_id` continues it.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec
from msgspec import UNSET, UnsetType

from smg_trio.errors import ClientError
from smg_trio.wire.decode_errors import decode_body, read_decode_error
from smg_trio.wire.json_depth import check_json_depth
from smg_trio.wire.request_numbers import Int

# OpenAI's limits on `metadata`: 16 pairs, keys up to 64 characters, values up to 512.
MAX_METADATA_PAIRS: Final = 16
MAX_METADATA_KEY: Final = 64
MAX_METADATA_VALUE: Final = 512
MAX_INPUT_ITEMS: Final = 2048


class _Forbid(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class InputText(_Forbid, frozen=True, tag_field="type", tag="input_text"):
    text: str


class OutputText(_Forbid, frozen=True, tag_field="type", tag="output_text"):
    """Assistant text given back as input (a stored response's output, or the client's)."""

    text: str
    annotations: tuple[Any, ...] = ()
    logprobs: tuple[Any, ...] | None = None


class ReasoningText(_Forbid, frozen=True, tag_field="type", tag="reasoning_text"):
    text: str


class InputImage(_Forbid, frozen=True, tag_field="type", tag="input_image"):
    """An image in a user turn: a URL or data: URI (`file_id` needs a files API: a 400)."""

    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high"] = "auto"


MessageContent = str | tuple[InputText | OutputText | InputImage, ...]


class MessageItem(_Forbid, frozen=True, tag_field="type", tag="message"):
    role: Literal["user", "assistant", "system", "developer"]
    content: MessageContent
    id: str | UnsetType = UNSET
    status: str | UnsetType = UNSET


class FunctionCallItem(_Forbid, frozen=True, tag_field="type", tag="function_call"):
    call_id: str
    name: str
    arguments: str
    id: str | UnsetType = UNSET
    status: str | UnsetType = UNSET


class FunctionCallOutputItem(_Forbid, frozen=True, tag_field="type", tag="function_call_output"):
    call_id: str
    output: str
    id: str | UnsetType = UNSET
    status: str | UnsetType = UNSET


class ReasoningItem(_Forbid, frozen=True, tag_field="type", tag="reasoning"):
    """A reasoning item given back: its text reaches the template as the next assistant
    message's `reasoning_content` (core/responses_request.py)."""

    id: str | UnsetType = UNSET
    summary: tuple[Any, ...] = ()
    content: tuple[ReasoningText, ...] | None = None
    status: str | UnsetType = UNSET


InputItem = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem
_ITEM_TYPES: Final[dict[str, type[InputItem]]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
    "reasoning": ReasoningItem,
}


class FunctionTool(_Forbid, frozen=True, tag_field="type", tag="function"):
    name: str
    parameters: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class FunctionChoice(_Forbid, frozen=True, tag_field="type", tag="function"):
    name: str


class TextFormatText(_Forbid, frozen=True, tag_field="type", tag="text"):
    pass


class TextFormatJsonObject(_Forbid, frozen=True, tag_field="type", tag="json_object"):
    pass


class TextFormatJsonSchema(_Forbid, frozen=True, tag_field="type", tag="json_schema"):
    name: str
    schema: dict[str, Any]
    description: str | None = None
    strict: bool | None = None


TextFormat = TextFormatText | TextFormatJsonObject | TextFormatJsonSchema


class TextConfig(_Forbid, frozen=True):
    format: TextFormat | None = None


class ReasoningConfig(_Forbid, frozen=True):
    effort: Literal["none", "minimal", "low", "medium", "high"] | None = None


class ResponsesRequest(_Forbid, frozen=True):
    """Every field a Responses body may carry here; anything else is a 400 naming it."""

    input: str | tuple[dict[str, Any], ...]
    model: str | None = None
    instructions: str | None = None
    max_output_tokens: Int | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: tuple[FunctionTool, ...] | None = None
    tool_choice: Literal["auto", "none", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    stream: bool | None = None
    store: bool | None = None
    background: bool | None = None  # docs/client-apis.md §3.5
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    # vLLM's extensions of the Responses body that map onto chat's handling unchanged.
    stop: str | tuple[str, ...] | None = None
    top_k: Int | None = None
    seed: Int | None = None


class ResponsesHead(msgspec.Struct, frozen=True):
    """The fields read before the body is prepared: whether a stored turn is continued, and
    whether the response runs apart from its connection (docs/client-apis.md §3.5)."""

    previous_response_id: str | None = None
    store: bool | None = None
    background: bool | None = None
    stream: bool | None = None


_DECODER: Final = msgspec.json.Decoder(ResponsesRequest)
_HEAD_DECODER: Final = msgspec.json.Decoder(ResponsesHead)


def _decode_error(exc: msgspec.DecodeError, prefix: str = "") -> ClientError:
    """msgspec's error → a 400 naming the field (`$.tools[0].type` → `tools[0].type`)."""
    failure = read_decode_error(exc, prefix)
    if not failure.valid_json:
        return ClientError(f"The request body is not valid JSON: {failure.message}")
    path, text = failure.path, failure.text
    if failure.unknown_field:
        text = f"{path} is not supported by this gateway's /v1/responses"
    elif path.startswith("tools[") and path.endswith(".type"):
        text = f"{path}: only function tools are supported ({text})"
    return ClientError(f"Invalid request: {text}", param=path or None)


def decode_head(body: bytes) -> ResponsesHead:
    """`previous_response_id` and `store` of a body (a bad body fails later, fully named).

    A body nesting past the limit is refused here, before msgspec recurses into it (it is the
    first decoder a `/v1/responses` body meets; docs/limits.md §3)."""
    check_json_depth(body)
    try:
        return _HEAD_DECODER.decode(body)
    except msgspec.DecodeError:
        return ResponsesHead()


def decode_responses_request(body: bytes) -> ResponsesRequest:
    """JSON body → validated request; any problem is a 400 `ClientError` naming the field."""
    req = decode_body(_DECODER, body, _decode_error)
    _validate(req)
    return req


def decode_items(raw: tuple[dict[str, Any], ...] | list[Any], param: str) -> list[InputItem]:
    """Input items by their `type` (default `message`); errors name `param[i]...`."""
    if len(raw) > MAX_INPUT_ITEMS:
        raise ClientError(f"{param} holds more than {MAX_INPUT_ITEMS} items", param=param)
    items: list[InputItem] = []
    for index, entry in enumerate(raw):
        where = f"{param}[{index}]"
        if not isinstance(entry, dict):
            raise ClientError(f"{where} must be an object", param=where)
        kind = entry.get("type", "message")
        struct = _ITEM_TYPES.get(kind) if isinstance(kind, str) else None
        if struct is None:
            raise ClientError(
                f"{where}: input items of type {kind!r} are not supported (message, "
                "function_call, function_call_output, reasoning)",
                param=f"{where}.type",
            )
        try:
            items.append(msgspec.convert({**entry, "type": kind}, struct))
        except msgspec.ValidationError as exc:
            raise _decode_error(exc, where) from None
    return items


def _validate(req: ResponsesRequest) -> None:
    if isinstance(req.input, str):
        if not req.input and req.previous_response_id is None:
            raise ClientError("input must not be empty", param="input")
    elif not req.input and req.previous_response_id is None:
        raise ClientError("input must contain at least one item", param="input")
    if req.background and req.store is False:
        # OpenAI's rule: a background response is fetched later, so it must be kept.
        raise ClientError(
            "background responses must be stored: store must be true", param="background"
        )
    if req.max_output_tokens is not None and req.max_output_tokens < 1:
        raise ClientError("max_output_tokens must be at least 1", param="max_output_tokens")
    if req.metadata is not None:
        if len(req.metadata) > MAX_METADATA_PAIRS:
            raise ClientError(
                f"metadata holds at most {MAX_METADATA_PAIRS} pairs", param="metadata"
            )
        for key, value in req.metadata.items():
            if len(key) > MAX_METADATA_KEY or len(value) > MAX_METADATA_VALUE:
                raise ClientError(
                    f"metadata keys hold at most {MAX_METADATA_KEY} characters and values "
                    f"{MAX_METADATA_VALUE}",
                    param=f"metadata.{key[:MAX_METADATA_KEY]}",
                )
