"""I/O (startup). The flags of `smg-trio serve` that shape every chat prompt, answer and request
log line, by vLLM's names (docs/vllm-frontend.md §2 maps vLLM's own onto them):
`--response-role`, `--return-tokens-as-token-ids`, `--enable-prompt-tokens-details`,
`--max-log-len`, `--chat-template-content-format`; and the `FrontendOptions` and content format
the gateway is built with.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from smg_trio.core.frontend_options import FrontendOptions
from smg_trio.core.template_content_format import CONTENT_FORMATS
from smg_trio.errors import ConfigError

if TYPE_CHECKING:
    from smg_trio.serving.config import GatewayConfig

FRONTEND_OPTION_FLAGS = (
    "response_role",
    "return_tokens_as_token_ids",
    "enable_prompt_tokens_details",
    "max_log_len",
    "chat_template_content_format",
    "default_chat_template_kwargs",
    "exclude_tools_when_tool_choice_none",
    "trust_request_chat_template",
    "enable_force_include_usage",
)


def add_frontend_option_flags(serve: argparse.ArgumentParser) -> None:
    answers = serve.add_argument_group("prompts and answers (vLLM's flags of the same names)")

    def switch(flag: str, meaning: str) -> None:
        answers.add_argument(flag, action="store_const", const=True, default=None, help=meaning)

    answers.add_argument(
        "--response-role",
        metavar="ROLE",
        help="the chat reply's role after a generation prompt (default assistant)",
    )
    answers.add_argument(
        "--return-tokens-as-token-ids",
        action="store_const",
        const=True,
        default=None,
        help="logprob tokens as token_id:N (a request's return_tokens_as_token_ids wins)",
    )
    answers.add_argument(
        "--enable-prompt-tokens-details",
        action="store_const",
        const=True,
        default=None,
        help="usage.prompt_tokens_details on every chat and completions answer, 0 cached "
        "tokens included (off: only when the engine reported cached tokens)",
    )
    answers.add_argument(
        "--chat-template-content-format",
        choices=CONTENT_FORMATS,
        help="how a message's content reaches the chat template: a string, or OpenAI's list of "
        "parts (default auto: as the template reads it, vLLM's detection)",
    )
    answers.add_argument(
        "--default-chat-template-kwargs",
        type=_json_object,
        metavar="JSON",
        help="chat template variables for every request (a request's chat_template_kwargs win)",
    )
    switch(
        "--exclude-tools-when-tool-choice-none",
        "with tool_choice none, the tools are not shown to the chat template",
    )
    switch(
        "--trust-request-chat-template",
        "render a request's own chat_template (else a 400)",
    )
    switch(
        "--enable-force-include-usage",
        "every stream carries usage, on each chunk and at its end, asked or not",
    )
    answers.add_argument(
        "--max-log-len",
        type=int,
        metavar="N",
        help="with --log-requests, at most N characters of the body and of each completion "
        "text in the log line (default: all)",
    )


def frontend_options(config: GatewayConfig) -> FrontendOptions:
    return FrontendOptions(
        response_role=config.response_role,
        return_tokens_as_token_ids=config.return_tokens_as_token_ids,
        prompt_tokens_details=config.enable_prompt_tokens_details,
        content_format=config.chat_template_content_format,
        default_chat_template_kwargs=config.default_chat_template_kwargs,
        exclude_tools_when_tool_choice_none=config.exclude_tools_when_tool_choice_none,
        trust_request_chat_template=config.trust_request_chat_template,
        force_include_usage=config.enable_force_include_usage,
    )


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not JSON: {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def check_frontend_option_fields(config: GatewayConfig) -> None:
    if not config.response_role:
        raise ConfigError("response_role must not be empty")
    if config.max_log_len is not None and config.max_log_len < 0:
        raise ConfigError(f"max_log_len must be 0 or more, got {config.max_log_len}")
