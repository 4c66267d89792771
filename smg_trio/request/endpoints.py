"""Pure. The POST paths the gateway serves, and what each does with a request body: decoded
and prepared into a `GeneratePlan` (the generation paths of every client API,
docs/client-apis.md), or answered whole without an engine (the token paths).

`Gateway.handle` calls these, inline or on a worker thread for large bodies; adding an API is
a path here, a decoder, a preparation and a renderer (docs/client-apis.md).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from smg_trio.core.anthropic_request import (
    COUNT_TOKENS_PATH,
    MESSAGES_PATH,
    chat_request_of,
    count_tokens_body,
    decode_count_tokens_request,
    decode_messages_request,
    prepare_messages,
)
from smg_trio.core.images import ProcessedImage
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.prepare import (
    PromptModel,
    prepare_chat_completion,
    prepare_completion,
    prepare_generate,
)
from smg_trio.core.responses_request import prepare_responses, responses_chat, responses_param
from smg_trio.core.tokenize import TokenNames, detokenize_body, tokenize_body
from smg_trio.core.tokens_generate import prepare_tokens_generate
from smg_trio.errors import ClientError
from smg_trio.wire import anthropic as an
from smg_trio.wire import openai as oa
from smg_trio.wire.openai_decode import (
    decode_chat_request,
    decode_completion_request,
    decode_generate_request,
)
from smg_trio.wire.openai_pooling import POOLING_PATHS as POOLING_PATHS
from smg_trio.wire.openai_scoring import SCORING_PATHS as SCORING_PATHS
from smg_trio.wire.openai_tokenize import (
    TokenizeRequest,
    decode_detokenize_request,
    decode_tokenize_request,
)
from smg_trio.wire.responses_api import ResponsesRequest, decode_responses_request
from smg_trio.wire.vllm_tokens_generate import TOKENS_GENERATE_PATH, decode_tokens_generate

CheckModel = Callable[[str | None], None]
"""Raises the 404 for a `model` that is none of the served names."""

RESPONSES_PATH: Final = "/v1/responses"
CHAT_PATH: Final = "/v1/chat/completions"
GENERATE_PATHS: Final = (
    CHAT_PATH,
    "/v1/completions",
    "/generate",
    TOKENS_GENERATE_PATH,
    RESPONSES_PATH,
    MESSAGES_PATH,
)
TOKENIZE_PATH: Final = "/v1/tokenize"
DETOKENIZE_PATH: Final = "/v1/detokenize"
# vLLM's server has them without the /v1: both names, one handler (docs/client-apis.md §4).
TOKENIZE_PATHS: Final = (TOKENIZE_PATH, "/tokenize")
DETOKENIZE_PATHS: Final = (DETOKENIZE_PATH, "/detokenize")
# Paths answered with a whole body, no engine: the prompt's tokens (docs/client-apis.md §2.6).
TOKEN_PATHS: Final = (*TOKENIZE_PATHS, *DETOKENIZE_PATHS, COUNT_TOKENS_PATH)
# Every POST path `Gateway.handle` serves (over HTTP and over the WebSocket protocol).
HANDLED_PATHS: Final = (*GENERATE_PATHS, *TOKEN_PATHS, *POOLING_PATHS, *SCORING_PATHS)


class ModelNotFound(ClientError):
    """A `model` that is none of the served names: vLLM's 404 (message, type and param)."""

    def __init__(self, model: str, *, no_access: bool = False) -> None:
        # `no_access`: served, but not to this tenant (OpenAI's words for a key's model).
        tail = " or you do not have access to it." if no_access else "."
        super().__init__(
            f"The model `{model}` does not exist{tail}",
            status=404,
            code="model_not_found",
            param="model",
        )

    @property
    def error_type(self) -> str:
        return "NotFoundError"


def prepare_for_path(
    path: str,
    body: bytes,
    model: PromptModel,
    check_model: CheckModel,
    request_id: str,
    history: list[Any],
) -> tuple[GeneratePlan, str | None]:
    """The plan of a generation path's body, and the body's `user` (a sticky-session key for
    consistent_hash). `history`: the stored turns a Responses body continues."""
    if path in IMAGE_PATHS:
        return prepare_decoded(decode_chat(path, body, check_model, history), model, request_id, ())
    if path == "/v1/completions":
        completion = decode_completion_request(body)
        check_model(completion.model)
        plan = prepare_completion(completion, model, request_id=request_id)
        return plan, completion.user
    if path == "/generate":
        generate = decode_generate_request(body)
        check_model(generate.model)
        return prepare_generate(generate, model, request_id=generate.rid or request_id), None
    if path == TOKENS_GENERATE_PATH:
        tokens = decode_tokens_generate(body)
        check_model(tokens.model)
        return prepare_tokens_generate(tokens, model, request_id=request_id), None
    raise ClientError(f"unknown path {path!r}", status=404, code="not_found", param="path")


