"""Pure. What preparing a request needs of a model (`PromptModel`), built once at startup."""

from __future__ import annotations

import msgspec

from smg_trio.core.chat_template import ChatTemplate
from smg_trio.core.frontend_options import FrontendOptions
from smg_trio.core.prompt_bound import PromptLimit, kept_tokens
from smg_trio.core.tokenizer import TokenizerLike


class PromptModel(msgspec.Struct, frozen=True, kw_only=True):
    """The parts of a model that preparing a request needs; built once at startup."""

    name: str
    tokenizer: TokenizerLike
    chat_template: ChatTemplate | None
    vocab_size: int
    context_length: int | None = None
    eos_token_id: int | None = None  # the primary EOS (config.json's first)
    tool_call_parser: str | None = None  # --tool-call-parser, --reasoning-parser
    reasoning_parser: str | None = None
    # The most input bytes one token stands for (None: unbounded), for prompt_bound's byte rule.
    max_bytes_per_token: int | None = None
    harmony_stop_ids: tuple[int, ...] = ()  # gpt-oss: <|return|>, <|call|> (harmony_prompt.py)
    stream_interval: int = 1  # --stream-interval (docs/performance.md §4)
    # The special tokens the tokenizer configs name (transformers' `all_special_ids`): the
    # ones a reasoning count drops (docs/tools-and-reasoning.md §11). None: unknown.
    named_special_ids: frozenset[int] | None = None
    frontend: FrontendOptions = (
        FrontendOptions()
    )  # --response-role and the like (frontend_options.py)

    def prompt_limit(self, truncate_prompt_tokens: int | None, param: str) -> PromptLimit | None:
        """What bounds a prompt's tokenization (docs/limits.md §1); None without a context."""
        if self.context_length is None:
            return None
        return PromptLimit(
            context_length=self.context_length,
            max_bytes_per_token=self.max_bytes_per_token,
            keep=kept_tokens(truncate_prompt_tokens, self.context_length),
            param=param,
        )
