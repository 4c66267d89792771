"""Pure. A chat request's prompt ids: the template's rendering (or gpt-oss's Harmony), encoded,
with its images' placeholders expanded first and their spans located after (core/images.py).

The one place chat prompts are built: generation (core/prepare.py), /v1/tokenize and
/v1/messages/count_tokens all take their ids from here, so the counts equal what is sent.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence

import msgspec

from smg_trio.core.chat_template import (
    cut_after_final_message,
    request_template,
    template_messages,
)
from smg_trio.core.frontend_options import templated_request
from smg_trio.core.harmony_prompt import harmony_chat_text
from smg_trio.core.images import ProcessedImage, chat_image_refs, expand_placeholders, place_images
from smg_trio.core.prompt_bound import PromptLimit, bounded_encode
from smg_trio.core.prompt_model import PromptModel
from smg_trio.errors import ClientError
from smg_trio.neutral.media import MediaFeature
from smg_trio.wire import openai as oa


def chat_prompt_ids(
    req: oa.ChatCompletionRequest,
    model: PromptModel,
    *,
    now: _dt.datetime,
    add_special_tokens: bool = False,
    limit: PromptLimit | None = None,
) -> tuple[int, ...]:
    """The prompt ids of a chat request without images (`chat_prompt`)."""
    ids, _ = chat_prompt(
        req, model, now=now, add_special_tokens=add_special_tokens, limit=limit, images=()
    )
    return ids


def chat_prompt(
    req: oa.ChatCompletionRequest,
    model: PromptModel,
    *,
    now: _dt.datetime,
    add_special_tokens: bool = False,
    limit: PromptLimit | None = None,
    images: Sequence[ProcessedImage] = (),
) -> tuple[tuple[int, ...], tuple[MediaFeature, ...]]:
    """The prompt ids of a chat request: its messages templated, then encoded; with its
    images' placeholders expanded first and their spans located after (core/images.py).

    The one place chat prompts are built: `prepare_chat` sends these to the engine and
    /v1/tokenize returns them (`add_special_tokens` is tokenize's option; chat never adds).
    `limit` bounds the encoding (prompt_bound); /v1/tokenize, like vLLM's, has none. An
    image part without its processed image is a 400 naming it (where images are not taken).
    """
    req = templated_request(req, model.frontend)  # idempotent: prepare_chat applied it too
    refs = chat_image_refs(req)
    if len(refs) != len(images):
        param = refs[0].param if refs else "messages"
        raise ClientError(
            f"{param}: images are not taken on this path",
            code="multimodal_not_supported",
            param=param,
        )
    if not images:
        return _chat_text_ids(req, model, now, add_special_tokens, limit), ()
    if model.harmony_stop_ids:
        raise ClientError(
            f"{refs[0].param}: gpt-oss takes text only",
            code="multimodal_not_supported",
            param=refs[0].param,
        )
    placeholder = images[0].placeholder
    text = expand_placeholders(
        _chat_text(req, model, now, placeholder), placeholder, images, "messages"
    )
    ids = bounded_encode(model.tokenizer, text, add_special_tokens=add_special_tokens, limit=limit)
    return ids, place_images(ids, images, model.tokenizer, "messages")


def _chat_text_ids(
    req: oa.ChatCompletionRequest,
    model: PromptModel,
    now: _dt.datetime,
    add_special_tokens: bool,
    limit: PromptLimit | None,
) -> tuple[int, ...]:
    if model.harmony_stop_ids:  # gpt-oss: Harmony instead of the chat template
        text = harmony_chat_text(req, template_messages(req, developer_role=True), now=now)
        return bounded_encode(
            model.tokenizer, text, add_special_tokens=add_special_tokens, limit=limit
        )
    text = _chat_text(req, model, now)
    return bounded_encode(model.tokenizer, text, add_special_tokens=add_special_tokens, limit=limit)


def _chat_text(
    req: oa.ChatCompletionRequest,
    model: PromptModel,
    now: _dt.datetime,
    placeholder: str | None = None,
) -> str:
    """The chat template's rendering of `req` (continue_final_message applied), its messages'
    content in the form the server's `--chat-template-content-format` names, else the template's
    own (`placeholder`: what stands for an image, when the request has images)."""
    template = model.chat_template
    if req.chat_template is not None:  # trusted: templated_request refused it otherwise
        template = request_template(req.chat_template, template)
    if template is None:
        raise ClientError(
            f"model {model.name!r} has no chat template; use /v1/completions", param="messages"
        )
    flag = model.frontend.content_format
    form = template.content_format if flag == "auto" else flag
    messages = template_messages(
        req, developer_role=template.has_developer_role, form=form, placeholder=placeholder
    )
    tools = [msgspec.to_builtins(t) for t in req.tools] if req.tools else None
    extra = dict(req.chat_template_kwargs or {})
    extra.pop("chat_template", None)  # vLLM: the template itself, never one of its variables
    if req.reasoning_effort is not None:
        # vLLM hands reasoning_effort to the template (request-fields.md §3); the client's own
        # chat_template_kwargs win.
        extra.setdefault("reasoning_effort", req.reasoning_effort)
    text = template.render(
        messages,
        add_generation_prompt=req.add_generation_prompt,
        now=now,
        tools=tools,
        extra=extra or None,
    )
    if req.continue_final_message:
        text = cut_after_final_message(text, messages[-1])
    return text
