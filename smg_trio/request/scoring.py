"""I/O. The scoring paths (docs/pooling.md §8): `/score`, `/v1/score`, `/rerank`, `/v1/rerank`
and `/v2/rerank`, prepared into the engine requests of their inputs and the answer of their
results; served by `request/pooling.py` like any pooling request (one nursery, one worker).

Only an embedding model scores here (a bi-encoder: cosine similarities of embeddings,
`core/scoring.py`). A model served for generation gets vLLM's 404, as for `/v1/embeddings`
(docs/pooling.md §4); a classification model with one label, which vLLM serves as a
cross-encoder, is refused with a 400 saying so; one with more labels gets vLLM's 404.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from functools import partial

from smg_trio.core.scoring import ScoringPlan, prepare_scoring, scoring_body
from smg_trio.errors import ClientError
from smg_trio.neutral.pooling import PooledOutput, PoolingTask, Task
from smg_trio.request.pooling import Answer
from smg_trio.request.preparation import off_loop_if_large
from smg_trio.request.served_model import ServedModel
from smg_trio.wire.openai_scoring import decode_scoring_options


async def prepare_scoring_request(
    path: str, body: bytes, served: ServedModel, request_id: str
) -> ScoringPlan:
    """A scoring path's body → its plan for `served` (on a worker thread when large)."""
    options = decode_scoring_options(path, body)
    served.check(options.model)
    pooler = served.pooler
    if pooler.pooling_task is PoolingTask.CLASSIFY and len(pooler.labels) == 1:
        raise ClientError(
            f"The model `{served.key}` would score as a cross-encoder (a classifier with one "
            f"label), which this gateway does not serve: {path} is served for embedding models",
            param="model",
        )
    served.check_task(Task.EMBED, path)
    return await off_loop_if_large(
        partial(
            prepare_scoring,
            path,
            options,
            served.prompt_model,
            architecture=served.key,
            request_id=request_id,
            now=dt.datetime.now(dt.UTC),
        ),
        body,
    )


def scoring_answer(plan: ScoringPlan) -> Answer:
    """The body of `plan`'s results (core/scoring.py), as `run_pooling` asks for it."""

    def answer(outputs: Sequence[PooledOutput], created: int) -> bytes:
        return scoring_body(plan, outputs, created=created)

    return answer
