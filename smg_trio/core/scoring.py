"""Pure. A scoring body → its `ScoringPlan`, and the plan's pooled results → its response body,
as vLLM 0.32 serves `/score` and `/rerank` for an embedding model (docs/pooling.md §8).

An embedding model scores as a bi-encoder: every input of both sides is embedded on its own
(one engine request each: the first side's inputs, then the second's), and the score of a pair
is the cosine similarity of its two embeddings. One first-side input is paired with every
second-side input (1:N), else the sides pair up in order (N:N); `/rerank` is a score of its
one `query` against its `documents`, answered sorted by score, best first, cut to `top_n`.

Inputs are strings (a multimodal `{"content": [...]}` is vLLM's 400 for a text-only model),
encoded with special tokens and checked as an embedding input is (`pooling_inputs.py`:
`truncate_prompt_tokens`, `truncation_side`, vLLM's 400s in vLLM's words). Usage counts the
prompt tokens of every engine request, as vLLM's does.
"""

from __future__ import annotations

import datetime as _dt
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from smg_trio.core.pooling_inputs import PoolingPlan, input_prompts
from smg_trio.core.prepare import PromptModel
from smg_trio.errors import ClientError
from smg_trio.neutral.pooling import PooledOutput, PoolingRequest, PoolingTask
from smg_trio.wire.openai_pooling import EMBEDDINGS_PATH, PoolingOptions, PoolingUsage
from smg_trio.wire.openai_responses import JSON_ENCODER
from smg_trio.wire.openai_scoring import (
    RERANK_PATHS,
    RerankDocument,
    RerankResponse,
    RerankResult,
    RerankUsage,
    ScoreData,
    ScoreResponse,
    ScoringOptions,
    score_sides,
)

COSINE_EPS: Final = 1e-8
"""The smallest norm a vector is divided by (torch's cosine_similarity default, which vLLM uses)."""


@dataclass(frozen=True, slots=True)
class ScoringPlan:
    """A score or rerank request, ready for the engines: one prompt per input of each side."""

    path: str
    embeddings: PoolingPlan  # every input's embedding: the first side's, then the second's
    first_count: int
    documents: tuple[str, ...]  # the second side as the client sent it (rerank echoes it)
    top_n: int
    options: ScoringOptions

    @property
    def request_id(self) -> str:
        return self.embeddings.request_id

    @property
    def model(self) -> str:
        """The name the response carries."""
        return self.embeddings.model

    @property
    def prompts(self) -> tuple[tuple[int, ...], ...]:
        return self.embeddings.prompts

    def requests(self) -> list[PoolingRequest]:
        return self.embeddings.requests()

    @property
    def prompt_tokens(self) -> int:
        return self.embeddings.prompt_tokens


def prepare_scoring(
    path: str,
    options: ScoringOptions,
    model: PromptModel,
    *,
    architecture: str,
    request_id: str,
    now: _dt.datetime,
) -> ScoringPlan:
    """The plan of a scoring body for an embedding model (module doc); a 400 in vLLM's words
    for what vLLM refuses. `architecture`: the model's, for vLLM's multimodal refusal."""
    rerank = path in RERANK_PATHS
    if rerank:
        first_side, second_side = options.query, options.documents
    else:
        first_side, second_side = score_sides(options)
    first = _texts(first_side, architecture)
    second = _texts(second_side, architecture)
    if len(first) > 1 and len(first) != len(second):
        raise ClientError("Input lengths must be either 1:1, 1:N or N:N")
    if not first:
        raise ClientError("At least one text element must be given")
    if not second:
        raise ClientError("At least one text_pair element must be given")
    as_embeddings = PoolingOptions(
        input=[*first, *second],
        add_special_tokens=True,
        truncate_prompt_tokens=options.truncate_prompt_tokens,
        truncation_side=options.truncation_side,
        use_activation=options.use_activation,
    )
    embeddings = PoolingPlan(
        path=EMBEDDINGS_PATH,
        request_id=options.request_id or request_id,
        model=model.name,
        task=PoolingTask.EMBED,
        prompts=input_prompts(as_embeddings, model, now=now),
        options=as_embeddings,
    )
    return ScoringPlan(
        path=path,
        embeddings=embeddings,
        first_count=len(first),
        documents=tuple(second),
        top_n=options.top_n,
        options=options,
    )


def _texts(side: Any, architecture: str) -> list[str]:
    items = side if isinstance(side, list) else [side]
    for item in items:
        if isinstance(item, dict) and "content" in item:
            raise ClientError(f"MultiModalParam is not supported for {architecture}")
        if not isinstance(item, str):
            raise ClientError(
                "Invalid request: each input to score must be a string or a multimodal "
                '{"content": [...]}'
            )
    return list(items)


def pair_scores(plan: ScoringPlan, outputs: Sequence[PooledOutput]) -> list[float]:
    """Each pair's cosine similarity (one first-side input pairs with every second-side one)."""
    firsts, seconds = outputs[: plan.first_count], outputs[plan.first_count :]
    if len(firsts) == 1:
        firsts = list(firsts) * len(seconds)
    return [cosine(a.values, b.values) for a, b in zip(firsts, seconds, strict=True)]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors as vLLM computes it (each divided by its norm, a
    norm clamped to at least `COSINE_EPS`), rounded to the float32 vLLM answers."""
    norm_a = max(math.sqrt(math.fsum(x * x for x in a)), COSINE_EPS)
    norm_b = max(math.sqrt(math.fsum(y * y for y in b)), COSINE_EPS)
    value = math.fsum((x / norm_a) * (y / norm_b) for x, y in zip(a, b, strict=True))
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded


def scoring_body(plan: ScoringPlan, outputs: Sequence[PooledOutput], *, created: int) -> bytes:
    """The response to `plan`, `outputs[i]` being engine request i's result."""
    scores = pair_scores(plan, outputs)
    if not all(math.isfinite(score) for score in scores):  # a NaN tensor (pooling_render.py)
        raise ClientError("Out of range float values are not JSON compliant")
    tokens = sum(output.prompt_tokens for output in outputs)
    request_id = f"score-{plan.request_id}"
    if plan.path not in RERANK_PATHS:
        return JSON_ENCODER.encode(
            ScoreResponse(
                id=request_id,
                created=created,
                model=plan.model,
                data=[ScoreData(index=i, score=score) for i, score in enumerate(scores)],
                usage=PoolingUsage(prompt_tokens=tokens, total_tokens=tokens),
            )
        )
    results = [
        RerankResult(index=i, document=RerankDocument(text=text), relevance_score=score)
        for i, (text, score) in enumerate(zip(plan.documents, scores, strict=True))
    ]
    results.sort(key=lambda result: result.relevance_score, reverse=True)
    top_n = plan.top_n if plan.top_n > 0 else len(results)
    return JSON_ENCODER.encode(
        RerankResponse(
            id=request_id,
            model=plan.model,
            usage=RerankUsage(prompt_tokens=tokens, total_tokens=tokens),
            results=results[:top_n],
        )
    )
