"""Pure. Hugging Face chat templates, rendered with minijinja the way transformers renders them.

transformers renders with a sandboxed jinja2 environment (trim_blocks, lstrip_blocks, loop
controls), overrides `tojson` (no HTML escaping, no key sorting, non-ASCII kept) and adds the
globals `raise_exception` and `strftime_now`. We do the same on minijinja, which renders 3-4x
faster and compiles ~200x faster with byte-identical output (tests keep jinja2 as the oracle).
The `{% generation %}` training-mask tag is stripped: neither engine knows it, and it only marks
spans for training losses. Rendering is fuel-limited so a hostile template cannot spin forever.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import minijinja
import msgspec

from smg_trio.core.template_content_format import (
    ContentFormat,
    content_for_template,
    detected_content_format,
)
from smg_trio.errors import ClientError, ConfigError
from smg_trio.wire import openai as oa

TEMPLATE_FUEL = 5_000_000  # minijinja instructions per render; ~100x a large real render
_GENERATION_TAG = re.compile(r"{%-?\s*(?:end)?generation\s*-?%}")


class TemplateRaised(Exception):
    """A template called `raise_exception(message)`: the request is at fault."""


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def _tojson(
    value: Any,
    indent: int | None = None,
    separators: Sequence[str] | None = None,
    sort_keys: bool = False,
) -> str:
    seps = tuple(separators) if separators is not None else None
    return json.dumps(
        value,
        ensure_ascii=False,
        indent=indent,
        separators=seps,  # type: ignore[arg-type]
        sort_keys=sort_keys,
    )


class ChatTemplate:
    """One compiled chat template plus the special-token variables it may reference."""

    def __init__(self, source: str, *, special_tokens: Mapping[str, str | None]) -> None:
        self._special_tokens = {k: v for k, v in special_tokens.items() if v is not None}
        # vLLM renders a `developer` message as `system` for templates with no developer role.
        self.has_developer_role = "developer" in source
        # How it takes a message's content, as vLLM's `auto` decides (template_content_format.py).
        self.content_format = detected_content_format(source)
        self._env = minijinja.Environment(
            trim_blocks=True,
            lstrip_blocks=True,
            fuel=TEMPLATE_FUEL,
            globals={"raise_exception": _raise_exception},
            filters={"tojson": _tojson},
        )
        try:
            self._env.add_template("chat", _GENERATION_TAG.sub("", source))
        except minijinja.TemplateError as exc:
            raise ConfigError(f"the chat template does not compile: {exc}") from exc

    @property
    def special_tokens(self) -> Mapping[str, str]:
        return self._special_tokens

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool,
        now: _dt.datetime,
        tools: Sequence[Mapping[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """Render like transformers' apply_chat_template(tokenize=False).

        `now` feeds `strftime_now` (the caller owns the clock). `extra` carries the client's
        chat_template_kwargs; it cannot override messages, tools or special tokens.
        """
        context: dict[str, Any] = dict(extra or {})
        context.update(self._special_tokens)
        context["messages"] = list(messages)
        context["add_generation_prompt"] = add_generation_prompt
        context["strftime_now"] = now.strftime  # per render: renders may run on worker threads
        if tools is not None:
            context["tools"] = list(tools)
        try:
            return self._env.render_template("chat", **context)
        except TemplateRaised as exc:
            raise ClientError(str(exc), param="messages") from exc
        except minijinja.TemplateError as exc:
            # str(exc) quotes the template's source around the failure: the operator's template
            # is not the client's business, so only the error's kind, line and detail go out.
            raise ClientError(
                f"the chat template failed to render ({exc.kind}, line {exc.line}): "
                f"{exc.detail or 'no detail'}",
                param="messages",
            ) from exc


def request_template(source: str, model_template: ChatTemplate | None) -> ChatTemplate:
    """A request's own `chat_template` (vLLM's, with --trust-request-chat-template), compiled
    with the model's special tokens; one that does not compile is a 400 naming it."""
    special = {} if model_template is None else model_template.special_tokens
    try:
        return ChatTemplate(source, special_tokens=special)
    except ConfigError as exc:
        raise ClientError(str(exc), param="chat_template") from exc


def template_tool_calls(message: dict[str, Any]) -> None:
    """An assistant message's `tool_calls` as templates take them, by vLLM's rule: each call's
    `arguments` JSON string becomes the object it encodes (templates apply `tojson` to it), one
    that is not a JSON object becomes `{}` (a bad turn in the history must not fail every later
    request), and an empty list is dropped (docs/tools-and-reasoning.md §5)."""
    calls = message.get("tool_calls")
    if not calls:
        message.pop("tool_calls", None)
        return
    for call in calls:
        function = call["function"]
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (ValueError, RecursionError):
            arguments = {}
        function["arguments"] = arguments if isinstance(arguments, dict) else {}


def cut_after_final_message(text: str, final: dict[str, Any]) -> str:
    """continue_final_message: drop what the template wrote after the last message's content."""
    content = final.get("content")
    if isinstance(content, list):  # the openai form: its last text, as transformers takes it
        content = next((p["text"] for p in reversed(content) if p.get("type") == "text"), None)
    if not isinstance(content, str) or not content:
        raise ClientError(
            "continue_final_message needs a final message with text content", param="messages"
        )
    at = text.rfind(content)
    if at < 0:
        raise ClientError(
            "continue_final_message: the template does not reproduce the final message verbatim",
            param="messages",
        )
    return text[: at + len(content)]


def template_messages(
    req: oa.ChatCompletionRequest,
    *,
    developer_role: bool,
    form: ContentFormat = "string",
    placeholder: str | None = None,
) -> list[Any]:
    """A chat request's messages as transformers templates (and the Harmony renderer) take them,
    their content in `form` (`placeholder`: what stands for an image; core/template_content_format.py)."""
    return [
        message_for_template(
            m, i, developer_role=developer_role, form=form, placeholder=placeholder
        )
        for i, m in enumerate(req.messages)
    ]


def message_for_template(
    message: oa.ChatMessage,
    index: int,
    *,
    developer_role: bool,
    form: ContentFormat = "string",
    placeholder: str | None = None,
) -> dict[str, Any]:
    """A message as transformers templates expect it, as vLLM renders them: its content in
    `form`, and a `developer` message a `system` one unless the template knows the developer
    role."""
    out: dict[str, Any] = {
        key: value for key, value in msgspec.to_builtins(message).items() if value is not None
    }
    if not developer_role and out["role"] == "developer":
        out["role"] = "system"
    if out["role"] == "assistant":
        template_tool_calls(out)
    out["content"] = content_for_template(
        getattr(message, "content", None),
        index,
        form=form,
        role=out["role"],
        placeholder=placeholder,
    )
    return out
