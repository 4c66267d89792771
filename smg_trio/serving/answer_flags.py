"""I/O (startup). The flags of `smg-trio serve` that shape every chat prompt, answer and request
log line, by vLLM's names (docs/vllm-frontend.md §2 maps vLLM's own onto them):
`--response-role`, `--return-tokens-as-token-ids`, `--enable-prompt-tokens-details`,
`--max-log-len`, `--chat-template-content-format`; and the `AnswerOptions` and content format
the gateway is built with.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from smg_trio.core.answer_options import AnswerOptions
from smg_trio.core.template_content_format import CONTENT_FORMATS, ContentFormatFlag
from smg_trio.errors import ConfigError

if TYPE_CHECKING:
    from smg_trio.serving.config import GatewayConfig

ANSWER_FLAGS = (
    "response_role",
    "return_tokens_as_token_ids",
    "enable_prompt_tokens_details",
    "max_log_len",
    "chat_template_content_format",
)


def add_answer_flags(serve: argparse.ArgumentParser) -> None:
    answers = serve.add_argument_group("answers (vLLM's flags of the same names)")
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
        "--max-log-len",
        type=int,
        metavar="N",
        help="with --log-requests, at most N characters of the body and of each completion "
        "text in the log line (default: all)",
    )


def answer_options(config: GatewayConfig) -> AnswerOptions:
    return AnswerOptions(
        response_role=config.response_role,
        return_tokens_as_token_ids=config.return_tokens_as_token_ids,
        prompt_tokens_details=config.enable_prompt_tokens_details,
    )


def content_format(config: GatewayConfig) -> ContentFormatFlag:
    return config.chat_template_content_format


def check_answer_fields(config: GatewayConfig) -> None:
    if not config.response_role:
        raise ConfigError("response_role must not be empty")
    if config.max_log_len is not None and config.max_log_len < 0:
        raise ConfigError(f"max_log_len must be 0 or more, got {config.max_log_len}")
