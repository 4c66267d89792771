"""Pure. One renderer per client endpoint behind one protocol; a request picks its own once.

`ResponseAssembler` decides WHEN a choice opens, gets text or finishes; its `EndpointRenderer`
(`core/renderer_vocabulary.py`) decides what that looks like for the request's endpoint: chat
and completions (`openai_rendering`), /generate (`generate_rendering`), vLLM's /inference/v1/generate (`tokens_generate`), Responses
(`responses_rendering`) and Messages (`anthropic_rendering`). The assembler never looks at the
endpoint again after `renderer_for`.

Logprobs arrive as the positions the assembler released with a piece of text (or, for tokens
whose text went out earlier, with the finish); the renderer formats them (`core.logprobs`).
"""

from __future__ import annotations

from typing import assert_never

from smg_trio.core.anthropic_rendering import MessagesRenderer, message_id
from smg_trio.core.generate_rendering import GenerateRenderer
from smg_trio.core.openai_rendering import ChatRenderer, CompletionRenderer
from smg_trio.core.plan import GeneratePlan
from smg_trio.core.renderer_vocabulary import EndpointRenderer
from smg_trio.core.responses_rendering import ResponsesRenderer
from smg_trio.core.tokenizer import TokenizerLike
from smg_trio.core.tokens_generate import RESPONSE_ID_PREFIX, TokensRenderer
from smg_trio.neutral.runtime import Endpoint


def response_id(plan: GeneratePlan) -> str:
    """The id clients see: OpenAI's prefixes for chat and completions, the rid for /generate."""
    match plan.endpoint:
        case Endpoint.CHAT:
            return f"chatcmpl-{plan.request_id}"
        case Endpoint.COMPLETION:
            return f"cmpl-{plan.request_id}"
        case Endpoint.GENERATE:
            return plan.request_id
        case Endpoint.RESPONSES:
            return f"resp_{plan.request_id}"
        case Endpoint.MESSAGES:
            return message_id(plan.request_id)
        case Endpoint.TOKENS:
            return RESPONSE_ID_PREFIX + plan.request_id
        case _:
            assert_never(plan.endpoint)


def renderer_for(plan: GeneratePlan, tokenizer: TokenizerLike, *, created: int) -> EndpointRenderer:
    """The renderer of `plan`'s endpoint, for the whole request."""
    rid = response_id(plan)
    match plan.endpoint:
        case Endpoint.CHAT:
            return ChatRenderer(plan, tokenizer, rid, created)
        case Endpoint.COMPLETION:
            return CompletionRenderer(plan, tokenizer, rid, created)
        case Endpoint.GENERATE:
            return GenerateRenderer(plan, tokenizer, rid)
        case Endpoint.RESPONSES:
            return ResponsesRenderer(plan, tokenizer, rid, created)
        case Endpoint.MESSAGES:
            return MessagesRenderer(plan, tokenizer, rid, created)
        case Endpoint.TOKENS:
            return TokensRenderer(plan, rid, created)
        case _:
            assert_never(plan.endpoint)
