"""Pure. What the server's flags say about every answer it renders (vLLM's `--response-role`,
`--return-tokens-as-token-ids`, `--enable-prompt-tokens-details`; `smg-trio serve` takes the
same options: docs/vllm-frontend.md §2, docs/request-fields.md §1).

Built once at startup and carried by each model's `PromptModel`; `prepare` copies what a
request needs onto its `GeneratePlan` (a request's own `return_tokens_as_token_ids` wins).
"""

from __future__ import annotations

from typing import Final

import msgspec
from msgspec import UNSET

from smg_trio.core.plan import GeneratePlan
from smg_trio.neutral.runtime import Endpoint
from smg_trio.wire.openai_responses import PromptTokensDetails, Usage

DEFAULT_RESPONSE_ROLE: Final = "assistant"


class AnswerOptions(msgspec.Struct, frozen=True, kw_only=True):
    # The chat reply's role when the prompt ends with the generation prompt (vLLM's
    # --response-role); without one the reply speaks as the last message does.
    response_role: str = DEFAULT_RESPONSE_ROLE
    # Logprob tokens as `token_id:N` (vLLM's --return-tokens-as-token-ids): chat, completions.
    return_tokens_as_token_ids: bool = False
    # usage.prompt_tokens_details on every chat and completions answer, 0 cached included
    # (vLLM's --enable-prompt-tokens-details); off: only when the engine reported cached tokens.
    prompt_tokens_details: bool = False


DEFAULT_ANSWERS: Final = AnswerOptions()


def usage_with_details(plan: GeneratePlan, usage: Usage, cached: int, created: int | None) -> Usage:
    """`usage` as vLLM's server reports it with --enable-prompt-tokens-details (`plan` asks
    for it): chat always names the cached tokens (0 included), the tokens the engine wrote to
    its prefix cache and the prompt's tokens per modality (null when none); completions the
    cached tokens, with the other two null in a full answer and left out of a stream's."""
    if not plan.prompt_tokens_details:
        return usage
    if plan.endpoint is Endpoint.CHAT:
        media: dict[str, int] = {}
        for feature in plan.media:
            media[feature.modality] = media.get(feature.modality, 0) + feature.length
        details = PromptTokensDetails(cached, created, media or None)
    elif plan.endpoint is Endpoint.COMPLETION:
        details = PromptTokensDetails(cached, *((UNSET, UNSET) if plan.stream else (None, None)))
    else:
        return usage
    return msgspec.structs.replace(usage, prompt_tokens_details=details)
