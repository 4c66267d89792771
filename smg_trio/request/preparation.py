"""I/O. A request body made ready for `Gateway.handle`, off the event loop when it is large.

`prompt_model_for` is the model as preparation sees it, with the server's parsers. A generation
path's body becomes its plan (`endpoints.prepare_for_path`; a Responses
body after the stored turn it continues is read, `ResponsesService.history`); a token path's
body becomes its whole answer (`endpoints.token_answer`).

- Bodies up to `INLINE_PREPARE_MAX_BYTES` are prepared inline: a thread hop costs more than a
  short prompt's templating and tokenizing (docs/performance.md §3). Larger ones are prepared on
  a worker thread (`trio.to_thread`), so a huge prompt cannot stall every other stream on the
  event loop (docs/ecosystem.md §5).
- A client error raised on the worker thread comes back without its traceback, which would
  otherwise hold the request's body and prompt until the cycle collector ran (docs/limits.md
  §2).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Final, TypeVar

import msgspec
import trio

from smg_trio.core.anthropic_request import COUNT_TOKENS_PATH, chat_request_of
from smg_trio.core.frontend_options import DEFAULT_FRONTEND, FrontendOptions
from smg_trio.core.harmony_prompt import harmony_stop_ids
from smg_trio.core.images import chat_image_refs
from smg_trio.core.parsers.registry import uses_harmony
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.prepare import PromptModel
from smg_trio.core.tokenize import TokenNames
from smg_trio.errors import GatewayError
from smg_trio.model.folder import ModelDir
from smg_trio.request.endpoints import (
    IMAGE_PATHS,
    RESPONSES_PATH,
    TOKENIZE_PATHS,
    CheckModel,
    count_tokens_answer,
    decode_chat,
    decode_count_tokens,
    decode_tokenize,
    prepare_decoded,
    prepare_for_path,
    token_answer,
    tokenize_answer,
)
from smg_trio.request.images import ImageInputs
from smg_trio.responses.store.service import ResponsesService
from smg_trio.wire.openai_tokenize import TokenizeChatRequest

_T = TypeVar("_T")

# Prompts longer than this are templated and tokenized on a worker thread, so a huge prompt
# cannot stall every other stream on the event loop; short ones are cheaper inline.
INLINE_PREPARE_MAX_BYTES: Final = 16 * 1024


def prompt_model_for(
    model: ModelDir,
    tool_call_parser: str | None,
    reasoning_parser: str | None,
    stream_interval: int,
    frontend: FrontendOptions = DEFAULT_FRONTEND,
) -> PromptModel:
    """`model`'s `PromptModel` with the parsers, the stream interval and the answer options
    the server was given; with gpt-oss's parsers, the Harmony stop ids too."""
    return msgspec.structs.replace(
        model.prompt_model(),
        tool_call_parser=tool_call_parser,
        reasoning_parser=reasoning_parser,
        harmony_stop_ids=(
            harmony_stop_ids(model.tokenizer)
            if uses_harmony(tool_call_parser, reasoning_parser)
            else ()
        ),
        stream_interval=stream_interval,
        frontend=frontend,
    )


async def prepare_request(
    path: str,
    body: bytes,
    request_id: str,
    model: PromptModel,
    check_model: CheckModel,
    service: ResponsesService,
    images: ImageInputs | None = None,
) -> tuple[GeneratePlan, str | None]:
    """The plan of a generation path's body and the body's `user` (`prepare_for_path`).
    A chat body's images are resolved between its decoding and its preparation."""
    # /v1/responses: the stored turn it continues, read before preparing.
    history = await service.history(body) if path == RESPONSES_PATH else []
    if path in IMAGE_PATHS and images is not None:
        decoded = await off_loop_if_large(
            partial(decode_chat, path, body, check_model, history), body
        )
        processed = await images.resolve(
            chat_image_refs(decoded.chat), decoded.chat.mm_processor_kwargs
        )
        return await off_loop_if_large(
            partial(prepare_decoded, decoded, model, request_id, processed), body
        )
    return await off_loop_if_large(
        partial(prepare_for_path, path, body, model, check_model, request_id, history),
        body,
    )


async def answer_token_request(
    path: str,
    body: bytes,
    model: PromptModel,
    tokenizer: TokenNames,
    check_model: CheckModel,
    images: ImageInputs | None = None,
) -> bytes:
    """The whole answer of a token path's body (`token_answer`); /v1/tokenize's chat form and
    /v1/messages/count_tokens have their images resolved between decoding and counting."""
    if path == COUNT_TOKENS_PATH and images is not None:
        count = await off_loop_if_large(partial(decode_count_tokens, body, check_model), body)
        processed = await images.resolve(chat_image_refs(chat_request_of(count)))
        return await off_loop_if_large(partial(count_tokens_answer, count, model, processed), body)
    if path in TOKENIZE_PATHS and images is not None:
        tokenize = await off_loop_if_large(partial(decode_tokenize, body, check_model), body)
        if isinstance(tokenize, TokenizeChatRequest):  # with its mm_processor_kwargs, as chat
            processed = await images.resolve(
                chat_image_refs(tokenize.chat), tokenize.chat.mm_processor_kwargs
            )
        else:
            processed = ()
        return await off_loop_if_large(
            partial(tokenize_answer, tokenize, model, tokenizer, processed), body
        )
    return await off_loop_if_large(
        partial(token_answer, path, body, model, tokenizer, check_model), body
    )


async def off_loop_if_large(work: Callable[[], _T], body: bytes) -> _T:
    if len(body) <= INLINE_PREPARE_MAX_BYTES:
        return work()
    try:
        return await trio.to_thread.run_sync(work)
    except GatewayError as error:
        # trio's thread hand-off keeps the error in a reference cycle with the frames of
        # its traceback, and those frames hold the decoded body, the templated prompt and
        # this request's body until the cycle collector runs, which under a lull is never:
        # 16 rejected 8 MB prompts held 400 MB (docs/limits.md §2). A client error needs
        # no traceback; dropping it frees all of that now.
        raise error.with_traceback(None) from None
