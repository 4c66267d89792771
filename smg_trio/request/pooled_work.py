"""I/O. What `Gateway.handle` needs of any request served by pooling (docs/pooling.md §1, §8):
its engine requests, one per input, the answer of their results, and what routing and
admission read (the prompts, the `model` and `user` fields). A pooling path (`/v1/embeddings`,
`/pooling`, `/classify`) and a scoring path (`/score`, `/rerank`, ...) each prepare theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

from smg_trio.core.pooling_render import pooling_body
from smg_trio.neutral.pooling import PoolingRequest
from smg_trio.request.pooling import Answer, prepare_pooling_request
from smg_trio.request.scoring import prepare_scoring_request, scoring_answer
from smg_trio.request.served_model import ServedModel
from smg_trio.wire.openai_scoring import SCORING_PATHS


@dataclass(frozen=True, slots=True)
class PooledWork:
    requests: list[PoolingRequest]
    answer: Answer
    prompts: tuple[tuple[int, ...], ...]
    model: str | None  # the body's `model` field
    user: str | None  # the body's `user` field (the sticky-session key)

    @property
    def prompt_tokens(self) -> int:
        return sum(len(prompt) for prompt in self.prompts)


async def prepare_pooled_work(
    path: str, body: bytes, served: ServedModel, request_id: str
) -> PooledWork:
    """The work of a pooling or scoring body for `served`; its problems are ClientErrors."""
    if path in SCORING_PATHS:
        scoring = await prepare_scoring_request(path, body, served, request_id)
        return PooledWork(
            requests=scoring.requests(),
            answer=scoring_answer(scoring),
            prompts=scoring.prompts,
            model=scoring.options.model,
            user=scoring.options.user,
        )
    plan = await prepare_pooling_request(path, body, served, request_id)
    labels = served.pooler.labels
    return PooledWork(
        requests=plan.requests(),
        answer=lambda outputs, created: pooling_body(plan, outputs, created=created, labels=labels),
        prompts=plan.prompts,
        model=plan.options.model,
        user=plan.options.user,
    )
