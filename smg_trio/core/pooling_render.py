"""Pure. The pooling endpoints' response bodies (docs/pooling.md §3), in vLLM's shapes: one
entry per input in input order, `usage` counting the prompt tokens; an embedding as floats or,
with `encoding_format: "base64"`, its float32 bytes (little-endian unless `endianness` says
"big") in base64; a classification's probabilities with the label of the most probable class.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Sequence

from smg_trio.core.pooling_inputs import PoolingPlan
from smg_trio.errors import ClientError
from smg_trio.neutral.pooling import PooledOutput
from smg_trio.wire.openai_pooling import (
    CLASSIFY_PATH,
    EMBEDDINGS_PATH,
    ClassificationData,
    EmbeddingData,
    Entry,
    PoolingData,
    PoolingList,
    PoolingUsage,
)
from smg_trio.wire.openai_responses import JSON_ENCODER


def pooling_body(
    plan: PoolingPlan,
    outputs: Sequence[PooledOutput],
    *,
    created: int,
    labels: Sequence[str],
) -> bytes:
    """The response to `plan`, `outputs[i]` being input i's result."""
    prompt_tokens = sum(output.prompt_tokens for output in outputs)
    usage = PoolingUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens)

    def body(prefix: str, data: list[Entry]) -> bytes:
        return JSON_ENCODER.encode(
            PoolingList(
                id=f"{prefix}-{plan.request_id}",
                created=created,
                model=plan.model,
                data=data,
                usage=usage,
            )
        )

    if plan.path == EMBEDDINGS_PATH:
        return body(
            "embd", [EmbeddingData(i, _encoded(plan, o.values)) for i, o in enumerate(outputs)]
        )
    if plan.path == CLASSIFY_PATH:
        return body(
            "classify", [_classified(i, _finite(o.values), labels) for i, o in enumerate(outputs)]
        )
    return body(
        "pooling", [PoolingData(i, _encoded(plan, o.values)) for i, o in enumerate(outputs)]
    )


def _encoded(plan: PoolingPlan, values: tuple[float, ...]) -> list[float] | str:
    options = plan.options
    if options.encoding_format == "float":
        return _finite(values)
    order = ">" if options.endianness == "big" else "<"
    return base64.b64encode(struct.pack(f"{order}{len(values)}f", *values)).decode("ascii")


def _finite(values: tuple[float, ...]) -> list[float]:
    """JSON has no NaN or infinity: a tensor holding one is vLLM's 400 (a model whose head
    was never trained, e.g. a `--convert classify` model without classifier weights, answers
    NaN; docs/pooling.md §3)."""
    if not all(math.isfinite(value) for value in values):
        raise ClientError("Out of range float values are not JSON compliant")
    return list(values)


def _classified(index: int, probs: list[float], labels: Sequence[str]) -> ClassificationData:
    best = max(range(len(probs)), key=probs.__getitem__) if probs else None
    label = None if best is None or best >= len(labels) else labels[best]
    return ClassificationData(index=index, label=label, probs=probs, num_classes=len(probs))
