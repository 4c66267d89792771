"""Pure. What vLLM's front-end flags say about every chat and completions request: how its chat
prompt is rendered (`--chat-template-content-format`, `--default-chat-template-kwargs`,
`--exclude-tools-when-tool-choice-none`) and how its answer is shaped (`--response-role`,
`--return-tokens-as-token-ids`, `--enable-prompt-tokens-details`,
`--enable-force-include-usage`). `smg-trio serve` takes the same options (docs/vllm-frontend.md
§2, docs/request-fields.md §1).

Built once at startup and carried by each model's `PromptModel`; `prepare` applies them to a
request and copies what its answer needs onto its `GeneratePlan` (a request's own
`return_tokens_as_token_ids` and `chat_template_kwargs` win).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from smg_trio.core.plan import GeneratePlan
from smg_trio.core.template_content_format import ContentFormatFlag
from smg_trio.errors import ClientError
from smg_trio.neutral.runtime import Endpoint
from smg_trio.wire import openai as oa
from smg_trio.wire.openai_responses import PromptTokensDetails, Usage

DEFAULT_RESPONSE_ROLE: Final = "assistant"


class FrontendOptions(msgspec.Struct, frozen=True, kw_only=True):
    # The chat reply's role when the prompt ends with the generation prompt (vLLM's
    # --response-role); without one the reply speaks as the last message does.
    response_role: str = DEFAULT_RESPONSE_ROLE
    # Logprob tokens as `token_id:N` (vLLM's --return-tokens-as-token-ids): chat, completions.
    return_tokens_as_token_ids: bool = False
    # usage.prompt_tokens_details on every chat and completions answer, 0 cached included
    # (vLLM's --enable-prompt-tokens-details); off: only when the engine reported cached tokens.
    prompt_tokens_details: bool = False
    # How a message's content reaches the chat template (template_content_format.py).
    content_format: ContentFormatFlag = "auto"
    # Template variables every chat request gets unless its chat_template_kwargs say otherwise
    # (vLLM's --default-chat-template-kwargs).
    default_chat_template_kwargs: dict[str, Any] | None = None
    # tool_choice "none": the tools are not shown to the template (vLLM's
    # --exclude-tools-when-tool-choice-none).
    exclude_tools_when_tool_choice_none: bool = False
    # A request's own `chat_template` (or chat_template_kwargs.chat_template) is rendered; else
    # it is a 400 (vLLM's --trust-request-chat-template).
    trust_request_chat_template: bool = False
    # Every stream carries usage: on each chunk and in a closing chunk, asked or not (vLLM's
    # --enable-force-include-usage).
    force_include_usage: bool = False


DEFAULT_FRONTEND: Final = FrontendOptions()


def usage_with_details(plan: GeneratePlan, usage: Usage, cached: int, created: int | None) -> Usage:
    """`usage` as vLLM's server reports it with --enable-prompt-tokens-details (`plan` asks
    for it): chat always names the cached tokens (0 included), the tokens the engine wrote to
    its prefix cache and the prompt's tokens per modality; completions the cached tokens only.
    A full answer writes what is unknown or absent as null; a stream's usage leaves it out
    (measured against vLLM 0.32: tests/e2e/test_real_vllm_frontend_options.py)."""
    if not plan.prompt_tokens_details:
        return usage
    created_field: int | UnsetType | None = None
    media_field: dict[str, int] | UnsetType | None = None
    if plan.endpoint is Endpoint.CHAT:
        media: dict[str, int] = {}
        for feature in plan.media:
            media[feature.modality] = media.get(feature.modality, 0) + feature.length
        created_field, media_field = created, media or None
    elif plan.endpoint is not Endpoint.COMPLETION:
        return usage
    if plan.stream:
        created_field = UNSET if created_field is None else created_field
        media_field = UNSET if media_field is None else media_field
    details = PromptTokensDetails(cached, created_field, media_field)
    return msgspec.structs.replace(usage, prompt_tokens_details=details)


UNTRUSTED_TEMPLATE: Final = (
    "Chat template is passed with request, but --trust-request-chat-template is not set. "
    "Refused request with untrusted chat template."
)


def templated_request(
    req: oa.ChatCompletionRequest, options: FrontendOptions
) -> oa.ChatCompletionRequest:
    """`req` as the chat template is to see it under the server's flags, as vLLM's server
    applies them: its `chat_template_kwargs` over the server's defaults (the request's win),
    no tools with `tool_choice: "none"` when the server excludes them; a template of its own
    is a 400 (vLLM's words) unless the server trusts request templates."""
    kwargs = req.chat_template_kwargs or {}
    own = req.chat_template is not None or kwargs.get("chat_template") is not None
    if own and not options.trust_request_chat_template:
        param = "chat_template" if req.chat_template is not None else "chat_template_kwargs"
        raise ClientError(UNTRUSTED_TEMPLATE, param=param)
    changes: dict[str, Any] = {}
    if options.default_chat_template_kwargs:
        changes["chat_template_kwargs"] = {**options.default_chat_template_kwargs, **kwargs}
    if options.exclude_tools_when_tool_choice_none and req.tool_choice == "none" and req.tools:
        changes["tools"] = None
    return msgspec.structs.replace(req, **changes) if changes else req
