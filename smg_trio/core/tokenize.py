"""Pure. /v1/tokenize and /v1/detokenize: the prompt ids the gateway would send, and back.

Tokenize builds its ids with the very functions generation uses (`prepare.chat_prompt_ids` for
the chat form, the tokenizer's `encode` with special tokens for a prompt, as
`prepare_completion` does), so the ids it returns are exactly what an engine would be sent for
the same chat or completions request. Shapes are vLLM's (wire/openai_tokenize.py); `token_strs`
are the vocabulary's token strings, as vLLM's `convert_ids_to_tokens` gives them.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Protocol

from smg_trio.core.images import ProcessedImage
from smg_trio.core.prepare import PromptModel, chat_prompt, checked_prompt_ids
from smg_trio.wire.openai_responses import JSON_ENCODER
from smg_trio.wire.openai_tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeChatRequest,
    TokenizePromptRequest,
    TokenizeRequest,
    TokenizeResponse,
)


class TokenNames(Protocol):
    """The vocabulary's own string for an id (`hf_tokenizer.ModelTokenizer` has it)."""

    def id_to_token(self, token_id: int) -> str | None: ...


def tokenize_body(
    req: TokenizeRequest,
    model: PromptModel,
    names: TokenNames,
    *,
    now: _dt.datetime,
    images: Sequence[ProcessedImage] = (),
) -> bytes:
    """`images`: the chat form's image parts processed, in order (their placeholders are
    expanded and counted as vLLM counts them)."""
    match req:
        case TokenizeChatRequest(chat=chat):
            ids, _ = chat_prompt(
                chat, model, now=now, add_special_tokens=req.add_special_tokens, images=images
            )
        case TokenizePromptRequest(prompt=prompt):
            encoded = model.tokenizer.encode(prompt, add_special_tokens=req.add_special_tokens)
            ids = tuple(encoded)
    strs = tuple(_token_str(names, i) for i in ids) if req.return_token_strs else None
    return JSON_ENCODER.encode(
        TokenizeResponse(
            count=len(ids), max_model_len=model.context_length, tokens=ids, token_strs=strs
        )
    )


def detokenize_body(req: DetokenizeRequest, model: PromptModel) -> bytes:
    ids: Sequence[int] = checked_prompt_ids(req.tokens, model.vocab_size, "tokens")
    text = model.tokenizer.decode(ids, skip_special_tokens=False)
    return JSON_ENCODER.encode(DetokenizeResponse(prompt=text))


def _token_str(names: TokenNames, token_id: int) -> str:
    name = names.id_to_token(token_id)
    return "" if name is None else name
