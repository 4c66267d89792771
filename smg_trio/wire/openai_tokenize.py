"""Pure. The JSON of vLLM's /v1/tokenize and /v1/detokenize: request forms and responses.

/v1/tokenize takes one of two forms, told apart (as vLLM does) by whether `messages` is given:

- the prompt form `{"model","prompt","add_special_tokens"=true,"return_token_strs"=false}`;
- the chat form: a chat request's `messages`, `add_generation_prompt`, `continue_final_message`,
  `chat_template_kwargs`, `tools`, plus `add_special_tokens` (default false here, since the
  template writes its own special tokens) and `return_token_strs`. It decodes as the chat
  request it stands for (`decode_chat_request`), so it is validated and templated exactly as
  /v1/chat/completions would be.

/v1/detokenize takes `{"model","tokens"}` and answers `{"prompt"}`.
"""

from __future__ import annotations

import msgspec

from smg_trio.errors import ClientError
from smg_trio.wire.json_depth import check_json_depth
from smg_trio.wire.openai import ChatCompletionRequest

# One error rendering for every body the gateway decodes: the parameter named from msgspec's path.
from smg_trio.wire.openai_decode import _decode_error as decode_error
from smg_trio.wire.openai_decode import decode_chat_request
from smg_trio.wire.request_numbers import Int


class TokenizeOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What both tokenize forms share; `messages` only tells the forms apart."""

    model: str | None = None
    messages: msgspec.Raw = msgspec.Raw()  # left undecoded: the chat form decodes it
    prompt: str | None = None
    add_special_tokens: bool | None = None
    return_token_strs: bool = False
    # vLLM's chat-form option this gateway cannot honour: refused, never ignored.
    chat_template: str | None = None
    # The chat form's (decoded with it, applied to its images, docs/images.md §1); the prompt
    # form has no images to apply it to: a 400 there, as vLLM's completion form has no field.
    mm_processor_kwargs: dict[str, object] | None = None


class TokenizePromptRequest(msgspec.Struct, frozen=True, kw_only=True):
    model: str | None
    prompt: str
    add_special_tokens: bool
    return_token_strs: bool


class TokenizeChatRequest(msgspec.Struct, frozen=True, kw_only=True):
    chat: ChatCompletionRequest
    add_special_tokens: bool
    return_token_strs: bool

    @property
    def model(self) -> str | None:
        return self.chat.model


TokenizeRequest = TokenizePromptRequest | TokenizeChatRequest


class DetokenizeRequest(msgspec.Struct, frozen=True, kw_only=True):
    model: str | None = None
    tokens: tuple[Int, ...]


class TokenizeResponse(msgspec.Struct, frozen=True, kw_only=True):
    count: int
    max_model_len: int | None
    tokens: tuple[int, ...]
    token_strs: tuple[str, ...] | None = None


class DetokenizeResponse(msgspec.Struct, frozen=True, kw_only=True):
    prompt: str


_OPTIONS_DECODER = msgspec.json.Decoder(TokenizeOptions)
_DETOKENIZE_DECODER = msgspec.json.Decoder(DetokenizeRequest)


def decode_tokenize_request(body: bytes) -> TokenizeRequest:
    """JSON body → the prompt or chat form; any problem is a 400 naming the parameter."""
    check_json_depth(body)
    try:
        options = _OPTIONS_DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise decode_error(exc) from None
    if options.chat_template is not None:
        raise ClientError(
            "chat_template is not supported: the model folder's own template is used",
            param="chat_template",
        )
    if bytes(options.messages) not in (b"", b"null"):
        return TokenizeChatRequest(
            chat=decode_chat_request(body),
            add_special_tokens=bool(options.add_special_tokens),
            return_token_strs=options.return_token_strs,
        )
    if options.prompt is None:
        raise ClientError("give either `prompt` or `messages`", param="prompt")
    if options.mm_processor_kwargs:
        raise ClientError(
            "mm_processor_kwargs applies to images, which only the `messages` form carries",
            param="mm_processor_kwargs",
        )
    return TokenizePromptRequest(
        model=options.model,
        prompt=options.prompt,
        add_special_tokens=options.add_special_tokens is not False,
        return_token_strs=options.return_token_strs,
    )


def decode_detokenize_request(body: bytes) -> DetokenizeRequest:
    check_json_depth(body)
    try:
        return _DETOKENIZE_DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise decode_error(exc) from None
