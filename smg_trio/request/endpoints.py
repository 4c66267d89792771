"""Pure. The POST paths the gateway serves, and what each does with a request body: decoded
and prepared into a `GeneratePlan` (the generation paths of every client API,
docs/client-apis.md), or answered whole without an engine (the token paths).

`Gateway.handle` calls these, inline or on a worker thread for large bodies; adding an API is
a path here, a decoder, a preparation and a renderer (docs/client-apis.md).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any, Final

from smg_trio.core.anthropic_request import (
    COUNT_TOKENS_PATH,
    MESSAGES_PATH,
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
from smg_trio.core.responses_request import prepare_responses
from smg_trio.core.tokenize import TokenNames, detokenize_body, tokenize_body
from smg_trio.errors import ClientError
from smg_trio.wire import openai as oa
from smg_trio.wire.openai_decode import (
    decode_chat_request,
    decode_completion_request,
    decode_generate_request,
)
from smg_trio.wire.openai_tokenize import decode_detokenize_request, decode_tokenize_request
from smg_trio.wire.responses_api import decode_responses_request

CheckModel = Callable[[str | None], None]
"""Raises the 404 for a `model` that is none of the served names."""

RESPONSES_PATH: Final = "/v1/responses"
CHAT_PATH: Final = "/v1/chat/completions"
GENERATE_PATHS: Final = (
    CHAT_PATH,
    "/v1/completions",
    "/generate",
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
HANDLED_PATHS: Final = (*GENERATE_PATHS, *TOKEN_PATHS)


class ModelNotFound(ClientError):
    """A `model` that is none of the served names: vLLM's 404 (message, type and param)."""

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model `{model}` does not exist.",
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
    if path == CHAT_PATH:
        return prepare_decoded_chat(decode_chat(body, check_model), model, request_id, ())
    if path == "/v1/completions":
        completion = decode_completion_request(body)
        check_model(completion.model)
        plan = prepare_completion(completion, model, request_id=request_id)
        return plan, completion.user
    if path == "/generate":
        generate = decode_generate_request(body)
        check_model(generate.model)
        return prepare_generate(generate, model, request_id=generate.rid or request_id), None
    if path == RESPONSES_PATH:
        responses = decode_responses_request(body)
        check_model(responses.model)
        now = dt.datetime.now(dt.UTC)
        plan = prepare_responses(responses, history, model, request_id=request_id, now=now)
        return plan, responses.user
    if path == MESSAGES_PATH:  # Anthropic (docs/client-apis.md §2)
        messages = decode_messages_request(body)
        check_model(messages.model)
        now = dt.datetime.now(dt.UTC)
        plan = prepare_messages(messages, model, request_id=request_id, now=now)
        return plan, None if messages.metadata is None else messages.metadata.user_id
    raise ClientError(f"unknown path {path!r}", status=404, code="not_found", param="path")


def decode_chat(body: bytes, check_model: CheckModel) -> oa.ChatCompletionRequest:
    """A chat body decoded and its model checked: the first half of the chat path, before
    its images are resolved (request/images.py)."""
    chat = decode_chat_request(body)
    check_model(chat.model)
    return chat


def prepare_decoded_chat(
    chat: oa.ChatCompletionRequest,
    model: PromptModel,
    request_id: str,
    images: Sequence[ProcessedImage],
) -> tuple[GeneratePlan, str | None]:
    """The second half: a decoded chat request's plan, with its images processed."""
    now = dt.datetime.now(dt.UTC)
    plan = prepare_chat_completion(chat, model, request_id=request_id, now=now, images=images)
    return plan, chat.user


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