IMAGE_PATHS: Final = (CHAT_PATH, MESSAGES_PATH, RESPONSES_PATH)
"""The paths whose requests may carry images (request/images.py resolves them)."""


@dataclass(frozen=True)
class DecodedChat:
    """An image path's body decoded, its model checked, and the chat request it says (whose
    image parts are resolved before `prepare_decoded`)."""

    path: str
    request: oa.ChatCompletionRequest | an.MessagesRequest | ResponsesRequest
    chat: oa.ChatCompletionRequest
    history: list[Any]


def decode_chat(path: str, body: bytes, check_model: CheckModel, history: list[Any]) -> DecodedChat:
    """The first half of an image path: decoded, before its images are resolved."""
    if path == CHAT_PATH:
        chat = decode_chat_request(body)
        check_model(chat.model)
        return DecodedChat(path, chat, chat, history)
    if path == MESSAGES_PATH:
        messages = decode_messages_request(body)
        check_model(messages.model)
        return DecodedChat(path, messages, chat_request_of(messages), history)
    if path == RESPONSES_PATH:
        responses = decode_responses_request(body)
        check_model(responses.model)
        try:
            _, _, chat = responses_chat(responses, history)
        except ClientError as error:
            error.param = responses_param(error.param)
            raise
        return DecodedChat(path, responses, chat, history)
    raise ClientError(f"{path!r} takes no images", status=404, code="not_found", param="path")


def prepare_decoded(
    decoded: DecodedChat,
    model: PromptModel,
    request_id: str,
    images: Sequence[ProcessedImage],
) -> tuple[GeneratePlan, str | None]:
    """The second half: the decoded request's plan, with its images processed."""
    now = dt.datetime.now(dt.UTC)
    request = decoded.request
    if isinstance(request, an.MessagesRequest):
        plan = prepare_messages(request, model, request_id=request_id, now=now, images=images)
        return plan, None if request.metadata is None else request.metadata.user_id
    if isinstance(request, ResponsesRequest):
        plan = prepare_responses(
            request, decoded.history, model, request_id=request_id, now=now, images=images
        )
        return plan, request.user
    plan = prepare_chat_completion(request, model, request_id=request_id, now=now, images=images)
    return plan, request.user


def decode_tokenize(body: bytes, check_model: CheckModel) -> TokenizeRequest:
    """/v1/tokenize's body decoded and its model checked (its images resolved after)."""
    tokenize = decode_tokenize_request(body)
    check_model(tokenize.model)
    return tokenize


def decode_count_tokens(body: bytes, check_model: CheckModel) -> an.CountTokensRequest:
    """/v1/messages/count_tokens' body decoded and its model checked (images resolved after)."""
    count = decode_count_tokens_request(body)
    check_model(count.model)
    return count


def count_tokens_answer(
    count: an.CountTokensRequest, model: PromptModel, images: Sequence[ProcessedImage]
) -> bytes:
    return count_tokens_body(count, model, now=dt.datetime.now(dt.UTC), images=images)


def tokenize_answer(
    tokenize: TokenizeRequest,
    model: PromptModel,
    tokenizer: TokenNames,
    images: Sequence[ProcessedImage],
) -> bytes:
    return tokenize_body(tokenize, model, tokenizer, now=dt.datetime.now(dt.UTC), images=images)


def token_answer(
    path: str, body: bytes, model: PromptModel, tokenizer: TokenNames, check_model: CheckModel
) -> bytes:
    """The whole answer of a token path's body."""
    if path == COUNT_TOKENS_PATH:
        count = decode_count_tokens_request(body)
        check_model(count.model)
        return count_tokens_body(count, model, now=dt.datetime.now(dt.UTC))
    if path in TOKENIZE_PATHS:
        tokenize = decode_tokenize_request(body)
        check_model(tokenize.model)
        return tokenize_body(tokenize, model, tokenizer, now=dt.datetime.now(dt.UTC))
    if path in DETOKENIZE_PATHS:
        detokenize = decode_detokenize_request(body)
        check_model(detokenize.model)
        return detokenize_body(detokenize, model)
    raise ClientError(f"unknown path {path!r}", status=404, code="not_found", param="path")
