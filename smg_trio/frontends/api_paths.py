"""Pure. Which client API each request path speaks: the dialect its responses and errors are
framed in (`core.api_dialect`; docs/client-apis.md §1). Picked once per request from the path,
before the body is read, so even a refused body gets its API's error shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from smg_trio.core.anthropic_rendering import AnthropicDialect
from smg_trio.core.anthropic_request import COUNT_TOKENS_PATH, MESSAGES_PATH
from smg_trio.core.api_dialect import OPENAI, ApiDialect
from smg_trio.core.responses_dialect import ResponsesDialect
from smg_trio.request.endpoints import RESPONSES_PATH

DIALECTS: Final[Mapping[str, Callable[[], ApiDialect]]] = {
    RESPONSES_PATH: ResponsesDialect,
    **dict.fromkeys((MESSAGES_PATH, COUNT_TOKENS_PATH), AnthropicDialect),
}
"""Paths that do not speak OpenAI's dialect, with the factory of theirs (one per response)."""


def dialect_for_path(path: str) -> ApiDialect:
    """A fresh dialect for one response to `path`; OpenAI's for every path not listed."""
    factory = DIALECTS.get(path)
    return OPENAI if factory is None else factory()
