"""Pure. The JSON of vLLM's scoring endpoints (docs/pooling.md §8): `POST /score` and
`/v1/score`, `/rerank`, `/v1/rerank` and `/v2/rerank`, their request options and their
response bodies.

A score body names its two sides with one of four pairs of fields, taken in vLLM's order:
`queries`+`documents`, `queries`+`items`, `data_1`+`data_2`, `text_1`+`text_2`; a rerank body
has one `query` and its `documents`. Each side is one input or a list; an input is a string or
a multimodal `{"content": [...]}` (`core/scoring.py` checks them). vLLM's fields this gateway
does not honour are decoded only to be refused with a 400 naming them; unknown extra fields
stay ignored, as vLLM's server ignores them (docs/request-fields.md).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from smg_trio.errors import ClientError
from smg_trio.wire.json_depth import check_json_depth
from smg_trio.wire.openai_decode import _decode_error as decode_error
from smg_trio.wire.openai_pooling import PoolingUsage, check_input_options
from smg_trio.wire.request_numbers import Int

SCORE_PATHS: Final = ("/score", "/v1/score")
RERANK_PATHS: Final = ("/rerank", "/v1/rerank", "/v2/rerank")
SCORING_PATHS: Final = (*SCORE_PATHS, *RERANK_PATHS)

SCORE_SIDES: Final = (
    ("queries", "documents"),
    ("queries", "items"),
    ("data_1", "data_2"),
    ("text_1", "text_2"),
)
"""A score body's two sides, in the order vLLM tries its request forms."""

_MISSING: Final[Any] = msgspec.UNSET


class ScoringOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Every field of vLLM's score and rerank requests."""

    model: str | None = None
    user: str | None = None
    # A score body's sides (one pair of them) ...
    queries: Any = _MISSING
    documents: Any = _MISSING
    items: Any = _MISSING
    data_1: Any = _MISSING
    data_2: Any = _MISSING
    text_1: Any = _MISSING
    text_2: Any = _MISSING
    # ... or a rerank body's.
    query: Any = _MISSING
    top_n: Int = 0
    use_activation: bool | None = None
    truncate_prompt_tokens: Int | None = None
    truncation_side: str | None = None
    request_id: str | None = None
    priority: Int = 0
    max_tokens_per_query: Int = 0
    max_tokens_per_doc: Int = 0
    # vLLM's fields this gateway does not honour: refused, never ignored.
    instruction: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    padding: str | None = None
    cache_salt: str | None = None
    mm_processor_kwargs: dict[str, Any] | None = None


_OPTIONS_DECODER: Final = msgspec.json.Decoder(ScoringOptions)
_REFUSED: Final = ("instruction", "chat_template_kwargs", "padding", "cache_salt")


def decode_scoring_options(path: str, body: bytes) -> ScoringOptions:
    """A scoring path's body: decoded and its option values checked (its inputs are checked
    by `core/scoring.py`); any problem is a 400 naming the parameter."""
    check_json_depth(body)
    try:
        options = _OPTIONS_DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise decode_error(exc) from None
    for name in _REFUSED:
        if getattr(options, name) is not None:
            raise ClientError(
                f"{name} is not supported by this gateway: it feeds a score template, which "
                "no model served here uses",
                param=name,
            )
    if options.mm_processor_kwargs is not None:
        raise ClientError(
            "mm_processor_kwargs is not supported by this gateway", param="mm_processor_kwargs"
        )
    for name in ("max_tokens_per_query", "max_tokens_per_doc"):
        if getattr(options, name) != 0:
            raise ClientError(
                f"{name} is not supported by this gateway (truncate_prompt_tokens is)",
                param=name,
            )
    check_input_options(options.truncate_prompt_tokens, options.truncation_side, options.priority)
    if path in RERANK_PATHS:
        _check_rerank_fields(options)
    else:
        _check_score_fields(options)
    return options


def score_sides(options: ScoringOptions) -> tuple[Any, Any]:
    """A score body's two sides: the first pair of `SCORE_SIDES` it carries both of."""
    for first, second in SCORE_SIDES:
        one, two = getattr(options, first), getattr(options, second)
        if one is not _MISSING and two is not _MISSING:
            return one, two
    raise AssertionError("decode_scoring_options checked that a pair is there")


def _check_score_fields(options: ScoringOptions) -> None:
    for first, second in SCORE_SIDES:
        if getattr(options, first) is not _MISSING and getattr(options, second) is not _MISSING:
            break
    else:
        pairs = ", ".join(f"{a} and {b}" for a, b in SCORE_SIDES)
        raise ClientError(
            f"Field required: a score request gives its two sides as one of: {pairs}",
            param="queries",
        )
    if options.query is not _MISSING:
        raise ClientError("query is a rerank field; /score takes queries", param="query")
    if options.top_n != 0:
        raise ClientError("top_n is a rerank field", param="top_n")


def _check_rerank_fields(options: ScoringOptions) -> None:
    if options.query is _MISSING:
        raise ClientError("Field required: query", param="query")
    if options.documents is _MISSING:
        raise ClientError("Field required: documents", param="documents")
    if isinstance(options.query, list):
        raise ClientError("query must be one string or one multimodal input", param="query")
    if options.top_n < 0:
        raise ClientError("top_n must be greater than or equal to 0", param="top_n")
    for name in ("queries", "items", "data_1", "data_2", "text_1", "text_2"):
        if getattr(options, name) is not _MISSING:
            raise ClientError(f"{name} is a score field; a rerank takes query", param=name)


# --- responses --------------------------------------------------------------------------------


class ScoreData(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    object: str = "score"
    score: float


class ScoreResponse(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: str = "list"
    created: int
    model: str
    data: list[ScoreData]
    usage: PoolingUsage


class RerankDocument(msgspec.Struct, frozen=True):
    text: str | None = None
    multi_modal: list[Any] | None = None


class RerankResult(msgspec.Struct, frozen=True):
    index: int
    document: RerankDocument
    relevance_score: float


class RerankUsage(msgspec.Struct, frozen=True):
    prompt_tokens: int
    total_tokens: int


class RerankResponse(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    model: str
    usage: RerankUsage
    results: list[RerankResult]
