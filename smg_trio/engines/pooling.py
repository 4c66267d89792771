"""Pure. The reference engines' pooler (docs/pooling.md §5): deterministic vectors derived from
the prompt ids alone, so tests can predict every value without a model.

- `embed`: `hidden_size` values drawn from a generator seeded with a digest of the prompt ids,
  truncated to `dimensions` when asked (Matryoshka, as vLLM's pooler truncates before it
  normalises), then L2-normalised unless `use_activation` is false.
- `classify`: `num_labels` logits drawn the same way; softmax unless `use_activation` is false
  (one label: sigmoid, as vLLM's classifier activation).
Every value is rounded to float32, the dtype the wire carries, so what the gateway decodes is
exactly what `pooled_values` returns.
"""

from __future__ import annotations

import hashlib
import math
import random
import struct
from collections.abc import Sequence


def pooled_values(
    prompt_ids: Sequence[int],
    *,
    task: str,
    hidden_size: int,
    num_labels: int,
    dimensions: int | None = None,
    use_activation: bool | None = None,
) -> tuple[float, ...]:
    """The pooler's output for `prompt_ids` (see the module doc); ValueError for a task or
    dimensions the pooler cannot serve."""
    draws = _draws(prompt_ids)
    activate = use_activation is not False
    if task == "embed":
        size = hidden_size if dimensions is None else dimensions
        if not 1 <= size <= hidden_size:
            raise ValueError(f"dimensions must be in [1, {hidden_size}], got {size}")
        values = [draws.gauss(0.0, 1.0) for _ in range(hidden_size)][:size]
        if activate:
            norm = math.sqrt(sum(v * v for v in values)) or 1.0
            values = [v / norm for v in values]
        return _float32(values)
    if task == "classify":
        if dimensions is not None:
            raise ValueError("classify takes no dimensions")
        logits = [draws.gauss(0.0, 2.0) for _ in range(num_labels)]
        if activate:
            logits = _sigmoid(logits) if num_labels == 1 else _softmax(logits)
        return _float32(logits)
    raise ValueError(f"unknown pooling task {task!r}")


def _draws(prompt_ids: Sequence[int]) -> random.Random:
    digest = hashlib.blake2b(struct.pack(f"<{len(prompt_ids)}q", *prompt_ids), digest_size=8)
    return random.Random(int.from_bytes(digest.digest(), "little"))


def _softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = sum(exps)
    return [e / total for e in exps]


def _sigmoid(logits: list[float]) -> list[float]:
    return [1.0 / (1.0 + math.exp(-x)) for x in logits]


def _float32(values: list[float]) -> tuple[float, ...]:
    return struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values))
